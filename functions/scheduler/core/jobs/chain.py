"""Rules every JobStore adapter applies in the same way (so they live in the core, not in each adapter)."""

from __future__ import annotations

from datetime import datetime

from scheduler.core.model.job import Job, JobState
from scheduler.core.model.timefmt import to_ms
from scheduler.core.ports import AdvanceResult, Timer


def completion_mark(timer: Timer) -> str:
    """The mark a bucket sweep's completing advance leaves on the job: the timer's version and instant."""
    return f"{timer.version}@{to_ms(timer.scheduled_for)}"


def counts_as_active(job: Job) -> bool:
    """Jobs that count against a tenant's quota: those that can still fire."""
    return job.state in (JobState.ACTIVE, JobState.PAUSED)


def active_delta(before: Job, after: Job) -> int:
    return int(counts_as_active(after)) - int(counts_as_active(before))


def replace_allowed(current: Job | None, previous: Job) -> bool:
    """The condition of a change of version: the job is still at the version it was read at, and its chain has not
    advanced since (else the change, written from the read, would undo that advance's record of its plan)."""
    if current is None or current.version != previous.version:
        return False
    return current.advanced_from == previous.advanced_from


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
    - Anything else: the chain moved on from a later timer (this timer's plan was sent before its next timer
      existed), or the job was paused, cancelled or edited (a new version). Nothing to send: a change of version
      first makes sure the chain's last plan was sent (`Dispatcher.ensure_sent`).

    When this timer's advance completed the job and left its quota release to `release_by` (a bucket sweep's
    checkpoint), the replay owes that release too: the run that advanced cannot have recorded it, or this timer
    would not be read again by the same kind of caller. A caller of another kind (the late lane) owes nothing.
    That holds across a change of version too (the release is owed, the plan is not resent here).
    """
    if job is None:
        return AdvanceResult(False, False, None)
    replay = None
    if job.planned_at is not None and job.planned_horizon is not None:
        replay = (job.planned_at, job.planned_horizon)
    same_chain = job.version == timer.version and job.state in (JobState.ACTIVE, JobState.COMPLETED)
    advanced_here = job.advanced_from == timer.scheduled_for
    release = release_by is not None and completion_mark(timer) in job.completed_by_checkpoint
    if same_chain and advanced_here:
        return AdvanceResult(True, True, job.state, replay, release)
    # Nothing to send or put, but a completion this timer made from a bucket (its mark) still owes its release.
    return AdvanceResult(False, False, job.state, release=release)
