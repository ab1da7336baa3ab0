"""A sweep's sends land each message just before its fire time: SQS delays are whole seconds,
so a message sent at an arbitrary instant lands up to a second early and the worker waits the rest out inside
Lambda, billed. `Dispatcher.send_landing` times each send so the message lands at most ~110 ms early."""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime, timedelta

import pytest

from scheduler.adapters.clock import SystemClock
from scheduler.adapters.memory import FakeClock, MemoryQueue, RecordingMetrics
from scheduler.composition import Configs
from scheduler.core.ports import Dispatch
from scheduler.core.sweep.dispatch import DispatchConfig, Dispatcher
from scheduler.settings import Settings
from tests.unit.fixtures import T0

CONFIG = DispatchConfig(timedelta(minutes=5), timedelta(seconds=60), timedelta(days=1))
EARLIEST = CONFIG.landing_lead + CONFIG.landing_window  # type: ignore[operator]


class FlakyQueue(MemoryQueue):
    """Fails its `fail_at`-th send (a crash in the middle of a page's sends)."""

    fail_at: int | None = None
    calls: int = 0

    def send(self, dispatches: object, now: object) -> None:  # type: ignore[override]
        self.calls += 1
        if self.calls == self.fail_at:
            raise ConnectionError("the sweeper died here")
        super().send(dispatches, now)  # type: ignore[arg-type]


def dispatcher(queue: MemoryQueue, clock: FakeClock, metrics: RecordingMetrics) -> Dispatcher:
    return Dispatcher(None, None, queue, clock, CONFIG, metrics, sleep=clock.advance)  # type: ignore[arg-type]


def page(rng: random.Random, count: int, now_offset_s: float = 0.0) -> list[Dispatch]:
    """Occurrences due from now to a few minutes ahead, at arbitrary milliseconds (and a few already due)."""
    out = []
    for i in range(count):
        at = T0 + timedelta(milliseconds=rng.randint(-2_000, 300_000) + int(now_offset_s * 1000))
        out.append(Dispatch(f"job-{i}", "acme", at, at, 1))
    return out


@pytest.mark.parametrize("count", [1, 7, 60, 400])
def test_every_message_lands_at_most_110_ms_before_its_time_and_never_after(count: int) -> None:
    # Given a page of occurrences at arbitrary milliseconds
    clock, metrics = FakeClock(T0), RecordingMetrics()
    queue = MemoryQueue(clock)
    due = page(random.Random(count), count)

    # When the sweep sends them landing on time
    dispatcher(queue, clock, metrics).send_landing(due)

    # Then each lands within 110 ms before its time (one already due, at once), and the sweep waited under a second
    assert len(queue.messages) == count
    for message in queue.messages.values():
        early = message.dispatch.send_at - message.visible_at
        if message.dispatch.send_at <= T0:
            assert message.visible_at == T0
        else:
            assert timedelta(0) <= early <= EARLIEST, (message.dispatch.send_at, message.visible_at)
    assert clock.now() - T0 < timedelta(seconds=1)
    assert metrics.counts.get("SendsOffWindow", 0) == 0


def test_without_alignment_messages_land_up_to_a_second_early() -> None:
    # (what the worker used to wait out: the reason for the mechanism)
    clock = FakeClock(T0)
    queue = MemoryQueue(clock)
    due = page(random.Random(7), 200)
    queue.send(due, clock.now())
    earliness = [(m.dispatch.send_at - m.visible_at).total_seconds() for m in queue.messages.values()]
    assert max(earliness) > 0.8 and sum(earliness) / len(earliness) > 0.3


