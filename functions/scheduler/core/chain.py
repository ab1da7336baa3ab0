"""Rules every JobStore adapter applies in the same way (so they live in the core, not in each adapter)."""

from __future__ import annotations

from datetime import datetime

from scheduler.core.model import Job, JobState
from scheduler.core.ports import AdvanceResult, Timer
from scheduler.core.timefmt import to_ms


def completion_mark(timer: Timer) -> str:
    """The mark a bucket sweep's completing advance leaves on the job: the timer's version and instant."""
    return f"{timer.version}@{to_ms(timer.scheduled_for)}"


def counts_as_active(job: Job) -> bool:
    """Jobs that count against a tenant's quota: those that can still fire."""
    return job.state in (JobState.ACTIVE, JobState.PAUSED)


def active_delta(before: Job, after: Job) -> int:
    return int(counts_as_active(after)) - int(counts_as_active(before))


def advance_allowed(job: Job, timer: Timer, dispatched_for: datetime) -> bool:
    """The condition of the advance write (docs/design.md §3.3): the job is ACTIVE at the timer's version and its chain
    has not yet moved past this timer."""
    last = job.last_dispatched_for
    chain_behind = last is None or last < timer.scheduled_for
    return job.version == timer.version and job.state == JobState.ACTIVE and chain_behind


def already_advanced(
    job: Job | None, timer: Timer, dispatched_for: datetime, release_by: str | None = None
) -> AdvanceResult:
    """The advance's condition failed. Why?

    - The chain's last advance came from this very timer (a sweep or the API that advanced and then died, or a
      duplicate of the timer): replay that run's plan - same sends (absorbed by the ledger), same next timer
      (an idempotent put). The dispatcher sends before it writes the next timer, so a plan is never lost.
    - The chain's last advance came from this timer, and then the job was paused, cancelled or edited (a new
      version): the plan's occurrences have left the chain (the new version starts after them), so replay its
      sends - the worker decides each one (skipped while paused, cancelled, skipped if an edit superseded it, else
      run) - but not its next timer: the new version has its own.
    - The chain moved on from a later timer: this timer's plan was sent before its next timer existed; nothing to
      do. Likewise when the job was paused, cancelled or edited before this timer advanced it.

    When this timer's advance completed the job and left its quota release to `release_by` (a bucket sweep's
    checkpoint), the replay owes that release too: the run that advanced cannot have recorded it, or this timer
    would not be read again by the same kind of caller. A caller of another kind (the late lane) owes nothing.
    """
    if job is None:
        return AdvanceResult(False, False, None)
    replay = None
    if job.planned_at is not None and job.planned_horizon is not None:
        replay = (job.planned_at, job.planned_horizon)
    advanced_here = job.advanced_from == timer.scheduled_for
    same_chain = job.version == timer.version and job.state in (JobState.ACTIVE, JobState.COMPLETED)
    release = release_by is not None and completion_mark(timer) in job.completed_by_checkpoint
    if same_chain and advanced_here:
        return AdvanceResult(True, True, job.state, replay, release)
    if advanced_here and job.planned_version == timer.version and replay is not None:
        return AdvanceResult(True, False, job.state, replay, release)
    # Nothing to send or put, but a completion this timer made from a bucket (its mark) still owes its release.
    return AdvanceResult(False, False, job.state, release=release)
