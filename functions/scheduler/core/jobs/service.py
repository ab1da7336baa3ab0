"""The changes of a job behind the public API (docs/design.md §4): create, edit, cancel, pause, resume, trigger. Every
change bumps the job's version; timers written for an older version are skipped by the sweeper, so an edit applies to
every occurrence not yet dispatched. The job's reads are `scheduler.core.jobs.reads`, its signing key's rotation
`signing_keys`, an operator's resolve of a run `resolution`."""

from __future__ import annotations

import builtins
import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from scheduler.core.errors import (
    IdempotentReplay,
    InvalidRequest,
    InvalidState,
    PayloadTooLarge,
    VersionConflict,
)
from scheduler.core.jobs.lifecycle import cancelled, paused, resumed
from scheduler.core.jobs.reads import owned_job
from scheduler.core.jobs.secrecy import carry_secrets, opened_headers, sealed, submitted_problem
from scheduler.core.model.cron import misplaced_no_specific_value
from scheduler.core.model.job import (
    MAX_PAYLOAD_BYTES,
    REDACTED,
    Job,
    JobSpec,
    JobState,
    merge_patch,
    payload_size,
)
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.schedules import (
    CronSchedule,
    OnceSchedule,
    first_occurrence,
    is_occurrence,
    is_recurring,
    next_occurrence,
)
from scheduler.core.model.timefmt import truncate_ms
from scheduler.core.ports import (
    Clock,
    IdempotencyRecord,
    Ids,
    JobStore,
    Ledger,
    NewJob,
    SecretSealer,
    Timer,
)
from scheduler.core.runtime.ids import RANDOM_IDS
from scheduler.core.sweep.dispatch import Dispatcher, manual_timer, timer_for
from scheduler.core.tenancy.flow_control import FlowKeys

log = logging.getLogger(__name__)

IDEMPOTENCY_TTL = timedelta(hours=24)
#: Attempts of a change of version that races sweeps advancing the job's chain.
CHANGE_ATTEMPTS = 5


@dataclass(frozen=True)
class Created:
    job: Job
    replayed: bool


@dataclass(frozen=True)
class Submission:
    """One job definition to create, as a request carries it: `body` is what the idempotency key's hash covers."""

    spec: JobSpec
    idempotency_key: str | None
    body: Any


