"""The job store in memory: job definitions, idempotency records and each tenant's count of active jobs."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from scheduler.adapters.memory.timers import MemoryTimerStore
from scheduler.core.errors import (
    ExternalIdTaken,
    IdempotencyConflict,
    IdempotentReplay,
    QuotaExceeded,
    VersionConflict,
)
from scheduler.core.jobs.chain import active_delta, advance_allowed, already_advanced, completion_mark, replace_allowed
from scheduler.core.model.job import ALL_JOBS, Job, JobQuery, JobState
from scheduler.core.model.timefmt import to_ms
from scheduler.core.ports import Advance, AdvanceResult, IdempotencyRecord, NewJob, Timer


class MemoryJobStore:
    """Jobs and timers share one table in DynamoDB, and creates write both atomically: the store writes its jobs'
    timers into `timers`, and both keep the tenants' active-job counts in `timers.counts` (`ActiveJobCounts`): a
    create counts up here, a sweep's checkpoint counts down there."""

    def __init__(self, timers: MemoryTimerStore) -> None:
        self.jobs: dict[str, Job] = {}
        self.idempotency: dict[tuple[str, str], IdempotencyRecord] = {}
        self.active = timers.counts.active
        #: (tenant, external id) -> the job that has it (kept while the job is, cancelled too).
        self.external_ids: dict[tuple[str, str], str] = {}
        self.timers = timers
        self.lock = timers.counts.lock

    def create(
        self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool, quota: int
    ) -> None:
        with self.lock:
            if idempotency is not None:
                existing = self._taken(idempotency, job.created_at)
                if existing is not None:
                    if existing.request_hash != idempotency.request_hash:
                        raise IdempotencyConflict(idempotency.key)
                    raise IdempotentReplay(existing)
            if job.job_id in self.jobs:
                raise VersionConflict(self.jobs[job.job_id])
            taken = self._external_id_holder(job)
            if taken is not None:
                raise ExternalIdTaken(str(job.spec.external_id), taken)
            if self.active.get(job.tenant, 0) >= quota:
                raise QuotaExceeded(f"this tenant already has {quota} active or paused jobs")
            self._write(job, timer, idempotency, late)

    def create_all(self, new: Sequence[NewJob], quota: int) -> int:
        """One transaction for them all (memory has no size limit): all stored, or none."""
        with self.lock:
            tenants = {item.job.tenant for item in new}
            external_ids = [item.job.spec.external_id for item in new if item.job.spec.external_id is not None]
            refused = (
                len(tenants) > 1
                or len(set(external_ids)) != len(external_ids)
                or any(self._external_id_holder(item.job) is not None for item in new)
                or any(item.job.job_id in self.jobs for item in new)
                or any(item.idempotency and self._taken(item.idempotency, item.job.created_at) for item in new)
                or any(self.active.get(tenant, 0) + len(new) > quota for tenant in tenants)
            )
            if refused:
                return 0
            for item in new:
                self._write(item.job, item.timer, item.idempotency, item.late)
            return len(new)

    def _taken(self, idempotency: IdempotencyRecord, now: datetime) -> IdempotencyRecord | None:
        """The unexpired record that holds this key already, if any."""
        existing = self.idempotency.get((idempotency.tenant, idempotency.key))
        return existing if existing is not None and existing.expires_at > now else None

    def _external_id_holder(self, job: Job) -> str | None:
        """The job that has `job`'s external id already, if any."""
        external_id = job.spec.external_id
        return self.external_ids.get((job.tenant, external_id)) if external_id is not None else None

    def _write(self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool) -> None:
        self.active[job.tenant] = self.active.get(job.tenant, 0) + 1
        if job.spec.external_id is not None:
            self.external_ids[(job.tenant, job.spec.external_id)] = job.job_id
        self.jobs[job.job_id] = job
        if idempotency is not None:
            self.idempotency[(idempotency.tenant, idempotency.key)] = idempotency
        if timer is not None:
            self.timers.put_timer(timer)
            if late:
                self.timers.put_late(timer)

    def get(self, job_id: str) -> Job | None:
        with self.lock:
            return self.jobs.get(job_id)

    def get_by_external_id(self, tenant: str, external_id: str) -> Job | None:
        with self.lock:
            job_id = self.external_ids.get((tenant, external_id))
            return self.jobs.get(job_id) if job_id is not None else None

    def list(
        self, tenant: str, state: JobState | None, limit: int, cursor: str | None, query: JobQuery = ALL_JOBS
    ) -> tuple[list[Job], str | None]:
        """Oldest first; filtered by labels, as the DynamoDB store lists them: by the driving selector's value,
        then job id."""
        driving = query.driving()
        with self.lock:
            mine = sorted(
                (j for j in self.jobs.values() if j.tenant == tenant),
                key=lambda j: (to_ms(j.created_at), j.job_id),
            )
        if driving is not None:
            mine = sorted((j for j in mine if driving.matches(j.spec.labels)),
                          key=lambda j: (j.spec.labels[driving.key], j.job_id))  # fmt: skip
        position = 0
        if cursor:
            position = next((i + 1 for i, j in enumerate(mine) if j.job_id == cursor), len(mine))
        page: list[Job] = []
        last_seen: str | None = None
        for job in mine[position:]:
            last_seen = job.job_id
            if query.matches(job, state):
                page.append(job)
            if len(page) == limit:
                break
        more = last_seen is not None and mine and last_seen != mine[-1].job_id
        return page, (last_seen if more else None)

    def replace(self, job: Job, previous: Job, timer: Timer | None, late: bool) -> None:
        with self.lock:
            current = self.jobs.get(job.job_id)
            if current is None or not replace_allowed(current, previous):
                raise VersionConflict(current)
            self.active[job.tenant] = self.active.get(job.tenant, 0) + active_delta(current, job)
            self.jobs[job.job_id] = job
            if timer is not None:
                self.timers.put_timer(timer)
                if late:
                    self.timers.put_late(timer)

    def advance(self, timer: Timer, step: Advance) -> AdvanceResult:
        next_run_at, dispatched_for, skipped = step.next_run_at, step.dispatched_for, step.skipped
        planned_at, planned_horizon, release_by = step.planned_at, step.planned_horizon, step.release_by
        with self.lock:
            job = self.jobs.get(timer.job_id)
            if job is None:
                return AdvanceResult(False, False, None)
            if advance_allowed(job, timer, dispatched_for):
                deferred_release = next_run_at is None and release_by is not None
                if next_run_at is None and not deferred_release:
                    self.active[job.tenant] = self.active.get(job.tenant, 0) - 1
                advanced = self.jobs[job.job_id] = job.model_copy(
                    update={
                        "last_dispatched_for": dispatched_for,
                        "next_run_at": next_run_at,
                        "state": JobState.ACTIVE if next_run_at is not None else JobState.COMPLETED,
                        "misfire_skipped": job.misfire_skipped + skipped,
                        "advanced_from": timer.scheduled_for,
                        "planned_version": timer.version,
                        "planned_at": planned_at,
                        "planned_horizon": planned_horizon,
                        "completed_by_checkpoint": job.completed_by_checkpoint | {completion_mark(timer)}
                        if deferred_release
                        else job.completed_by_checkpoint,
                    }
                )
                # The job as written, when a plain write completed it (as the DynamoDB adapter returns it).
                written = advanced.model_copy() if deferred_release else None
                return AdvanceResult(True, True, JobState.ACTIVE, release=deferred_release, job=written)
            return already_advanced(job, timer, dispatched_for, release_by)
