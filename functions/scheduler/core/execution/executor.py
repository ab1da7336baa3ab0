"""The execution protocol (docs/design.md §3.4): claim in the ledger, run with a fencing token, record the outcome.

At-least-once delivery becomes exactly-once effect here: every attempt of an occurrence carries the same
occurrence key, every claim bumps the epoch (the fencing token), and every write after the claim is
conditional on that epoch, so a worker that paused past its lease can never record anything.

`Executor.execute` runs the steps in order; each lives in its own module of `scheduler.core.execution`:

1. guards (`guards`): never before the fire time; a job that exists; an occurrence left to a resume;
2. the execution slot (`slots`): one of the tenant's slots, or the occurrence waits;
3. the claim (`claim`), on the job from its source (`source`: the message's copy, or the store);
4. guards after the claim: a job cancelled, paused or rescheduled since (`guards.skip_reason`), an earlier
   occurrence still running (`overlap`);
5. the lease (`lease`): renewed before the call when the attempt was paused since its claim, or given back;
6. the call (`call`), the lease kept by a heartbeat;
7. the record (`record`): the outcome written under the fencing token, retried or dead-lettered, announced;
   and what was parked behind this occurrence released (`overlap`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from scheduler.core.execution.call import Call, Called
from scheduler.core.execution.claim import Claim
from scheduler.core.execution.claimed import Claimed
from scheduler.core.execution.events import Outbox
from scheduler.core.execution.guards import Guards, skip_reason
from scheduler.core.execution.lease import RENEWALS_BEFORE_CALL, Lease
from scheduler.core.execution.outcome import ExecuteConfig, Outcome, Why
from scheduler.core.execution.overlap import OVERLAP_FIRST_PAGE, OVERLAP_PAGE, Overlap
from scheduler.core.execution.record import Recorder
from scheduler.core.execution.slots import ExecutionSlots
from scheduler.core.execution.source import CopyVoid, JobSource, StoredJob, copy_voided, source_of
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.model.job import RunState
from scheduler.core.ports import (
    AttemptEnd,
    Clock,
    Dispatch,
    Heartbeats,
    Ids,
    JobReader,
    Ledger,
    MessageControl,
    Metrics,
    ReadyQueue,
    TargetInvoker,
)
from scheduler.core.runtime.ids import RANDOM_IDS
from scheduler.core.tenancy.concurrency import ConcurrencyGate

__all__ = ["OVERLAP_FIRST_PAGE", "OVERLAP_PAGE", "RENEWALS_BEFORE_CALL", "ExecuteConfig", "Executor", "Outcome", "Why"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Steps:
    """The protocol's steps, built from the executor's ports as they are when a message comes."""

    ports: StepPorts
    guards: Guards
    slots: ExecutionSlots
    claim: Claim
    overlap: Overlap
    call: Call
    recorder: Recorder


@dataclass(eq=False)
class Executor:
    """Runs one dispatched occurrence; returns what to do with its message."""

    jobs: JobReader
    ledger: Ledger
    queue: ReadyQueue
    targets: Mapping[str, TargetInvoker]
    clock: Clock
    config: ExecuteConfig
    metrics: Metrics
    worker_id: str
    sleep: Callable[[float], None] = time.sleep
    #: Publishes completion events right after the write that records a terminal outcome (None: the
    #: sweeper's outbox drain publishes them all).
    outbox: Outbox | None = None
    #: Per-tenant execution slots (None: no execution budgets).
    gate: ConcurrencyGate | None = None
    #: Draws each attempt's owner suffix.
    ids: Ids = RANDOM_IDS
    #: Extends the lease in the background while a target that cannot heartbeat itself runs.
    heartbeats: Heartbeats | None = None

    def __post_init__(self) -> None:
        if self.config.heartbeat_fraction and self.heartbeats is None:
            raise ValueError("a background heartbeat (ExecuteConfig.heartbeat_fraction) needs Heartbeats")

    def execute(self, dispatch: Dispatch, message: MessageControl) -> Outcome:
        steps = self._steps()
        try:
            return self._attempt(steps, dispatch, message, source_of(dispatch, self.jobs))
        except CopyVoid:
            pass
        # The job changed after the advance that sent this copy of it: judge the occurrence on the job as it is now.
        copy_voided(dispatch, self.metrics)
        return self._attempt(steps, replace(dispatch, job_copy=None), message, StoredJob(self.jobs))

    def _attempt(self, steps: _Steps, dispatch: Dispatch, message: MessageControl, source: JobSource) -> Outcome:
        """One attempt at the occurrence, its job read from `source` (CopyVoid: the message's copy is void)."""
        now = steps.guards.on_time(dispatch)
        if isinstance(now, Outcome):
            return now
        job = source.job(dispatch)
        if job is None or job.tenant != dispatch.tenant:
            return steps.guards.no_such_job(dispatch, now)
        left = steps.guards.left_to_resume(job, dispatch)
        if left is not None:
            return left

        # The slot and the claim hold from when they are taken: a worker paused since the message came (reading the
        # job) would take both with leases already over, and call the target beside the next holder.
        now = self.clock.now()
        # Each attempt has its own owner id, so even this worker's own earlier attempt is fenced.
        owner = f"{self.worker_id}/{self.ids.token()}"
        permit = steps.slots.take(dispatch, owner, now)
        if permit is None:
            return steps.slots.throttled(dispatch, message, now)
        try:
            claimed = steps.claim.take(job, dispatch, owner, permit, message, source)
            if isinstance(claimed, Outcome):
                return claimed
            return self._run(steps, claimed)
        finally:
            permit.release()

    def _run(self, steps: _Steps, claimed: Claimed) -> Outcome:
        """The claimed occurrence: recorded as skipped or parked, or its target called and its outcome recorded."""
        skip = skip_reason(claimed.job, claimed.dispatch)
        if skip is not None:
            state, reason = skip
            return steps.recorder.record(claimed, AttemptEnd(state, error=reason))
        overlapped = steps.overlap.check(claimed)
        if overlapped is not None:
            return overlapped
        self._started(claimed)

        lease = Lease(claimed, steps.ports, steps.slots)
        renewed = lease.renew_before_call()
        if renewed is not None:
            return renewed
        called = steps.call.run(lease)
        if isinstance(called, Outcome):
            return called
        outcome = self._record(steps, claimed, called)
        if steps.overlap.parks(claimed.job, claimed.dispatch) and outcome.why is not Why.FENCED:
            steps.overlap.release_parked(claimed.job, claimed.dispatch)
        return outcome

    @staticmethod
    def _record(steps: _Steps, claimed: Claimed, called: Called) -> Outcome:
        if called.failure is None:
            return steps.recorder.record(claimed, AttemptEnd(RunState.SUCCEEDED, result=called.result))
        return steps.recorder.failed(claimed, called.failure)

    def _started(self, claimed: Claimed) -> None:
        dispatch, execution = claimed.dispatch, claimed.execution
        lateness = (claimed.at - dispatch.fire_at).total_seconds()
        if dispatch.kind != "backfill":  # a backfilled occurrence is late by design: it would drown the metric
            self.metrics.count("StartLatenessSeconds", max(0.0, lateness), unit="Seconds")
        # DEBUG: the outcome's line says it all for an attempt that ends (one INFO line an occurrence: CloudWatch Logs
        # bills each byte, docs/cost.md); a worker that dies mid-call is found by its lease, not by this line.
        log.debug(
            "occurrence started",
            extra={
                "job_id": dispatch.job_id,
                "occurrence_key": dispatch.key,
                "epoch": str(execution.epoch),
                "attempt": execution.attempts,
                "lateness_s": lateness,
            },
        )

    def _steps(self) -> _Steps:
        ports = StepPorts(self.ledger, self.queue, self.clock, self.config, self.metrics)
        recorder = Recorder(ports, self.outbox)
        return _Steps(
            ports=ports,
            guards=Guards(ports, recorder, self.sleep),
            slots=ExecutionSlots(ports, self.gate),
            claim=Claim(ports, recorder),
            overlap=Overlap(ports, recorder),
            call=Call(ports, self.targets, self.heartbeats),
            recorder=recorder,
        )
