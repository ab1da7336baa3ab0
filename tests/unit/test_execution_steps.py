"""Each step of the execution protocol on its own (scheduler.core.execution): the job's source, the guards, the
execution slot, the claim, the lease, the call, the record and the overlap policy. test_execute.py runs them
together through the Executor."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from scheduler.core.errors import LeaseLost
from scheduler.core.execution.call import Call, Called
from scheduler.core.execution.claim import Claim
from scheduler.core.execution.claimed import Claimed
from scheduler.core.execution.config import ExecuteConfig
from scheduler.core.execution.guards import Guards, skip_reason
from scheduler.core.execution.lease import RENEWALS_BEFORE_CALL, Lease
from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.overlap import Overlap
from scheduler.core.execution.record import Recorder
from scheduler.core.execution.slots import ExecutionSlots
from scheduler.core.execution.source import MessageCopy, StoredJob, source_of
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.model.job import JobState, RunState
from scheduler.core.ports import AttemptEnd, Dispatch, Execution, TargetCall
from scheduler.core.tenancy.concurrency import RESEND_AFTER, ConcurrencyConfig, ConcurrencyGate, Permit
from tests.unit.fixtures import LEASE, TENANT, FakeTarget, MemoryCore, StubMessage, permanent

CONFIG = ExecuteConfig(lease=LEASE, heartbeat_fraction=None)
LEASE_S = LEASE.total_seconds()
OWNER = "worker-1/attempt"


class CountingJobs:
    def __init__(self, world: MemoryCore) -> None:
        self.world, self.reads = world, 0

    def get(self, job_id: str):  # type: ignore[no-untyped-def]
        self.reads += 1
        return self.world.jobs.get(job_id)


def ports(world: MemoryCore) -> StepPorts:
    return StepPorts(world.ledger, world.queue, world.clock, CONFIG, world.metrics)


def recorder(world: MemoryCore) -> Recorder:
    return Recorder(ports(world), None)


def slots(world: MemoryCore, gate: ConcurrencyGate | None = None) -> ExecutionSlots:
    return ExecutionSlots(ports(world), gate)


def claim(world: MemoryCore, dispatch: Dispatch, message: StubMessage | None = None) -> Claimed:
    job = world.job(dispatch.job_id)
    taken = Claim(ports(world), recorder(world)).take(
        job, dispatch, OWNER, Permit.unlimited(TENANT, OWNER), message or StubMessage(), StoredJob(world.jobs)
    )
    assert isinstance(taken, Claimed)
    return taken


def lease(world: MemoryCore, claimed: Claimed) -> Lease:
    return Lease(claimed, ports(world), slots(world))


# -- the job's source ---------------------------------------------------------------------------------------


def test_a_dispatch_with_a_copy_of_its_job_reads_nothing_and_one_without_reads_the_store(world: MemoryCore) -> None:
    job, dispatch = world.due()
    jobs = CountingJobs(world)

    with_copy = replace(dispatch, job_copy=job)
    copied = source_of(with_copy, jobs)
    assert isinstance(copied, MessageCopy) and copied.on_copy
    assert copied.job(with_copy) == job and jobs.reads == 0

    stored = source_of(dispatch, jobs)
    assert isinstance(stored, StoredJob) and not stored.on_copy
    assert stored.job(dispatch) == job and jobs.reads == 1


# -- the guards ---------------------------------------------------------------------------------------------


def test_on_time_hides_an_early_message_and_waits_out_a_sub_second_one(world: MemoryCore) -> None:
    _, dispatch = world.due()
    slept: list[float] = []
    guards = Guards(ports(world), slept.append)

    world.clock.advance(-5)
    early = guards.on_time(dispatch)
    assert isinstance(early, Outcome) and (early.why, early.hide_seconds) == (Why.EARLY, 5)

    world.clock.advance(4.5)
    assert guards.on_time(dispatch) == world.now() and slept == [pytest.approx(0.5)]


def test_skip_reason_names_a_cancelled_or_paused_job_and_none_for_a_live_one(world: MemoryCore) -> None:
    job, dispatch = world.due()

    assert skip_reason(job, dispatch) is None
    cancelled = job.model_copy(update={"state": JobState.CANCELLED, "version": job.version + 1})
    paused = job.model_copy(update={"state": JobState.PAUSED, "version": job.version + 1})
    assert skip_reason(cancelled, dispatch) == AttemptEnd(RunState.CANCELLED, error="job cancelled")
    # Only a pause skip is reopenable, by a later version than the paused job's: it keeps that version, and gives
    # back the attempt it did not make
    assert skip_reason(paused, dispatch) == AttemptEnd(
        RunState.SKIPPED, error="job paused", refund_attempt=True, paused_version=job.version + 1
    )


# -- the execution slot -------------------------------------------------------------------------------------


def test_without_a_gate_every_attempt_holds_an_unlimited_permit(world: MemoryCore) -> None:
    _, dispatch = world.due()
    permit = slots(world).take(dispatch, OWNER, StubMessage(), world.now())
    assert isinstance(permit, Permit) and permit.slots is None


def test_a_throttled_occurrence_received_often_is_sent_again_as_a_fresh_message(world: MemoryCore) -> None:
    _, dispatch = world.due()
    gate = ConcurrencyGate(world.tenant_slots, ConcurrencyConfig(default=1), world.metrics)
    assert isinstance(slots(world, gate).take(dispatch, "other/1", StubMessage(), world.now()), Permit)

    sent = len(world.sent())
    hidden = slots(world, gate).take(dispatch, OWNER, StubMessage(receive_count=1), world.now())
    assert len(world.sent()) == sent
    again = slots(world, gate).take(dispatch, OWNER, StubMessage(receive_count=RESEND_AFTER), world.now())
    assert isinstance(hidden, Outcome) and isinstance(again, Outcome)

    assert (hidden.ack, hidden.why) == (False, Why.THROTTLED)
    assert (again.ack, again.why, again.detail) == (True, Why.THROTTLED, "sent again")
    assert [d.key for d in world.sent()[sent:]] == [dispatch.key]


# -- the claim ----------------------------------------------------------------------------------------------


def test_a_claim_bumps_the_epoch_and_a_second_one_is_told_to_wait_for_the_live_lease(world: MemoryCore) -> None:
    _, dispatch = world.due()
    claimed = claim(world, dispatch)
    assert (claimed.execution.epoch, claimed.at) == (1, world.now())

    step = Claim(ports(world), recorder(world))
    job = world.job(dispatch.job_id)
    again = step.take(job, dispatch, "worker-2/x", Permit.unlimited(TENANT, "worker-2/x"), StubMessage(), MessageCopy())
    assert isinstance(again, Outcome) and again.why is Why.RUNNING_ELSEWHERE
    assert again.hide_seconds == LEASE_S + CONFIG.lease_margin_seconds


def test_a_refused_claim_without_an_item_looks_again_in_a_second(world: MemoryCore) -> None:
    _, dispatch = world.due()
    step = Claim(ports(world), recorder(world))
    assert step.not_claimed(dispatch, None, world.now(), False) == Outcome.hide(1, Why.CLAIM_REFUSED)


# -- the lease ----------------------------------------------------------------------------------------------


def test_a_fresh_lease_is_not_renewed_before_the_call(world: MemoryCore) -> None:
    _, dispatch = world.due()
    message = StubMessage()
    held = lease(world, claim(world, dispatch, message))

    assert held.renew_before_call() is held
    assert message.extensions == [] and "LeaseRenewedBeforeCall" not in world.metrics.counts


def test_a_lease_aged_since_the_claim_is_renewed_before_the_call(world: MemoryCore) -> None:
    _, dispatch = world.due()
    message = StubMessage()
    held = lease(world, claim(world, dispatch, message))
    world.clock.advance(LEASE_S * 3 / 4)  # past what a heartbeat keeps (half the lease without a background heartbeat)

    assert held.renew_before_call() is held
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.lease_until == world.now() + CONFIG.lease
    assert message.extensions == [LEASE_S + CONFIG.lease_margin_seconds]
    assert world.metrics.counts["LeaseRenewedBeforeCall"] == 1


def test_a_lease_that_keeps_ageing_is_given_back_uncalled(world: MemoryCore) -> None:
    _, dispatch = world.due()
    held = lease(world, claim(world, dispatch))
    world.clock.advance(LEASE_S * 3 / 4)
    renewals = 0
    real_renew = held.renew

    def paused_renew() -> bool:
        nonlocal renewals
        renewals += 1
        kept = real_renew()
        world.clock.advance(LEASE_S * 3 / 4)  # each renewal paused as long
        return kept

    held.renew = paused_renew  # type: ignore[method-assign]
    outcome = held.renew_before_call()

    assert renewals == RENEWALS_BEFORE_CALL
    assert outcome is not None and outcome.why is Why.THROTTLED
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.RETRY_WAIT and run.attempts == 0


def test_a_lease_another_attempt_took_is_not_called_on(world: MemoryCore) -> None:
    _, dispatch = world.due()
    held = lease(world, claim(world, dispatch))
    world.clock.advance(LEASE_S + 1)
    claim(world, dispatch)  # another attempt takes over the expired lease (at least once)

    outcome = held.renew_before_call()

    assert outcome is not None and outcome.why is Why.LEASE_LOST and world.metrics.counts["LeaseLost"] == 1


# -- the call -----------------------------------------------------------------------------------------------


def test_the_call_passes_key_and_fencing_token_and_returns_the_result(world: MemoryCore) -> None:
    _, dispatch = world.due()
    target = FakeTarget(world.clock, "200 OK")
    called = Call(ports(world), {"handler": target}, None).run(lease(world, claim(world, dispatch)))

    assert called == Called(result="200 OK")
    [call] = target.calls
    assert (call.key, call.token) == (dispatch.key, 1)


def test_a_call_without_an_adapter_fails_permanently_and_one_that_loses_its_lease_aborts(world: MemoryCore) -> None:
    _, dispatch = world.due()
    held = lease(world, claim(world, dispatch))

    missing = Call(ports(world), {}, None).run(held)
    assert isinstance(missing, Called) and missing.failure is not None and missing.failure.kind == "permanent"

    class Losing:
        def invoke(self, call: TargetCall) -> str | None:
            raise LeaseLost(call.occurrence_key)

    lost = Call(ports(world), {"handler": Losing()}, None).run(held)
    assert isinstance(lost, Outcome) and lost.why is Why.LEASE_LOST


# -- the record ---------------------------------------------------------------------------------------------


def test_a_permanent_failure_is_recorded_dead_and_dead_lettered(world: MemoryCore) -> None:
    _, dispatch = world.due()
    claimed = claim(world, dispatch)

    outcome = recorder(world).failed(claimed, permanent())

    assert (outcome.ack, outcome.why) == (True, Why.DEAD)
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.DEAD and run.dead_lettered
    assert world.metrics.counts["DeadLetters"] == 1


def test_a_write_after_another_attempt_took_over_is_fenced(world: MemoryCore) -> None:
    _, dispatch = world.due()
    stale = claim(world, dispatch)
    world.clock.advance(LEASE_S + 1)
    claim(world, dispatch)

    outcome = recorder(world).record(stale, AttemptEnd(RunState.SUCCEEDED, result="late"))

    assert outcome.why is Why.FENCED and world.metrics.counts["FencedWrites"] == 1


def test_outcomes_are_announced_only_with_an_outbox(world: MemoryCore) -> None:
    job, _ = world.due()
    assert not recorder(world).announces(job)


# -- the overlap policy -------------------------------------------------------------------------------------


def test_an_occurrence_of_a_recurring_job_waits_behind_a_running_one_under_buffer_one(world: MemoryCore) -> None:
    job = world.create({"type": "rate", "every_seconds": 60}, overlap_policy="buffer_one")
    first = Dispatch(job.job_id, TENANT, world.now(), world.now(), job.version, "scheduled")
    claim(world, first)  # still running
    world.clock.advance(LEASE_S / 2)  # within its lease
    second = Dispatch(
        job.job_id, TENANT, first.scheduled_for + timedelta(seconds=60), world.now(), job.version, "scheduled"
    )
    step = Overlap(ports(world), recorder(world))

    outcome = step.check(claim(world, second))

    assert isinstance(outcome, Outcome) and outcome.why is Why.BUFFERED
    parked = world.ledger.get(second.key)
    assert isinstance(parked, Execution) and parked.buffered
    assert step.parks(job, first)