def request_hash(body: Any) -> str:
    """A stable hash of a request body (key order does not matter)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(eq=False)
class JobService:
    jobs: JobStore
    ledger: Ledger
    dispatcher: Dispatcher
    clock: Clock
    _: KW_ONLY
    max_active_jobs: int
    check_target: Callable[[str, JobSpec], None] = lambda tenant, spec: None
    ids: Ids = RANDOM_IDS
    #: Seals secret header values at rest (`scheduler.core.jobs.secrecy`); None: they are stored as given.
    sealer: SecretSealer | None = None
    #: Flow-control keys (`scheduler.core.tenancy.flow_control`); None: a job naming one is refused.
    flow: FlowKeys | None = None

    def create(self, tenant: str, spec: JobSpec, idempotency_key: str | None, body: Any) -> Created:
        """Validate, then store the job with its first timer atomically, then settle the timer (seal check)."""
        return self._store(self._prepare(tenant, Submission(spec, idempotency_key, body)))

    def create_many(self, tenant: str, submissions: Sequence[Submission]) -> builtins.list[Created | Exception]:
        """Create several jobs of one tenant, each answered on its own, in order: its `Created`, or the exception
        its single create would have raised (an invalid definition, a key reused with another body, the quota
        full, a store error). The valid ones are stored together (`JobStore.create_all`: one transaction for many
        jobs and one quota change for them all); those a refused transaction held are created one at a time, so
        that each gets its own answer (a replay, a conflict, or created after all). Each stored timer is then
        settled as a single create settles it, after the write."""
        answers: builtins.list[Created | Exception | None] = [None] * len(submissions)
        prepared: builtins.list[tuple[int, NewJob]] = []
        for index, submission in enumerate(submissions):
            try:
                prepared.append((index, self._prepare(tenant, submission)))
            except Exception as exc:  # this item's own answer; the others go on
                answers[index] = exc
        keys = [new.idempotency.key for _, new in prepared if new.idempotency is not None]
        # Two items with one key cannot share a transaction (and the second is the first's replay): one at a time.
        stored = 0
        if len(set(keys)) == len(keys):
            try:
                stored = self.jobs.create_all([new for _, new in prepared], self.max_active_jobs)
            except Exception:  # nothing was stored: each item is tried on its own and answers for itself
                log.warning("batch transaction failed; creating its jobs one at a time", exc_info=True)
        for position, (index, new) in enumerate(prepared):
            try:
                answers[index] = self._settled(new) if position < stored else self._store(new)
            except Exception as exc:
                answers[index] = exc
        if stored:
            log.info("jobs created together", extra={"tenant": tenant, "jobs": stored, "items": len(submissions)})
        return [answer for answer in answers if answer is not None]

    def _prepare(self, tenant: str, submission: Submission) -> NewJob:
        """Validate a definition and make what creating it writes (nothing is stored)."""
        spec = submission.spec
        self._check_payload(spec)
        self._check_secrets(spec)
        self._check_schedule(spec)
        self.check_target(tenant, spec)
        self._check_flow(tenant, spec)
        now = truncate_ms(self.clock.now())
        idempotency = None
        if submission.idempotency_key is not None:
            idempotency = IdempotencyRecord(
                tenant,
                submission.idempotency_key,
                request_hash(submission.body),
                self.ids.job_id(),
                now + IDEMPOTENCY_TTL,
            )
        job_id = idempotency.job_id if idempotency else self.ids.job_id()
        first = first_occurrence(spec.schedule, now)
        if first is None:
            raise InvalidRequest("the schedule has no occurrence in the future", field="schedule")
        job = sealed(Job.new(job_id, tenant, spec, now, first), self.sealer, {})
        timer = timer_for(job, first)
        return NewJob(job, timer, idempotency, late=self.dispatcher.is_near(timer, self.clock.now()))

    def _store(self, new: NewJob) -> Created:
        try:
            self.jobs.create(new.job, new.timer, new.idempotency, late=new.late, quota=self.max_active_jobs)
        except IdempotentReplay as replay:
            if replay.record.job_id == new.job.job_id:  # this create's own write (a batch's, its answer lost)
                return self._settled(new)
            return Created(owned_job(self.jobs, new.job.tenant, replay.record.job_id), replayed=True)
        return self._settled(new)

    def _settled(self, new: NewJob) -> Created:
        """After the job is stored: its flow-control limits become its key's, then its timer is settled (the seal
        check, which may dispatch it through the key), then it is created. The limits are written after the job so
        that a refused create (a key reused, the quota full) changes nothing."""
        self._declare_flow(new.job.tenant, new.job.spec)
        self.dispatcher.settle(new.timer, new.late)
        job = new.job
        log.info(
            "job created",
            extra={
                "job_id": job.job_id,
                "tenant": job.tenant,
                "first": job.next_run_at and job.next_run_at.isoformat(),
            },
        )
        return Created(job, replayed=False)

    def update(self, tenant: str, job_id: str, changes: dict[str, Any], if_match: int | None) -> Job:
        """Apply a JSON merge patch to the definition; the new definition applies to occurrences not yet
        dispatched. `if_match` must equal the current version (else VersionConflict, HTTP 412)."""

        def edit(job: Job) -> tuple[Job, bool] | None:
            if if_match is not None and if_match != job.version:
                raise VersionConflict(job)
            if job.state == JobState.CANCELLED:
                raise InvalidState("a cancelled job cannot be changed")
            merged = merge_patch(job.spec.model_dump(mode="json", exclude_none=True), changes)
            # A sealed value stays REDACTED in the merged definition (checked as such); a new one must be given.
            spec = JobSpec.model_validate(carry_secrets(job, merged, changes))
            if spec.external_id != job.spec.external_id:
                raise InvalidRequest("external_id is set on create and cannot change", field="external_id")
            self._check_payload(spec)
            self._check_secrets(spec, placeholders=True)
            if spec.schedule != job.spec.schedule:  # a schedule stored before a rule keeps running as it is
                self._check_schedule(spec)
            self.check_target(tenant, spec)
            self._check_flow(tenant, spec, backlog=False)
            now = truncate_ms(self.clock.now())
            if spec.schedule == job.spec.schedule and job.next_run_at is not None:
                pending: datetime | None = job.next_run_at
            elif isinstance(spec.schedule, OnceSchedule):
                pending = first_occurrence(spec.schedule, job.created_at)
            else:
                pending = next_occurrence(spec.schedule, now, job.created_at)
                if pending is None and spec.schedule != job.spec.schedule:
                    # As on create: a new schedule that never runs again is a mistake, not a way to end the job.
                    raise InvalidRequest("the schedule has no occurrence in the future", field="schedule")
            state = job.state
            if pending is None and job.state == JobState.ACTIVE:
                state = JobState.COMPLETED
            elif pending is not None and job.state == JobState.COMPLETED:
                state = JobState.ACTIVE
            update = {"spec": spec, "version": job.version + 1, "state": state, "updated_at": now}
            changed = job.model_copy(update={**update, "next_run_at": pending})
            return sealed(changed, self.sealer, self._carried(job, spec)), state == JobState.ACTIVE

        changed = self.change(tenant, job_id, edit)
        self._declare_flow(tenant, changed.spec)  # after the write: a refused change changes nothing
        return changed

    def cancel(self, tenant: str, job_id: str) -> Job:
        """Tombstone the job (idempotent). Queued occurrences are recorded CANCELLED by the worker."""

        return self.change(tenant, job_id, lambda job: cancelled(job, self._now))

    def pause(self, tenant: str, job_id: str) -> Job:
        """Stop the job's occurrences from this instant until a resume, which hands them to the misfire policy."""

        return self.change(tenant, job_id, lambda job: paused(job, self._now))

    def resume(self, tenant: str, job_id: str) -> Job:
        """Resume a paused job. The occurrences that fell due while it was paused are handled by its misfire
        policy wherever they were: those the worker found queued were left unrecorded, and the resumed chain
        starts at the first occurrence after the pause, so the sweeper finds it late and applies the policy
        (`run_once`: the latest; `skip`: none, counted; `run_all`: all within the catch-up window, through the
        tenant's dispatch budget). Occurrences the paused chain already queued and not yet due are not sent
        again (the first timer's `queued_until`): a resume costs the policy's messages, not the look-ahead."""

        return self.change(tenant, job_id, lambda job: resumed(job, self._now))

    def trigger(self, tenant: str, job_id: str) -> Timer:
        """Fire one extra occurrence now, with its own occurrence key; the schedule is not affected."""
        job = owned_job(self.jobs, tenant, job_id)
        if job.state in (JobState.CANCELLED, JobState.PAUSED):
            raise InvalidState(f"a {job.state.value} job cannot be triggered")
        if self.flow is not None and job.flow_key is not None:
            self.flow.check_room(tenant, job.flow_key, None)
        now = truncate_ms(self.clock.now())
        if is_occurrence(job.spec.schedule, now, job.created_at):
            now += timedelta(milliseconds=1)  # an extra occurrence has its own key, never a scheduled one's
        timer = manual_timer(job, now)
        self.dispatcher.place(timer)
        return timer

    # -- internals ---------------------------------------------------------------------------------------

    def _now(self) -> datetime:
        return truncate_ms(self.clock.now())

    def change(self, tenant: str, job_id: str, change: Callable[[Job], tuple[Job, bool] | None]) -> Job:
        """Read the job, compute its new version with `change` (None: nothing to change), and write it. A sweep
        that advances the chain between the read and the write makes the write fail (its plan's record must not be
        undone): read again and recompute, a bounded number of times."""
        for attempt in range(CHANGE_ATTEMPTS):
            job = owned_job(self.jobs, tenant, job_id)
            result = change(job)
            if result is None:
                return job
            changed, schedule = result
            try:
                return self._replace(job, changed, schedule=schedule)
            except VersionConflict as conflict:
                moved_chain = conflict.current is not None and conflict.current.version == job.version
                if not moved_chain or attempt == CHANGE_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def _replace(self, old: Job, new: Job, *, schedule: bool) -> Job:
        timer = None
        pending = new.next_run_at
        if schedule and pending is not None:
            # A new chain starts at the new version. The old chain's progress must not judge it: its timers are
            # refused by version, and keeping its `last_dispatched_for` would refuse the new chain's first
            # advance when the new schedule runs earlier than occurrences the old one already dispatched.
            new = new.model_copy(update={"last_dispatched_for": None})
            timer = timer_for(new, pending)
            if old.state == JobState.PAUSED and old.next_run_at is not None and pending < old.next_run_at:
                timer = replace(timer, queued_until=old.next_run_at)  # a resume: see `resume`
        late_copy = timer is not None and self.dispatcher.is_near(timer, self.clock.now())
        if old.last_dispatched_for is not None and not is_recurring(old.spec.schedule):
            # Before the version changes: the sweep may have sent the one-shot occurrence with a copy of the job
            # (Dispatch.job_copy), which its worker runs on without reading the job. Void it first, so that once this
            # change is acknowledged no claim is made on the copy: the worker reads the job and sees the change.
            self.ledger.void_copies(occurrence_key(old.job_id, old.last_dispatched_for), self.clock.now())
        # Before the version changes: the old version's last plan must have been sent (a new chain starts after it).
        self.dispatcher.ensure_sent(old)
        self.jobs.replace(new, old, timer, late=late_copy)
        if timer is not None:
            self.dispatcher.settle(timer, late_copy)
        log.info(
            "job changed",
            extra={"job_id": new.job_id, "version": new.version, "state": new.state.value, "next": str(pending)},
        )
        return new

    def _carried(self, old: Job, spec: JobSpec) -> dict[str, str]:
        """The old version's sealed header values, opened only when the new definition keeps one of them."""
        headers = getattr(spec.target, "headers", None) or {}
        return opened_headers(old, self.sealer) if REDACTED in headers.values() else {}

    def _check_flow(self, tenant: str, spec: JobSpec, *, backlog: bool = True) -> None:
        """A job naming a flow-control key needs flow control here, and room in the key's backlog (a create)."""
        limits = spec.flow_control
        if limits is None:
            return
        if self.flow is None:
            raise InvalidRequest(
                "flow control is not available in this deployment: leave out flow_control", field="flow_control"
            )
        if backlog:
            self.flow.check_room(tenant, limits.key, limits.max_backlog)

    def _declare_flow(self, tenant: str, spec: JobSpec) -> None:
        """The job's flow-control limits become its key's (the most recent write naming a key sets its limits)."""
        if self.flow is not None and spec.flow_control is not None:
            self.flow.declare(tenant, spec.flow_control)

    @staticmethod
    def _check_secrets(spec: JobSpec, *, placeholders: bool = False) -> None:
        problem = submitted_problem(spec, placeholders=placeholders)
        if problem is not None:
            raise problem

    @staticmethod
    def _check_schedule(spec: JobSpec) -> None:
        """What a submitted schedule may not hold beyond what the parser reads (which a stored one may hold)."""
        if isinstance(spec.schedule, CronSchedule):
            problem = misplaced_no_specific_value(spec.schedule.expression)
            if problem is not None:
                raise InvalidRequest(problem, field="schedule.expression")

    @staticmethod
    def _check_payload(spec: JobSpec) -> None:
        size = payload_size(spec.payload)
        if size > MAX_PAYLOAD_BYTES:
            raise PayloadTooLarge(f"the payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes")