def test_a_crash_in_the_middle_of_the_sends_loses_nothing_when_the_page_is_sent_again() -> None:
    # Given a page whose third request fails (the sweeper dies there)
    clock, metrics = FakeClock(T0), RecordingMetrics()
    queue = FlakyQueue(clock)
    queue.fail_at = 3
    due = page(random.Random(3), 60)
    with pytest.raises(ConnectionError):
        dispatcher(queue, clock, metrics).send_landing(due)
    sent_before = {m.dispatch.key for m in queue.messages.values()}
    assert 0 < len(sent_before) < len(due)

    # When the page runs again (the sweep's re-run sends its plan again; the ledger absorbs the duplicates)
    dispatcher(queue, clock, metrics).send_landing(due)

    # Then every occurrence was sent, still landing on time
    keys = {m.dispatch.key for m in queue.messages.values()}
    assert keys == {d.key for d in due}
    for message in queue.messages.values():
        if message.dispatch.send_at > clock.now() + timedelta(seconds=1):
            assert timedelta(0) <= message.dispatch.send_at - message.visible_at <= EARLIEST


def test_a_page_bigger_than_a_second_of_requests_sends_the_rest_at_once_and_counts_them() -> None:
    # Given sends that take 50 ms each (a slow queue): 400 messages cannot all go out inside their windows
    clock, metrics = FakeClock(T0), RecordingMetrics()

    class SlowQueue(MemoryQueue):
        def send(self, dispatches: object, now: object) -> None:  # type: ignore[override]
            super().send(dispatches, now)  # type: ignore[arg-type]
            clock.advance(0.05 * max(1, len(dispatches) // 10))  # type: ignore[arg-type]

    queue = SlowQueue(clock)
    due = page(random.Random(11), 400)
    dispatcher(queue, clock, metrics).send_landing(due)

    # Then none is lost, none due later than the send's own length lands after its time, and those sent off
    # their window are counted
    assert len(queue.messages) == 400
    later = [m for m in queue.messages.values() if m.dispatch.send_at > clock.now()]
    assert later and all(m.visible_at <= m.dispatch.send_at for m in later)
    assert metrics.counts["SendsOffWindow"] > 0


@pytest.mark.parametrize(
    ("count", "waits"), [(CONFIG.landing_min_messages - 1, False), (CONFIG.landing_min_messages, True)]
)
def test_a_sweep_aligns_only_pages_big_enough_to_pay_for_the_wait(count: int, waits: bool) -> None:
    # Given a page just under and one at the threshold, sent by a sweep
    clock, metrics = FakeClock(T0), RecordingMetrics()
    queue = MemoryQueue(clock)
    due = page(random.Random(5), count)

    Dispatcher(None, None, queue, clock, CONFIG, metrics, sleep=clock.advance).send(due, land_on_time=True)  # type: ignore[arg-type]

    # Then the small one went at once (the workers wait out its remainders), the big one was aligned
    assert len(queue.messages) == count
    assert (clock.now() > T0) == waits
    assert ("SendAlignmentSeconds" in metrics.counts) == waits


@pytest.mark.parametrize(("sweep_concurrency", "landed"), [(1, False), (8, True)])
def test_a_sweep_that_works_its_buckets_at_once_lands_even_a_small_page(sweep_concurrency: int, landed: bool) -> None:
    # Given the deployed configuration, with a minute's buckets swept in turn or at once (their waits overlap)
    configs = Configs.of(Settings(sweep_concurrency=sweep_concurrency))
    clock, metrics = FakeClock(T0), RecordingMetrics()
    queue = MemoryQueue(clock)
    due = [d for d in page(random.Random(9), 40) if d.send_at > T0 + timedelta(seconds=2)][:3]

    # When a sweep sends a page of 3
    dispatcher = Dispatcher(None, None, queue, clock, configs.dispatch, metrics, sleep=clock.advance)  # type: ignore[arg-type]
    dispatcher.send(due, land_on_time=True)

    # Then at once, each lands at most ~110 ms before its time; in turn, it goes at once and lands up to 1 s early
    early = [(m.dispatch.send_at - m.visible_at).total_seconds() for m in queue.messages.values()]
    assert len(early) == 3 and all(e >= 0 for e in early)
    assert all(e <= EARLIEST.total_seconds() for e in early) == landed


class CountingQueue(MemoryQueue):
    """Counts the SendMessageBatch requests its sends would make (10 messages a request)."""

    requests: int = 0
    fail_first: bool = False

    def send(self, dispatches: object, now: object) -> None:  # type: ignore[override]
        with self.lock:
            self.requests += -(-len(dispatches) // 10)  # type: ignore[arg-type]
            if self.fail_first:
                self.fail_first = False
                raise ConnectionError("SQS went away")
        super().send(dispatches, now)  # type: ignore[arg-type]


def chains(board: Dispatcher | list[Dispatcher], pages: list[list[Dispatch]]) -> list[BaseException | None]:
    """Each page landed from its own thread (the buckets of a minute swept at once), through one dispatcher or
    each through its own; returns what each raised."""
    outcomes: list[BaseException | None] = [None] * len(pages)
    ready = threading.Barrier(len(pages))

    def run(index: int) -> None:
        ready.wait()
        dispatcher = board[index] if isinstance(board, list) else board
        try:
            dispatcher.send_landing(pages[index])
        except BaseException as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(pages))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    return outcomes


def herd_pages(now: datetime, buckets: int, each: int) -> list[list[Dispatch]]:
    """`buckets` pages of `each` occurrences due at arbitrary milliseconds of one second, 2 s from now."""
    rng = random.Random(buckets * each)
    return [
        [
            Dispatch(f"job-{b}-{i}", "acme", at, at, 1)
            for i in range(each)
            for at in [now + timedelta(seconds=2, milliseconds=rng.randint(0, 999))]
        ]
        for b in range(buckets)
    ]


def test_the_buckets_swept_at_once_share_their_landing_requests_and_each_message_still_lands_on_time() -> None:
    # Given a herd's minute: 8 buckets of 40 occurrences due in the same second, swept at once (threads, real time)
    clock, metrics = SystemClock(), RecordingMetrics()
    shared = CountingQueue(clock)
    apart = CountingQueue(clock)
    pages = herd_pages(clock.now(), 8, 40)

    # When they land through one sweep's dispatcher, and (the control) each through a dispatcher of its own
    assert chains(Dispatcher(None, None, shared, clock, CONFIG, metrics, sleep=time.sleep), pages) == [None] * 8  # type: ignore[arg-type]
    alone = [Dispatcher(None, None, apart, clock, CONFIG, metrics, sleep=time.sleep) for _ in pages]  # type: ignore[arg-type]
    assert chains(alone, pages) == [None] * 8

    # Then every message was sent once, none lands after its time, nearly all within the bound before it (a thread
    # this machine wakes late sends late, and that message lands early instead), and the shared sends took far
    # fewer requests: about one per 10 messages (40 against 85 when measured)
    assert len(shared.messages) == 320
    early = [message.dispatch.send_at - message.visible_at for message in shared.messages.values()]
    assert all(e >= timedelta(0) for e in early)
    assert sum(e <= EARLIEST + timedelta(milliseconds=20) for e in early) >= 0.9 * len(early)
    assert shared.requests < 0.7 * apart.requests
    assert shared.requests <= 320 / 10 + 15  # at most one request per landing window beyond the full ones


def test_a_failed_request_carrying_another_buckets_messages_fails_that_bucket_too_and_leaves_nothing_behind() -> None:
    # Given two buckets whose messages share the first request, and that request fails
    clock, metrics = SystemClock(), RecordingMetrics()
    queue = CountingQueue(clock)
    queue.fail_first = True
    now = clock.now()
    due = now + timedelta(seconds=1, milliseconds=500)
    pages = [[Dispatch(f"job-{b}-{i}", "acme", due, due, 1) for i in range(5)] for b in range(2)]
    dispatcher = Dispatcher(None, None, queue, clock, CONFIG, metrics, sleep=time.sleep)  # type: ignore[arg-type]

    # When both land at once
    outcomes = chains(dispatcher, pages)

    # Then both buckets' sends raise (each page re-runs, so neither checkpoints past an unsent message), nothing
    # was sent, and the board is empty for the next sweep
    assert all(isinstance(outcome, ConnectionError) for outcome in outcomes), outcomes
    assert not queue.messages
    assert dispatcher._landing is not None and not dispatcher._landing._pending

    # And a re-run sends them all
    assert chains(dispatcher, pages) == [None, None]
    assert len(queue.messages) == 10
