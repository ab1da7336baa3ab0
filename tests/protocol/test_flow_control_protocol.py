"""Flow control under crashes, on both backends: a sweeper that dies right before or right after saving a key's
calendar, and a worker that dies around taking, extending or giving back a key's slot or recording its
destination's push-back, lose no held occurrence and apply each exactly once (docs/design.md §6); a key's window is
never booked twice, and a dead attempt's slot is free once its lease has ended."""

from __future__ import annotations

from datetime import timedelta

import pytest
from crashable import LEASE, Crash, CrashableCore, CrashAt
from test_execute_protocol import DUE, assert_one_outcome, crash_once, due_occurrences

from scheduler.core.model.job import RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.core.tenancy.flow_control import flow_owner

TENANT = "tenant"  # the protocol world's tenant
OWNER = flow_owner(TENANT, "payments")


class _Heartbeating:
    """A target that heartbeats once (extending its lease and slots), then applies the effect."""

    def __init__(self, world: CrashableCore) -> None:
        self.world = world

    def invoke(self, call: TargetCall) -> str | None:
        call.heartbeat()
        return self.world.sink.invoke(call)


class _BusyOnce:
    """A destination that answers its first call 429 with Retry-After, then applies the effect."""

    def __init__(self, world: CrashableCore, retry_after: float) -> None:
        self.world, self.retry_after, self.calls = world, retry_after, 0

    def invoke(self, call: TargetCall) -> str | None:
        self.calls += 1
        if self.calls == 1:
            raise TargetFailure("retryable", "HTTP 429", retry_after=self.retry_after, status=429)
        return self.world.sink.invoke(call)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_sweep_crash_around_a_keys_calendar_loses_nothing_and_books_no_window_twice(
    world: CrashableCore, when: str
) -> None:
    job_ids = [
        world.create({"type": "once", "at": rfc3339(DUE)}, flow_control={"key": "payments", "rate": 2})
        for _ in range(6)
    ]
    crash = CrashAt(world.flows, "save_calendar", when)

    with pytest.raises(Crash):
        world.core(flows=crash).sweeper("doomed").sweep(world.deadline())
    assert crash.fired
    world.clock.advance(LEASE.total_seconds() * 10)  # the doomed sweeper's bucket claim ends
    world.run_until(DUE + timedelta(minutes=5))

    world.assert_exactly_once([occurrence_key(job_id, DUE) for job_id in job_ids])
    assert world.queue.dead == []
    state = world.flows.get(TENANT, "payments")
    assert state is not None and state.calendar is not None
    assert all(count <= 1 for count in state.calendar.booked.values())


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("method", ["acquire", "extend", "release"])
def test_a_worker_crash_around_a_keys_slot_still_applies_the_occurrence_once(
    world: CrashableCore, method: str, when: str
) -> None:
    (key,) = due_occurrences(world, 1, flow_control={"key": "payments", "parallelism": 1})
    crash = CrashAt(world.flow_slots, method, when)
    doomed = world.core(flow_slots=crash).executor("doomed", {"http": _Heartbeating(world)})

    crash_once(world, doomed)
    assert crash.fired
    world.run_until(DUE + timedelta(minutes=4))

    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)
    assert world.queue.dead == []
    now = world.clock.now()
    assert world.flow_slots.acquire(OWNER, 1, "probe", now, now + LEASE) == 0  # the dead attempt's slot is free


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_worker_crash_around_a_push_back_still_applies_the_occurrence_once(world: CrashableCore, when: str) -> None:
    (key,) = due_occurrences(world, 1, flow_control={"key": "payments", "rate": 5})
    crash = CrashAt(world.flows, "throttled", when)
    doomed = world.core(flows=crash).executor("doomed", {"http": _BusyOnce(world, retry_after=20)})

    crash_once(world, doomed)
    assert crash.fired
    world.run_until(DUE + timedelta(minutes=4))

    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)
    assert world.queue.dead == []
    state = world.flows.get(TENANT, "payments")
    assert state is not None
    assert (state.paused_until is not None) == (when == "after")  # a push-back recorded only if its write landed
