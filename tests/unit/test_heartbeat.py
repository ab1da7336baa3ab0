"""The background heartbeat behind the `Heartbeats` port: what a beat does (extend the lease, the slot and the
message; renew a batch's hold) and when beating stops is the core's; when beats happen is the port's (a thread per
heartbeat in production, `ManualHeartbeats` here, where the test says when a period has passed)."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta

import pytest

from scheduler.adapters.heartbeat import ThreadHeartbeats
from scheduler.adapters.memory import FakeClock, ManualHeartbeats, MemoryBatchVisibility, MemoryQueue, RecordingMetrics
from scheduler.core.execution.executor import ExecuteConfig, Executor
from scheduler.core.execution.outcome import Why
from scheduler.core.execution.recovery import HeldBatch, HoldConfig
from scheduler.core.model.job import RunState
from scheduler.core.ports import Dispatch, TargetCall
from scheduler.core.records import Attempt
from tests.unit.fixtures import LEASE, T0, FakeTarget, MemoryCore, StubMessage

#: The deployed lease and heartbeat: a beat every third of the lease.
CONFIG = ExecuteConfig(lease=LEASE)
assert CONFIG.heartbeat_fraction is not None
PERIOD = LEASE.total_seconds() * CONFIG.heartbeat_fraction
#: What a beat extends the message's visibility to: the lease and its margin.
VISIBLE = LEASE.total_seconds() + CONFIG.lease_margin_seconds


def test_each_beat_extends_the_lease_and_the_message_while_the_target_runs() -> None:
    manual = ManualHeartbeats()
    world = MemoryCore.build(heartbeats=manual)
    _, dispatch = world.due()
    message = StubMessage()
    beats: list[int] = []
    leases: list[datetime | None] = []

    def long_call(call: TargetCall) -> str:
        # (an assertion in here would only fail the target: what it sees is recorded and asserted below)
        for _ in range(3):
            world.clock.advance(PERIOD)
            beats.append(manual.beat())
            run = world.ledger.get(dispatch.key)
            leases.append(run.lease_until if run is not None else None)
        return "ok"

    outcome = world.executor(FakeTarget(world.clock, long_call), config=CONFIG).execute(dispatch, message)

    assert outcome.ack
    assert beats == [1, 1, 1]
    [beating] = manual.started
    assert beating.every == pytest.approx(PERIOD) and not beating.running  # stopped when the target returned
    start = dispatch.fire_at
    assert leases == [start + timedelta(seconds=PERIOD * k) + LEASE for k in (1, 2, 3)]
    assert message.extensions == [VISIBLE] * 3  # the lease and its margin, at every beat
    run = world.ledger.get(dispatch.key)
    assert run is not None and (run.state, run.epoch) == (RunState.SUCCEEDED, 1)


def test_a_beat_that_finds_the_lease_taken_stops_beating_and_the_attempt_writes_nothing() -> None:
    manual = ManualHeartbeats()
    world = MemoryCore.build(heartbeats=manual)
    _, dispatch = world.due()
    beats: list[int] = []

    def stalls(call: TargetCall) -> str:
        # Past the lease, another worker takes the occurrence over; then this worker's next beats
        world.clock.advance(LEASE.total_seconds() + 1)
        now = world.now()
        world.ledger.claim(dispatch, Attempt("worker-2/taken", now, now + LEASE, take_over_expired=True))
        beats.extend(manual.beat() for _ in range(2))
        return "must never be recorded"

    outcome = world.executor(FakeTarget(world.clock, stalls), config=CONFIG).execute(dispatch, StubMessage())

    # The first beat found the lease lost and stopped the heartbeat; the attempt recorded nothing
    assert (outcome.ack, outcome.reason, beats) == (False, "lease lost", [1, 0])
    run = world.ledger.get(dispatch.key)
    assert run is not None and (run.state, run.owner, run.epoch) == (RunState.RUNNING, "worker-2/taken", 2)


def test_a_failing_beat_is_retried_next_period() -> None:
    manual = ManualHeartbeats()
    world = MemoryCore.build(heartbeats=manual)
    _, dispatch = world.due()
    message = StubMessage()
    heartbeat = world.ledger.heartbeat
    failures = iter([ConnectionError("throttled")])

    def flaky(*args: object) -> None:
        failure = next(failures, None)
        if failure is not None:
            raise failure
        heartbeat(*args)  # type: ignore[arg-type]

    world.ledger.heartbeat = flaky  # type: ignore[method-assign]

    beats: list[int] = []
    taken: list[Why | None] = []

    def long_call(call: TargetCall) -> str:
        for _ in range(2):
            world.clock.advance(PERIOD)
            beats.append(manual.beat())
            # (the margin: with one beat lost, the lease still holds until the next one lands)
            taken.append(world.executor(worker_id="worker-2").execute(dispatch, StubMessage()).why)
        return "ok"

    outcome = world.executor(FakeTarget(world.clock, long_call), config=CONFIG).execute(dispatch, message)

    assert outcome.ack
    assert beats == [1, 1]  # still beating after the failure
    assert message.extensions == [VISIBLE]  # the first beat failed before extending anything; the second went through
    assert taken == [Why.RUNNING_ELSEWHERE] * 2  # nobody could take the occurrence over meanwhile


def test_a_call_many_leases_long_keeps_its_lease_while_it_beats() -> None:
    # Given a call that runs ten leases, beating at the deployed period
    manual = ManualHeartbeats()
    world = MemoryCore.build(heartbeats=manual)
    _, dispatch = world.due()
    others: list[tuple[Why | None, float]] = []

    def long_call(call: TargetCall) -> str:
        for _ in range(round(10 * LEASE.total_seconds() / PERIOD)):
            world.clock.advance(PERIOD)
            manual.beat()
            # When another worker gets the occurrence's message meanwhile
            other = world.executor(worker_id="worker-2").execute(dispatch, StubMessage())
            others.append((other.why, other.hide_seconds))
        return "ok"

    outcome = world.executor(FakeTarget(world.clock, long_call), config=CONFIG).execute(dispatch, StubMessage())

    # Then it finds the lease live every time, and looks again no later than a lease from then
    assert outcome.ack
    assert {why for why, _ in others} == {Why.RUNNING_ELSEWHERE}
    assert max(hide for _, hide in others) <= VISIBLE
    run = world.ledger.get(dispatch.key)
    assert run is not None and (run.state, run.epoch, run.attempts) == (RunState.SUCCEEDED, 1, 1)


def test_an_executor_whose_config_asks_for_a_heartbeat_needs_heartbeats(world: MemoryCore) -> None:
    # A worker wired without them would never extend its leases: refused when it is built, not when it runs
    with pytest.raises(ValueError, match="heartbeat"):
        Executor(world.jobs, world.ledger, world.queue, {}, world.clock, CONFIG, world.metrics, "worker-1")


def test_a_held_batch_renews_its_hold_at_every_beat_until_it_ends() -> None:
    clock = FakeClock(T0)
    queue = MemoryQueue(clock, visibility_timeout=720)
    queue.send([Dispatch(f"job{i}", "acme", T0, T0, 1) for i in range(2)], T0)
    received = queue.receive(10)
    manual = ManualHeartbeats()
    metrics = RecordingMetrics()
    config = HoldConfig()

    with HeldBatch(MemoryBatchVisibility(queue, received), {m.message_id: None for m in received}, config, metrics,
                   manual) as held:  # fmt: skip
        assert manual.started[0].every == pytest.approx(20 / 3)
        manual.beat()
        held.release(received[0].message_id)
        manual.beat()
    assert manual.beat() == 0  # the batch has ended: no renewal

    assert metrics.counts["BatchHolds"] == 3  # on entry and at each of the two beats


def test_the_thread_heartbeats_beat_every_period_until_stopped() -> None:
    beats: list[float] = []

    def beat() -> bool:
        beats.append(time.monotonic())
        return True

    beating = ThreadHeartbeats().start(beat, 0.02)
    time.sleep(0.15)
    beating.stop()
    stopped = len(beats)
    time.sleep(0.06)

    assert 3 <= stopped <= 8
    assert len(beats) == stopped  # stop() returned with no beat in flight and none after


def test_a_slow_beat_does_not_push_back_the_next_one() -> None:
    # A renewal whose request takes most of a period: the next beat is still due a period after it was due, not a
    # period after it ended (which would eat into the lease's margin at every slow renewal)
    starts: list[float] = []

    def slow_first() -> bool:
        starts.append(time.monotonic())
        if len(starts) == 1:
            time.sleep(0.8)
        return len(starts) < 2

    began = time.monotonic()
    beating = ThreadHeartbeats().start(slow_first, 1.0)
    deadline = time.monotonic() + 5
    while len(starts) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    beating.stop()

    assert len(starts) == 2
    assert starts[0] - began == pytest.approx(1.0, abs=0.4)
    assert starts[1] - starts[0] < 1.5  # 1.0 on a fixed rate; 1.8 if the period counted from the slow beat's end


def test_a_thread_heartbeat_ends_when_its_beat_says_so() -> None:
    calls = threading.Event()
    count = 0

    def once() -> bool:
        nonlocal count
        count += 1
        calls.set()
        return False

    beating = ThreadHeartbeats().start(once, 0.01)
    assert calls.wait(1)
    time.sleep(0.05)
    beating.stop()

    assert count == 1
