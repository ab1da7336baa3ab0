"""A tenant re-runs one of its own DEAD or RECONCILING occurrences (`POST /v1/jobs/{id}/runs/{at}/retry`).

The re-run is the same occurrence: the same key, so a target that applied it already ignores it. It follows the
ledger's rules: only a DEAD occurrence (revived with a fresh attempt budget, as an operator's redrive does) or a
RECONCILING one (resolved to RETRY_WAIT, as a resolve to retry does) becomes claimable again, each by a write
conditional on that state; a SUCCEEDED, CANCELLED, SKIPPED or RUNNING one is refused (InvalidState, 409). The
worker's claim then makes the new attempt, with the next fencing token.

Two steps, the ledger write and then a dispatch of the occurrence to its lane's ready queue. A crash between them
leaves the occurrence in RETRY_WAIT, due, with no message: a second retry of an occurrence in that state sends the
dispatch again and answers the same state (a duplicate message is absorbed by the ledger's claim), so a retry is
safe to repeat. An occurrence waiting for a retry that is not due yet (the worker's own backoff) is refused: it
runs on its own.
"""

from __future__ import annotations

import logging
from datetime import datetime

from scheduler.core.errors import ClaimRefused, InvalidState, JobNotFound
from scheduler.core.jobs.reads import owned_job
from scheduler.core.jobs.service import JobService
from scheduler.core.model.job import JobState, RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.ports import Dispatch, Execution

log = logging.getLogger(__name__)

#: What the run's history says of the step.
RETRY_NOTE = "retried by its tenant"


def retry_run(service: JobService, tenant: str, job_id: str, scheduled_for: datetime) -> Execution:
    """Make the occurrence of `job_id` scheduled for `scheduled_for` run again, and send it to the ready queue.
    Another tenant's job, or an occurrence with no run, is JobNotFound."""
    job = owned_job(service.jobs, tenant, job_id)
    key = occurrence_key(job_id, scheduled_for)
    execution = service.ledger.get(key)
    if execution is None or execution.job_id != job_id:
        raise JobNotFound(key)
    if job.state in (JobState.CANCELLED, JobState.PAUSED):
        # A worker drops the occurrences of a paused or cancelled job unrun: the retry would wait for nothing.
        raise InvalidState(f"the job is {job.state.value}: its occurrences are not run again (resume it first)")
    now = service.clock.now()
    if execution.state == RunState.DEAD:
        if not service.ledger.revive(key, now, RETRY_NOTE):
            execution = service.ledger.get(key) or execution
            raise InvalidState(f"occurrence is {execution.state.value}, not DEAD or RECONCILING")
    elif execution.state == RunState.RECONCILING:
        try:
            service.ledger.resolve(key, RunState.RETRY_WAIT, now, RETRY_NOTE)
        except ClaimRefused as refused:
            state = refused.current.state.value if refused.current else "gone"
            raise InvalidState(f"occurrence is {state}, not DEAD or RECONCILING") from None
    elif not _waiting_now(execution, now):
        raise InvalidState(_refusal(execution))
    again = Dispatch(
        job_id, job.tenant, execution.scheduled_for, now, job.version, "manual", job.spec.priority, job.flow_key
    )
    service.dispatcher.queue.send([service.dispatcher.booked_retry(again)], now)
    log.info("run retried", extra={"key": key, "tenant": tenant, "was": execution.state.value})
    return service.ledger.get(key) or execution


def _waiting_now(execution: Execution, now: datetime) -> bool:
    """Whether the occurrence waits for an attempt that is due (a retry's own state, its message maybe lost)."""
    due = execution.next_attempt_at
    return execution.state == RunState.RETRY_WAIT and (due is None or due <= now)


def _refusal(execution: Execution) -> str:
    if execution.state == RunState.SUCCEEDED:
        return "occurrence SUCCEEDED: a succeeded run is never run again"
    if execution.state == RunState.RETRY_WAIT:
        return "occurrence is RETRY_WAIT: it already waits for its next attempt"
    return f"occurrence is {execution.state.value}, not DEAD or RECONCILING"
