"""The execution protocol (docs/design.md §3.4): claim in the ledger, run with a fencing token, record the outcome.

At-least-once delivery becomes exactly-once effect here: every attempt of an occurrence carries the same
occurrence key, every claim bumps the epoch (the fencing token), and every write after the claim is
conditional on that epoch, so a worker that paused past its lease can never record anything.

`Executor.execute` runs the steps in order (the numbers of docs/design.md §3.4); each lives in its own module of
`scheduler.core.execution`, and each either returns what the next step works on or the `Outcome` that ends the attempt:

1. guards (`guards`): never before the fire time; a job that exists (from its source, `source`: the message's copy,
   or the store; none: the recorder records it cancelled); an occurrence left to a resume;
2. the execution slot (`slots`): one of the tenant's slots and one of its flow-control key's, or the occurrence waits;
3. the claim (`claim`);
4. guards after the claim: a job cancelled, paused or rescheduled since (`guards.skip_reason`, recorded by the
   recorder), an earlier occurrence still running (`overlap`);
5. the lease (`lease`): renewed before the call when the attempt was paused since its claim, or given back;
6. the call (`call`), the lease kept by a heartbeat;
7. the record (`record`): the outcome written under the fencing token, retried or dead-lettered, announced;
   and what was parked behind this occurrence released (`overlap`).

The steps are built once, with the executor, which is frozen: a test that wants other ports builds another executor
(`dataclasses.replace`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from scheduler.core.execution.call import Call, Called
from scheduler.core.execution.claim import Claim
from scheduler.core.execution.claimed import Claimed
from scheduler.core.execution.config import ExecuteConfig
from scheduler.core.execution.events import Outbox
from scheduler.core.execution.guards import Guards, skip_reason
from scheduler.core.execution.lease import RENEWALS_BEFORE_CALL, Lease
from scheduler.core.execution.outcome import Outcome, Why
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
from scheduler.core.tenancy.flow_control import FlowKeys

__all__ = ["OVERLAP_FIRST_PAGE", "OVERLAP_PAGE", "RENEWALS_BEFORE_CALL", "ExecuteConfig", "Executor", "Outcome", "Why"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Steps:
    """The protocol's steps, built once from the executor's ports."""

    ports: StepPorts
    guards: Guards
    slots: ExecutionSlots
    claim: Claim
    overlap: Overlap
    call: Call
    recorder: Recorder


@dataclass(frozen=True, eq=False)
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
    #: Flow-control keys: their slots, pauses, retry bookings and push-backs (None: no flow control).
    flow: FlowKeys | None = None
    #: Draws each attempt's owner suffix.
    ids: Ids = RANDOM_IDS
    #: Extends the lease in the background while a target that cannot heartbeat itself runs.
    heartbeats: Heartbeats | None = None
    _steps: _Steps = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.config.heartbeat_fraction and self.heartbeats is None:
            raise ValueError("a background heartbeat (ExecuteConfig.heartbeat_fraction) needs Heartbeats")
        ports = StepPorts(self.ledger, self.queue, self.clock, self.config, self.metrics)
        recorder = Recorder(ports, self.outbox, self.flow)
        steps = _Steps(
            ports=ports,
            guards=Guards(ports, self.sleep),
            slots=ExecutionSlots(ports, self.gate, self.flow, self.sleep),
            claim=Claim(ports, recorder),
            overlap=Overlap(ports, recorder, self.flow),
            call=Call(ports, self.targets, self.heartbeats),
            recorder=recorder,
        )
        object.__setattr__(self, "_steps", steps)

    def execute(self, dispatch: Dispatch, message: MessageControl) -> Outcome:
        try:
            return self._attempt(dispatch, message, source_of(dispatch, self.jobs))
        except CopyVoid:
            pass
        # The job changed after the advance that sent this copy of it: judge the occurrence on the job as it is now.
        copy_voided(dispatch, self.metrics)
        return self._attempt(replace(dispatch, job_copy=None), message, StoredJob(self.jobs))

    def _attempt(self, dispatch: Dispatch, message: MessageControl, source: JobSource) -> Outcome:
        """One attempt at the occurrence, its job read from `source` (CopyVoid: the message's copy is void)."""
        steps = self._steps
        now = steps.guards.on_time(dispatch)  # 1
        if isinstance(now, Outcome):
            return now
        found = source.job(dispatch)
        if found is None or found.tenant != dispatch.tenant:
            return steps.recorder.no_such_job(dispatch, now)
        job = steps.guards.left_to_resume(found, dispatch)
        if isinstance(job, Outcome):
            return job

        # The slot and the claim hold from when they are taken: a worker paused since the message came (reading the
        # job) would take both with leases already over, and call the target beside the next holder.
        now = self.clock.now()
        # Each attempt has its own owner id, so even this worker's own earlier attempt is fenced.
        owner = f"{self.worker_id}/{self.ids.token()}"
        permit = steps.slots.take(dispatch, owner, message, now, job.flow_key)  # 2
        if isinstance(permit, Outcome):
            return permit
        try:
            claimed = steps.claim.take(job, dispatch, owner, permit, message, source)  # 3
            if isinstance(claimed, Outcome):
                return claimed
            return self._run(claimed)
        finally:
            permit.release()

    def _run(self, claimed: Claimed) -> Outcome:
        """The claimed occurrence: recorded as skipped or parked, or its target called and its outcome recorded."""
        steps = self._steps
        skip = skip_reason(claimed.job, claimed.dispatch)  # 4
        if skip is not None:
            return steps.recorder.record(claimed, skip)
        running = steps.overlap.check(claimed)
        if isinstance(running, Outcome):
            return running
        self._started(running)

        lease = Lease(running, steps.ports, steps.slots).renew_before_call()  # 5
        if isinstance(lease, Outcome):
            return lease
        called = steps.call.run(lease)  # 6
        if isinstance(called, Outcome):
            return called
        outcome = self._record(running, called)  # 7
        if steps.overlap.parks(running.job, running.dispatch) and outcome.why is not Why.FENCED:
            steps.overlap.release_parked(running.job, running.dispatch)
        return outcome

    def _record(self, claimed: Claimed, called: Called) -> Outcome:
        if called.failure is None:
            return self._steps.recorder.record(claimed, AttemptEnd(RunState.SUCCEEDED, result=called.result))
        return self._steps.recorder.failed(claimed, called.failure)

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
