"""A sweep's sends land each message just before its fire time (issue 14, item 2): SQS delays are whole seconds,
so a message sent at an arbitrary instant lands up to a second early and the worker waits the rest out inside
Lambda, billed. `Dispatcher.send_landing` times each send so the message lands at most ~110 ms early."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from scheduler.adapters.memory import FakeClock, MemoryQueue, RecordingMetrics
from scheduler.composition import Configs
from scheduler.core.dispatch import DispatchConfig, Dispatcher
from scheduler.core.ports import Dispatch
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
