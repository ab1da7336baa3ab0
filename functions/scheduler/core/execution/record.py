"""Record (docs/design.md §3.4, step 7): the attempt's outcome written conditional on its epoch and owner, a failure
classified (retried after its backoff, dead-lettered, or left to an operator), and a terminal outcome announced; and
the one write of an attempt that found no job (step 1), unclaimed."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from scheduler.core.errors import Fenced
from scheduler.core.execution.claimed import Claimed
from scheduler.core.execution.events import Outbox
from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.retry import backoff, may_retry
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.model.job import Job, RunState
from scheduler.core.model.keys import fire_at
from scheduler.core.ports import AttemptEnd, Dispatch, Execution, TargetFailure
from scheduler.core.tenancy.flow_control import PUSH_BACK_STATUSES, FlowKeys

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Recorder:
    ports: StepPorts
    #: Publishes completion events right after the write that records a terminal outcome (None: the sweeper's
    #: outbox drain publishes them all).
    outbox: Outbox | None
    #: Flow-control keys: a keyed job's retry is booked in its key's calendar, and its destination's push-back
    #: (429, 503) recorded on the key (None: no flow control).
    flow: FlowKeys | None = None

    def no_such_job(self, dispatch: Dispatch, now: datetime) -> Outcome:
        """Step 1 found no job (or another tenant's): the occurrence is recorded cancelled, unclaimed."""
        if self.ports.ledger.record_unclaimed(dispatch, RunState.CANCELLED, now, "job does not exist"):
            self.announce(dispatch.key)
        return Outcome.acknowledge(Why.NO_SUCH_JOB)

    def record(self, claimed: Claimed, end: AttemptEnd) -> Outcome:
        """Step 7: a write conditioned on our epoch and owner. A stale worker's write is rejected (fenced).
        A terminal outcome is then announced (its outbox entry was recorded by the same write)."""
        job, execution, state = claimed.job, claimed.execution, end.state
        try:
            recorded = self.ports.ledger.finish(
                execution.key,
                claimed.owner,
                execution.epoch,
                self.ports.clock.now(),
                replace(end, announce=self.announces(job)),
            )
        except Fenced:
            self.ports.metrics.count("FencedWrites")
            log.warning("fenced write rejected", extra={"occurrence_key": execution.key, "epoch": execution.epoch})
            return Outcome.hide(self.ports.config.lease.total_seconds(), Why.FENCED)
        recorded_as: dict[str, Any] = {
            "job_id": job.job_id,
            "occurrence_key": execution.key,
            "state": state.value,
            "error": end.error,
            "attempt": execution.attempts,
        }
        if execution.updated_at is not None:  # the claim's instant: how late this attempt started
            due = fire_at(job.job_id, execution.scheduled_for, job.spec.jitter_seconds)
            recorded_as["lateness_s"] = round((execution.updated_at - due).total_seconds(), 3)
        log.info("occurrence recorded", extra=recorded_as)
        if state.terminal:
            self.announce(execution.key, recorded)
        if state == RunState.RETRY_WAIT:
            return Outcome(False, Why.RECORDED)
        return Outcome(True, Why.RECORDED)

    def failed(self, claimed: Claimed, failure: TargetFailure) -> Outcome:
        """Step 7, a failure: classify and record: RETRY_WAIT with backoff, DEAD, or RECONCILING."""
        job, execution = claimed.job, claimed.execution
        self.ports.metrics.count("TargetFailures")
        now = self.ports.clock.now()
        error = f"attempt {execution.attempts}: {failure.kind}: {failure.message}"[:1000]
        if failure.kind == "ambiguous" and job.spec.delivery == "at_most_once":
            return self.record(claimed, AttemptEnd(RunState.RECONCILING, error=error))
        key = job.flow_key
        if self.flow is not None and key is not None and failure.status in PUSH_BACK_STATUSES:
            self.flow.pushed_back(job.tenant, key, failure.retry_after, now)
        if failure.kind != "permanent":
            delay = backoff(job.spec.retry, execution.attempts, execution.key, failure.retry_after)
            retry_at = now + delay
            if self.flow is not None and key is not None:
                # Retries count against the key: the retry starts at its release in the key's calendar.
                retry_at = max(retry_at, self.flow.retry_release(job.tenant, key, retry_at))
                delay = retry_at - now
            if may_retry(job.spec.retry, execution.attempts, claimed.dispatch.scheduled_for, retry_at):
                outcome = self.record(claimed, AttemptEnd(RunState.RETRY_WAIT, error=error, next_attempt_at=retry_at))
                if outcome.why is Why.RECORDED:
                    self.ports.metrics.count("Retries")
                    log.info("retry scheduled", extra={"occurrence_key": execution.key, "in_s": delay.seconds})
                    return Outcome.hide(delay.total_seconds(), Why.RETRY)
                return outcome
        outcome = self.record(claimed, AttemptEnd(RunState.DEAD, error=error))
        if outcome.why is not Why.RECORDED:
            return outcome
        dead = self.ports.ledger.get(execution.key) or execution
        self.ports.queue.dead_letter(claimed.dispatch, dead)
        self.ports.ledger.mark_dead_lettered(execution.key)
        self.ports.metrics.count("DeadLetters")
        log.error("occurrence dead", extra={"job_id": job.job_id, "occurrence_key": execution.key, "error": error})
        return Outcome.acknowledge(Why.DEAD)

    def announces(self, job: Job) -> bool:
        """Whether `job`'s terminal outcomes are published (its own `events`, else the default); False without an
        outbox. Nothing is written to the outbox for the others: no event, no index write, no clear."""
        if self.outbox is None:
            return False
        return job.spec.events if job.spec.events is not None else self.ports.config.events_by_default

    def announce(self, key: str, recorded: Execution | None = None) -> None:
        """Publish the outcome just recorded for `key`. Never fails the occurrence: whatever is not published
        here stays in the outbox, which the sweeper drains."""
        if self.outbox is None:
            return
        try:
            self.outbox.flush(recorded if recorded is not None else self.ports.ledger.get(key))
        except Exception:
            log.exception("completion event left to the outbox drain", extra={"occurrence_key": key})
