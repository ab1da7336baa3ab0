"""How a job is shown: its stored state, except that a COMPLETED job whose last occurrence has not finished reads
DISPATCHED, with that occurrence's state, so a one-shot whose occurrence is still on its way never reads as done."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.core.model.job import Job, JobState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.stores import Ledger

#: The state shown for an occurrence that was dispatched but has no run yet (it waits in the queue).
QUEUED = "QUEUED"


@dataclass(frozen=True)
class JobStatus:
    """A job as it is shown: a COMPLETED job whose last occurrence has not finished is DISPATCHED, and its last
    occurrence's state (`QUEUED` while it has no run) says where it is. Only COMPLETED jobs carry `last_run_*`."""

    state: JobState
    last_run_key: str | None = None
    last_run_scheduled_for: datetime | None = None
    last_run_state: str | None = None


def shown_status(job: Job, ledger: Ledger) -> JobStatus:
    """How the job is shown. A COMPLETED job's last occurrence is read from the ledger (one read): until it has
    finished the job is DISPATCHED."""
    if job.state != JobState.COMPLETED or job.last_dispatched_for is None:
        return JobStatus(job.state)
    key = occurrence_key(job.job_id, job.last_dispatched_for)
    run = ledger.get(key)
    finished = run is not None and run.state.terminal
    return JobStatus(
        JobState.COMPLETED if finished else JobState.DISPATCHED,
        key,
        job.last_dispatched_for,
        run.state.value if run is not None else QUEUED,
    )
