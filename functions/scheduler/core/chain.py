"""Rules every JobStore adapter applies in the same way (so they live in the core, not in each adapter)."""

from __future__ import annotations

from datetime import datetime

from scheduler.core.model import Job, JobState
from scheduler.core.ports import AdvanceResult, Timer


def counts_as_active(job: Job) -> bool:
    """Jobs that count against a tenant's quota: those that can still fire."""
    return job.state in (JobState.ACTIVE, JobState.PAUSED)


def active_delta(before: Job, after: Job) -> int:
    return int(counts_as_active(after)) - int(counts_as_active(before))


def advance_allowed(job: Job, timer: Timer, dispatched_for: datetime) -> bool:
    """The condition of the advance write (DESIGN.md 3.3): the job is ACTIVE at the timer's version, and its
    chain has not moved past this timer - or it moved exactly here (our own advance, re-run after a crash)."""
    last = job.last_dispatched_for
    return (
        job.version == timer.version
        and job.state == JobState.ACTIVE
        and (last is None or last < timer.scheduled_for or last == dispatched_for)
    )


def already_advanced(job: Job | None, timer: Timer, dispatched_for: datetime) -> AdvanceResult:
    """The advance's condition failed. If the same chain already moved to or past this point (a re-run after a
    crash, or a bucket re-swept after its lease expired), dispatch again - the ledger absorbs it - but do not
    write the next timer. Otherwise the job was paused, cancelled or edited: dispatch nothing."""
    if job is None:
        return AdvanceResult(False, False, None)
    last = job.last_dispatched_for
    same_chain = job.version == timer.version and job.state in (JobState.ACTIVE, JobState.COMPLETED)
    if same_chain and last is not None and last >= dispatched_for:
        return AdvanceResult(True, False, job.state)
    return AdvanceResult(False, False, job.state)
