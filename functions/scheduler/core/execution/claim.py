"""The claim (docs/design.md §3.4, step 3): the occurrence's ledger item taken for this attempt, its epoch
bumped (the fencing token of every write after it); or, when the claim is refused, what to do from the item as it
stands."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.core.errors import ClaimRefused
from scheduler.core.execution.claimed import Claimed
from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.record import Recorder
from scheduler.core.execution.source import CopyVoid, JobSource
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.model.job import Job, RunState
from scheduler.core.model.schedules import unindexed_occurrence
from scheduler.core.ports import Attempt, Dispatch, Execution, Hold, MessageControl
from scheduler.core.tenancy.concurrency import Permit

#: A key's release less than this after the fire time is not told as a hold: a message lands up to a second early
#: or late anyway (SQS counts its delays in whole seconds), and a key's calendar rounds a release to its window.
HELD_AT_LEAST = timedelta(seconds=1)


@dataclass(frozen=True)
class Claim:
    ports: StepPorts
    recorder: Recorder

    def take(
        self, job: Job, dispatch: Dispatch, owner: str, permit: Permit, message: MessageControl, source: JobSource
    ) -> Claimed | Outcome:
        """Step 3: claim the occurrence, its lease starting now (whatever taking the slot took). Raises CopyVoid
        when the claim on the message's copy of the job is refused because the job changed since."""
        now = self.ports.clock.now()
        take_over = job.spec.delivery == "at_least_once"
        try:
            attempt = Attempt(
                owner,
                now,
                now + self.ports.config.lease,
                take_over,
                indexed(job, dispatch),
                source.on_copy,
                released_late(dispatch),
            )
            execution = self.ports.ledger.claim(dispatch, attempt)
        except ClaimRefused as refused:
            if refused.void_copy:
                raise CopyVoid() from refused
            return self.not_claimed(dispatch, refused.current, now, self.recorder.announces(job))
        return Claimed(job, dispatch, execution, owner, permit, message, now)

    def not_claimed(self, dispatch: Dispatch, current: Execution | None, now: datetime, announce: bool) -> Outcome:
        """Step 3, refused: decide from the item as it stands."""
        if current is None:
            return Outcome.hide(1, Why.CLAIM_REFUSED)
        if current.state.terminal:
            if current.outbox:
                # The holder recorded the outcome but may have died before publishing it: publish it now
                # rather than at the next sweep (a duplicate event is deduped by its consumers).
                self.recorder.announce(current.key, current)
            if current.state == RunState.DEAD and not current.dead_lettered:
                # The holder recorded DEAD but may have died before the DLQ send: finish its job.
                self.ports.queue.dead_letter(dispatch, current)
                self.ports.ledger.mark_dead_lettered(current.key)
            return Outcome.acknowledge(Why.ALREADY, current.state.value)
        if current.state == RunState.RUNNING:
            assert current.lease_until is not None
            if current.lease_until > now:
                # Maybe the holder's own message redelivered: keep it, look again when the lease has ended.
                wait = (current.lease_until - now).total_seconds() + self.ports.config.lease_margin_seconds
                return Outcome.hide(wait, Why.RUNNING_ELSEWHERE)
            # Expired lease on an at-most-once job: the outcome of the lost attempt is unknown.
            if self.ports.ledger.expire_to(
                current.key,
                current.epoch,
                RunState.RECONCILING,
                now,
                "worker lost mid-run; outcome unknown",
                announce=announce,
            ):
                self.ports.metrics.count("Reconciling")
                self.recorder.announce(current.key)
                return Outcome.acknowledge(Why.RECONCILING)
            return Outcome.hide(1, Why.RACED)
        if current.state == RunState.RETRY_WAIT and current.next_attempt_at is not None:
            return Outcome.hide((current.next_attempt_at - now).total_seconds(), Why.RETRY_NOT_DUE)
        return Outcome.hide(1, Why.NOT_CLAIMABLE, current.state.value)


def indexed(job: Job, dispatch: Dispatch) -> bool:
    """Whether the occurrence's ledger item goes into the run-history index: all but a one-shot job's scheduled
    occurrence, which the run history reads by its key (and no overlap policy reads: it is not recurring)."""
    if dispatch.kind != "scheduled":
        return True
    return unindexed_occurrence(job.spec.schedule, job.created_at) != dispatch.scheduled_for


def released_late(dispatch: Dispatch) -> Hold | None:
    """The hold of a keyed occurrence whose message carries its key's release at least `HELD_AT_LEAST` after its fire
    time (its key's calendar booked it later: a rate hold, or a release after a pause), else None."""
    if dispatch.flow_key is None or dispatch.not_before is None:
        return None
    if dispatch.not_before - dispatch.fire_at < HELD_AT_LEAST:
        return None
    return Hold(dispatch.flow_key, dispatch.fire_at, frozenset({"rate"}))
