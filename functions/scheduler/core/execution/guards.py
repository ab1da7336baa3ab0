"""Guards (docs/design.md §3.4, steps 1 and 4): what ends an attempt without calling the target - a message come before
its fire time, an occurrence left to a resume (step 1, before the claim), and a job cancelled, paused or rescheduled
since the dispatch (step 4, after it). A guard only decides: what an ended attempt writes, the recorder writes."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.model.job import Job, JobState, RunState
from scheduler.core.model.schedules import is_occurrence
from scheduler.core.ports import AttemptEnd, Dispatch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Guards:
    ports: StepPorts
    sleep: Callable[[float], None] = field(default=time.sleep)

    def on_time(self, dispatch: Dispatch) -> datetime | Outcome:
        """Never start before the fire time (or a flow-control key's later release, which the message carries): wait
        out a sub-second remainder (and return the instant it is then), hide anything earlier."""
        now = self.ports.clock.now()
        # A keyed occurrence's release is its key's (its tenant's budget only ever delays the message itself).
        start = dispatch.send_at if dispatch.flow_key is not None else dispatch.fire_at
        early = (start - now).total_seconds()
        if early > 0:
            if early > self.ports.config.early_wait_max.total_seconds():
                return Outcome.hide(early, Why.EARLY)
            self.sleep(early)
            now = self.ports.clock.now()
        return now

    def left_to_resume(self, job: Job, dispatch: Dispatch) -> Job | Outcome:
        """An occurrence that fell due while the job was paused is left to the resume's misfire policy
        (JobService.resume): not recorded here (the resume decides it, and nothing is written for what it does not
        run). One that already has a record (a retry) is claimed and skipped at step 4 instead, a skip the resumed
        chain's dispatch of the same key reopens (`skip_reason`). The job when it runs."""
        if not (
            dispatch.kind == "scheduled"
            and job.left_to_resume(dispatch.scheduled_for, dispatch.version)
            and self.ports.ledger.get(dispatch.key) is None
        ):
            return job
        self.ports.metrics.count("PausedOccurrences")
        log.info(
            "occurrence left to the resume's misfire policy",
            extra={"job_id": dispatch.job_id, "occurrence_key": dispatch.key, "job_state": job.state.value},
        )
        return Outcome.acknowledge(Why.LEFT_TO_RESUME)


def skip_reason(job: Job, dispatch: Dispatch) -> AttemptEnd | None:
    """Step 4: how the claimed occurrence's attempt ends instead of running, if the job was cancelled, paused or
    rescheduled since this occurrence was dispatched.

    A pause skip is not final: the resume's misfire policy may send the occurrence again (it fell due while the job
    was paused, and this claim found a record - a retry - so step 1 could not leave it to the resume unrecorded). It
    keeps the paused job's version, so that only a dispatch of a later version reopens it (`Ledger.claim`), and gives
    the attempt back: it ran nothing, and the reopened run must not find its retry budget spent."""
    if job.state == JobState.CANCELLED:
        return AttemptEnd(RunState.CANCELLED, error="job cancelled")
    if job.state == JobState.PAUSED:
        return AttemptEnd(RunState.SKIPPED, error="job paused", refund_attempt=True, paused_version=job.version)
    if (
        dispatch.kind == "scheduled"
        and job.version != dispatch.version
        and not is_occurrence(job.spec.schedule, dispatch.scheduled_for, job.created_at)
    ):
        return AttemptEnd(RunState.SKIPPED, error=f"superseded: the schedule changed in version {job.version}")
    return None
