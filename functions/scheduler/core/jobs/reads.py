"""The job resource's reads behind the public API (docs/design.md §4): a job, the tenant's list, by external id, how a
job is shown, its run history and its next occurrences. Another tenant's job is as unknown as one that does not
exist."""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime

from scheduler.core.errors import JobNotFound
from scheduler.core.jobs.status import JobStatus, shown_status
from scheduler.core.model.job import ALL_JOBS, Job, JobQuery, JobState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.schedules import OnceSchedule, first_occurrence, preview, unindexed_occurrence
from scheduler.core.ports import Clock, Execution, JobReader, JobStore, Ledger

MAX_PREVIEW = 50


def owned_job(jobs: JobReader, tenant: str, job_id: str) -> Job:
    """The job `job_id` of `tenant`; another tenant's job is as unknown as one that does not exist."""
    job = jobs.get(job_id)
    if job is None or job.tenant != tenant:
        raise JobNotFound(job_id)
    return job


@dataclass(eq=False)
class JobReads:
    jobs: JobStore
    ledger: Ledger
    clock: Clock

    def get(self, tenant: str, job_id: str) -> Job:
        return owned_job(self.jobs, tenant, job_id)

    def list(self, tenant: str, state: JobState | None, limit: int, cursor: str | None) -> tuple[list[Job], str | None]:
        return self.jobs.list(tenant, state, limit, cursor)

    def get_by_external_id(self, tenant: str, external_id: str) -> Job:
        job = self.jobs.get_by_external_id(tenant, external_id)
        if job is None or job.tenant != tenant:
            raise JobNotFound(f"external_id {external_id}")
        return job

    def status(self, job: Job) -> JobStatus:
        """How the job is shown (`scheduler.core.jobs.status`)."""
        return shown_status(job, self.ledger)

    def list_shown(
        self, tenant: str, state: JobState | None, limit: int, cursor: str | None, query: JobQuery = ALL_JOBS
    ) -> tuple[builtins.list[tuple[Job, JobStatus]], str | None]:
        """A page of the tenant's jobs with their shown status. COMPLETED and DISPATCHED are both stored as
        COMPLETED: either filter reads those and keeps the ones shown so (a page may hold fewer than `limit`).
        `query` filters by labels, target type and name prefix (scheduler.core.model.labels)."""
        stored = JobState.COMPLETED if state == JobState.DISPATCHED else state
        jobs, next_cursor = self.jobs.list(tenant, stored, limit, cursor, query)
        shown = [(job, self.status(job)) for job in jobs]
        if state in (JobState.COMPLETED, JobState.DISPATCHED):
            shown = [(job, status) for job, status in shown if status.state == state]
        return shown, next_cursor

    def runs(
        self, tenant: str, job_id: str, limit: int, cursor: str | None
    ) -> tuple[builtins.list[Execution], str | None]:
        job = self.get(tenant, job_id)
        at = unindexed_occurrence(job.spec.schedule, job.created_at)
        return self.ledger.runs(job_id, limit, cursor, occurrence_key(job_id, at) if at is not None else None)

    def next_runs(self, job: Job, count: int) -> builtins.list[datetime]:
        """The next `count` occurrences that have not started yet, as a user expects to see them."""
        if job.state in (JobState.CANCELLED, JobState.PAUSED):
            return []
        now = self.clock.now()
        spec = job.spec
        if isinstance(spec.schedule, OnceSchedule):
            at = first_occurrence(spec.schedule, job.created_at)
            return [at] if at is not None and at > now and count > 0 else []
        return preview(spec.schedule, now, job.created_at, min(count, MAX_PREVIEW))
