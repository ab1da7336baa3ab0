"""An operator's resolve of a RECONCILING run (`POST /v1/jobs/{job_id}/runs/{key}/resolve`): an ambiguous
at-most-once attempt settled as SUCCEEDED (it did take effect) or sent again (RETRY_WAIT)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.errors import InvalidState, JobNotFound
from scheduler.core.execution.events import Outbox
from scheduler.core.jobs.reads import owned_job
from scheduler.core.model.job import RunState
from scheduler.core.ports import Clock, Dispatch, Execution, JobReader, Ledger, ReadyQueue
from scheduler.core.tenancy.flow_control import FlowKeys


@dataclass(eq=False)
class Resolution:
    jobs: JobReader
    ledger: Ledger
    queue: ReadyQueue
    clock: Clock
    #: Publishes the completion event of a resolved outcome at once (None: the next sweep's drain).
    outbox: Outbox | None = None
    #: Books a keyed job's run again in its flow-control key's calendar (None: no flow control).
    flow: FlowKeys | None = None

    def resolve(self, tenant: str, job_id: str, key: str, outcome: RunState, note: str) -> Execution:
        """Settle a RECONCILING occurrence: SUCCEEDED (it did take effect) or RETRY_WAIT (run it again).

        Retry is two steps, the ledger write and then the message; a failure between them leaves the occurrence
        in RETRY_WAIT with no message, so resolving to retry again is accepted and sends the message again
        (a duplicate message is absorbed by the ledger)."""
        job = owned_job(self.jobs, tenant, job_id)
        execution = self.ledger.get(key)
        if execution is None or execution.job_id != job_id:
            raise JobNotFound(key)
        if execution.state == RunState.RECONCILING:
            execution = self.ledger.resolve(key, outcome, self.clock.now(), note)
            if self.outbox is not None:
                self.outbox.flush(execution)  # SUCCEEDED's completion event, now (else the next sweep's drain)
        elif not (outcome == RunState.RETRY_WAIT and execution.state == RunState.RETRY_WAIT):
            raise InvalidState(f"occurrence is {execution.state.value}, not RECONCILING")
        if outcome == RunState.RETRY_WAIT:
            now = self.clock.now()
            again = Dispatch(
                job_id, job.tenant, execution.scheduled_for, now, job.version, "manual", job.spec.priority, job.flow_key
            )
            if self.flow is not None and again.flow_key is not None:
                again = again.deferred_to(self.flow.retry_release(job.tenant, again.flow_key, now))
            self.queue.send([again], now)
        return execution
