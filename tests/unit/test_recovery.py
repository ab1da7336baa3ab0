"""Bounded recovery: a worker holds its batch for a short hold time, renewed while it lives, so what a
dead worker held is visible again within that time instead of the queue's visibility timeout."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest

from scheduler.adapters.heartbeat import ThreadHeartbeats
from scheduler.adapters.memory import FakeClock, MemoryBatchVisibility, MemoryQueue, RecordingMetrics
from scheduler.core.execution.recovery import HeldBatch, HoldConfig
from scheduler.core.ports import Dispatch

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
CONFIG = HoldConfig(renew_fraction=None)


def batch_of(n: int) -> tuple[FakeClock, MemoryQueue, list]:
    clock = FakeClock(T0)
    queue = MemoryQueue(clock, visibility_timeout=720)
    queue.send([Dispatch(f"job{i}", "acme", T0, T0, 1) for i in range(n)], T0)
    return clock, queue, queue.receive(10)


def visible_in(queue: MemoryQueue, clock: FakeClock) -> dict[str, float]:
    return {m.message_id: (m.visible_at - clock.now()).total_seconds() for m in queue.messages.values()}


def test_the_hold_is_renewed_three_times_per_hold_time() -> None:
    assert HoldConfig().hold_seconds == 20
    assert HoldConfig().renew_every == pytest.approx(20 / 3)
    assert HoldConfig(hold_seconds=30, renew_fraction=0.5).renew_every == 15
    assert CONFIG.renew_every is None


def test_a_batch_is_held_for_the_hold_time_not_the_queue_visibility_timeout() -> None:
    clock, queue, received = batch_of(4)
    assert set(visible_in(queue, clock).values()) == {720}
    metrics = RecordingMetrics()

    with HeldBatch(MemoryBatchVisibility(queue, received), {m.message_id: None for m in received}, CONFIG, metrics):
        assert set(visible_in(queue, clock).values()) == {20}

    assert metrics.counts == {"BatchHolds": 1}
    # The worker dies here (nothing settles the records): 20 s later every one of them is received again.
    clock.advance(19.9)
    assert queue.receive(10) == []
    clock.advance(0.1)
    assert {m.message_id for m in queue.receive(10)} == {m.message_id for m in received}


def test_a_renewal_covers_only_the_records_not_yet_settled() -> None:
    clock, queue, received = batch_of(3)
    first, second, third = (m.message_id for m in received)
    held = HeldBatch(MemoryBatchVisibility(queue, received), dict.fromkeys([first, second, third]), CONFIG,
                     RecordingMetrics())  # fmt: skip
    with held:
        clock.advance(6)
        held.release(first)
        queue.change_visibility(received[0], 5)  # the settled record's own visibility (a retry's backoff)
        held.release(second)
        queue.delete(received[1])  # acknowledged
        held.renew()
        assert held.held == [third]
        assert visible_in(queue, clock) == {first: 5, third: 20}
    assert held.holds == 2


def test_a_message_no_longer_held_is_reported_and_the_others_are_still_held() -> None:
    clock, queue, received = batch_of(2)
    metrics = RecordingMetrics()
    keys = {received[0].message_id: "job0:k", received[1].message_id: "job1:k"}
    # Another worker received the first message again (its receipt changed) before this worker's hold.
    queue.messages[received[0].message_id].receipt = "someone-else"
    with HeldBatch(MemoryBatchVisibility(queue, received), keys, CONFIG, metrics):
        pass
    assert metrics.counts == {"BatchHolds": 1, "BatchHoldFailures": 1}
    assert visible_in(queue, clock)[received[1].message_id] == 20


class Unreachable:
    def __init__(self) -> None:
        self.calls = 0

    def hold(self, message_ids: object, seconds: int) -> list[str]:
        self.calls += 1
        raise ConnectionError("queue unreachable")


def test_a_failed_hold_never_fails_the_batch_and_is_counted() -> None:
    metrics = RecordingMetrics()
    visibility = Unreachable()
    with HeldBatch(visibility, {"m1": None}, CONFIG, metrics) as held:
        held.renew()
    assert visibility.calls == 2
    assert metrics.counts == {"BatchHoldFailures": 2}


class Recording:
    def __init__(self) -> None:
        self.holds: list[tuple[list[str], int, float]] = []
        self.in_hold = threading.Event()
        self.slow = 0.0

    def hold(self, message_ids: list[str], seconds: int) -> list[str]:
        self.in_hold.set()
        time.sleep(self.slow)
        self.holds.append((list(message_ids), seconds, time.monotonic()))
        self.in_hold.clear()
        return []


def test_the_heartbeat_renews_the_hold_while_the_batch_runs() -> None:
    visibility = Recording()
    config = HoldConfig(hold_seconds=1, renew_fraction=0.1)
    with HeldBatch(visibility, {"a": None, "b": None}, config, RecordingMetrics(), ThreadHeartbeats()) as held:
        time.sleep(0.35)
        held.release("a")
        time.sleep(0.25)
    renewals = len(visibility.holds)
    time.sleep(0.25)
    assert len(visibility.holds) == renewals  # no renewal after the batch ends
    assert visibility.holds[0][:2] == (["a", "b"], 1)
    assert 4 <= renewals <= 8
    assert visibility.holds[-1][:2] == (["b"], 1)


def test_a_release_waits_for_a_renewal_in_flight() -> None:
    """Otherwise a renewal could land after the record's own visibility change (a retry's backoff) and undo it."""
    visibility = Recording()
    held = HeldBatch(visibility, {"a": None}, CONFIG, RecordingMetrics())
    visibility.slow = 0.2
    renewal = threading.Thread(target=held.renew)
    renewal.start()
    assert visibility.in_hold.wait(1)
    held.release("a")
    released_at = time.monotonic()
    renewal.join()
    assert visibility.holds[0][2] <= released_at
