"""Execution budgets under crashes, on both backends: a worker that dies right before or right after taking,
extending or giving back its tenant's execution slot leaves the occurrence applied exactly once, its outcome
recorded once (docs/design.md §6), nothing dead-lettered, and the slot free again once the dead attempt's
lease has ended, so the tenant is delayed, never stuck."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from test_execute_protocol import DUE, assert_one_outcome, crash_once, one_due_occurrence
from world import LEASE, CrashAt, World

from scheduler.adapters.dynamodb import DynamoTenantSlots
from scheduler.adapters.memory import MemoryTenantSlots
from scheduler.core.concurrency import ConcurrencyConfig, ConcurrencyGate
from scheduler.core.execute import Executor
from scheduler.core.model import RunState
from scheduler.core.ports import TargetCall

TENANT = "tenant"  # the protocol world's tenant


def tenant_slots(world: World) -> Any:
    if world.backend == "memory":
        return MemoryTenantSlots()
    return DynamoTenantSlots(world.jobs.table, world.jobs.client)


class _Heartbeating:
    """A target that heartbeats once (extending its lease and slot), then applies the effect."""

    def __init__(self, world: World) -> None:
        self.world = world

    def invoke(self, call: TargetCall) -> str | None:
        call.heartbeat()
        return self.world.sink.invoke(call)


def gated(world: World, slots: Any, worker: str = "w") -> Executor:
    """A worker whose tenant may run one occurrence at a time."""
    executor = world.executor(worker, target=_Heartbeating(world))
    executor.gate = ConcurrencyGate(slots, ConcurrencyConfig(default=1), world.metrics)
    return executor


def recover(world: World, slots: Any, until: Any) -> None:
    sweeper = world.sweeper("recovery")
    while world.clock.now() < until:
        sweeper.sweep(world.deadline())
        while world.work(gated(world, slots, "recovery")):
            pass
        world.clock.advance(5)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("method", ["acquire", "extend", "release"])
def test_a_worker_crash_around_its_execution_slot_still_applies_the_occurrence_once(
    world: World, method: str, when: str
) -> None:
    key = one_due_occurrence(world)
    slots = tenant_slots(world)
    crash = CrashAt(slots, method, when)

    crash_once(world, gated(world, crash, "doomed"))
    assert crash.fired
    recover(world, slots, DUE + timedelta(minutes=4))

    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)
    assert world.queue.dead == []
    # the dead attempt's slot is free (its lease ended): the tenant's one slot can be taken
    now = world.clock.now()
    assert slots.acquire(TENANT, 1, "probe", now, now + LEASE) == 0


def test_an_occurrence_waits_while_a_dead_attempt_holds_the_tenants_only_slot(world: World) -> None:
    key = one_due_occurrence(world)
    slots = tenant_slots(world)
    now = world.clock.now()
    assert slots.acquire(TENANT, 1, "a-worker-that-died", now, now + LEASE) == 0

    handled = world.work(gated(world, slots))

    assert handled == 1 and world.sink.effects.get(key, 0) == 0
    assert world.ledger.get(key) is None  # not claimed: no attempt spent
    assert world.metrics.counts["TenantConcurrencyThrottled"] == 1
    recover(world, slots, now + LEASE + timedelta(minutes=2))
    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)
