"""A job's lifecycle: cancel, pause and resume, each the next version of the job computed from the current one.

Each returns the new version and whether it has a chain of occurrences to schedule, or None when the job is
already where the change would take it (the change is idempotent). `now` is read only once a change is made:
the job service writes the new version (`JobService._change`) and computes it again when a sweep moved the job
first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from scheduler.core.errors import InvalidState
from scheduler.core.model.job import Job, JobState
from scheduler.core.model.schedules import next_occurrence

Now = Callable[[], datetime]


def cancelled(job: Job, now: Now) -> tuple[Job, bool] | None:
    """The job's tombstone: no more occurrences (queued ones are recorded CANCELLED by the worker)."""
    if job.state == JobState.CANCELLED:
        return None
    at = now()
    update = {"state": JobState.CANCELLED, "version": job.version + 1, "updated_at": at, "next_run_at": None}
    return job.model_copy(update=update), False


def paused(job: Job, now: Now) -> tuple[Job, bool] | None:
    """The job paused from this instant: only an ACTIVE job pauses."""
    if job.state == JobState.PAUSED:
        return None
    if job.state != JobState.ACTIVE:
        raise InvalidState(f"only an ACTIVE job can be paused; this one is {job.state.value}")
    at = now()
    update = {
        "state": JobState.PAUSED,
        "version": job.version + 1,
        "updated_at": at,
        "paused_at": at,
        "resumed_at": None,
        "paused_version": job.version + 1,
    }
    return job.model_copy(update=update), False


def resumed(job: Job, now: Now) -> tuple[Job, bool] | None:
    """The paused job resumed: its chain starts again at the first occurrence after the pause (earlier than its
    stored next one when occurrences fell due while it was paused), for the misfire policy to judge."""
    if job.state == JobState.ACTIVE:
        return None
    if job.state != JobState.PAUSED:
        raise InvalidState(f"only a PAUSED job can be resumed; this one is {job.state.value}")
    at = now()
    pending = job.next_run_at
    if pending is not None and job.paused_at is not None:
        missed = next_occurrence(job.spec.schedule, job.paused_at, job.created_at)
        if missed is not None and missed < pending:
            pending = missed
    state = JobState.ACTIVE if pending is not None else JobState.COMPLETED
    update = {"state": state, "version": job.version + 1, "updated_at": at, "next_run_at": pending}
    return job.model_copy(update={**update, "resumed_at": at}), state == JobState.ACTIVE
