"""Execution budgets under crashes, on both backends: a worker that dies right before or right after taking,
extending or giving back its tenant's execution slot leaves the occurrence applied exactly once, its outcome
recorded once (docs/design.md §6), nothing dead-lettered, and the slot free again once the dead attempt's
lease has ended, so the tenant is delayed, never stuck."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from crashable import LEASE, CrashableCore, CrashAt
from test_execute_protocol import DUE, assert_one_outcome, crash_once, one_due_occurrence

from scheduler.adapters.dynamodb import DynamoTenantSlots
from scheduler.adapters.memory import MemoryTenantSlots
from scheduler.core.execution.executor import Executor
from scheduler.core.model.job import RunState
from scheduler.core.ports import TargetCall
from scheduler.core.tenancy.concurrency import ConcurrencyConfig, ConcurrencyGate

TENANT = "tenant"  # the protocol world's tenant


def tenant_slots(world: CrashableCore) -> Any:
    if world.backend == "memory":
        return MemoryTenantSlots()
    return DynamoTenantSlots(world.jobs.table, world.jobs.client)


class _Heartbeating:
    """A target that heartbeats once (extending its lease and slot), then applies the effect."""

    def __init__(self, world: CrashableCore) -> None:
        self.world = world

    def invoke(self, call: TargetCall) -> str | None:
        call.heartbeat()
        return self.world.sink.invoke(call)


def gated(world: CrashableCore, slots: Any, worker: str = "w") -> Executor:
    """A worker whose tenant may run one occurrence at a time."""
    executor = world.executor(worker, target=_Heartbeating(world))
    return replace(executor, gate=ConcurrencyGate(slots, ConcurrencyConfig(default=1), world.metrics))


def recover(world: CrashableCore, slots: Any, until: Any) -> None:
    sweeper = world.sweeper("recovery")
    while world.clock.now() < until:
        sweeper.sweep(world.deadline())
        while world.work(gated(world, slots, "recovery")):
            pass
        world.clock.advance(5)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("method", ["acquire", "extend", "release"])
def test_a_worker_crash_around_its_execution_slot_still_applies_the_occurrence_once(
    world: CrashableCore, method: str, when: str
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


def test_an_occurrence_waits_while_a_dead_attempt_holds_the_tenants_only_slot(world: CrashableCore) -> None:
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


# -- a worker paused past its lease between its claim and the target call ----------------------------------------


class _PausedAfterClaim:
    """The world's ledger, whose first claim returns after a pause longer than the lease, during which `meanwhile`
    runs (what other workers do while this one is frozen)."""

    def __init__(self, world: CrashableCore, meanwhile: Any) -> None:
        self._world, self._inner, self._meanwhile, self._paused = world, world.ledger, meanwhile, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def claim(self, *args: Any, **kwargs: Any) -> Any:
        claimed = self._inner.claim(*args, **kwargs)
        if not self._paused:
            self._paused = True
            self._world.clock.advance(LEASE.total_seconds() + 1)
            self._meanwhile()
        return claimed


def paused_after_claim(world: CrashableCore, slots: Any, meanwhile: Any, ledger: Any = None) -> Executor:
    """A worker of the one-slot tenant whose claim returns after a pause past the lease (over `ledger`, if given)."""
    executor = gated(world, slots, "paused")
    paused = _PausedAfterClaim(world, meanwhile)
    if ledger is not None:
        paused._inner = ledger
    return replace(executor, ledger=paused)


def test_a_worker_paused_past_its_lease_after_the_claim_renews_it_and_calls_the_target_once(
    world: CrashableCore,
) -> None:
    key = one_due_occurrence(world)
    slots = tenant_slots(world)

    # When the worker's claim returns after a pause past its lease, nobody having taken the slot meanwhile
    handled = world.work(paused_after_claim(world, slots, meanwhile=lambda: None))

    # Then it renewed the lease and the slot before calling the target, and recorded the outcome under its claim
    assert handled == 1 and world.sink.effects[key] == 1
    assert world.metrics.counts["LeaseRenewedBeforeCall"] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)
    now = world.clock.now()
    assert slots.acquire(TENANT, 1, "probe", now, now + LEASE) == 0  # released


def test_a_worker_paused_past_its_lease_whose_slot_was_taken_gives_the_attempt_back_without_calling(
    world: CrashableCore,
) -> None:
    # Given the tenant's one slot, taken by another attempt while the worker was paused after its claim
    key = one_due_occurrence(world)
    slots = tenant_slots(world)

    def another_attempt_takes_the_slot() -> None:
        now = world.clock.now()
        assert slots.acquire(TENANT, 1, "another-attempt", now, now + LEASE) == 0  # the paused one's lease ended

    world.work(paused_after_claim(world, slots, another_attempt_takes_the_slot))

    # Then it did not call the target beside the other attempt: it gave its attempt back, claimable, none spent
    assert world.sink.effects.get(key, 0) == 0
    run = world.ledger.get(key)
    assert run is not None and run.state == RunState.RETRY_WAIT and run.attempts == 0, run
    # and once the other attempt's slot is free, the occurrence runs once
    slots.release(TENANT, 0, "another-attempt")
    recover(world, slots, world.clock.now() + timedelta(minutes=3))
    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize(("method", "slot_taken"), [("heartbeat", False), ("finish", True)])
def test_a_crash_around_the_renewal_or_the_give_back_before_the_call_still_applies_the_occurrence_once(
    world: CrashableCore, method: str, slot_taken: bool, when: str
) -> None:
    # Given a worker paused past its lease after its claim (its slot taken meanwhile, when it gives the attempt
    # back), dying right before or after the ledger write that renews its lease or gives the attempt back
    key = one_due_occurrence(world)
    slots = tenant_slots(world)

    def meanwhile() -> None:
        if slot_taken:
            now = world.clock.now()
            assert slots.acquire(TENANT, 1, "another-attempt", now, now + timedelta(seconds=5)) == 0

    crash = CrashAt(world.ledger, method, when)
    crash_once(world, paused_after_claim(world, slots, meanwhile, ledger=crash))
    assert crash.fired

    # Then the recovery applies it once, records one outcome and dead-letters nothing
    recover(world, slots, world.clock.now() + timedelta(minutes=4))
    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)
    assert world.queue.dead == []
