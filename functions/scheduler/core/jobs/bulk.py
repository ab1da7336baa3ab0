"""Bulk actions: pause, resume or cancel every job of a tenant that matches a label selector, as one operation.

`POST /v1/jobs/bulk` names the action, the selector and an `Idempotency-Key`; the operation's id is derived from
the tenant and the key, so a retry of the request is the same operation. A request works through the matching jobs
a page at a time (the job list by selector and its cursor, which does not move when a job's state changes) until
its time is up, and answers with the progress; the same request again goes on from where the last one stopped.

Each page is two conditional writes of the operation (on its version) around the jobs' own changes. Do not reorder:

1. *Begin the page*: record the page's jobs with the state each had when listed (`pending`), and the cursor after
   the page. Only one request wins this write, so two retries at once never work on one page twice.
2. Apply the action to each pending job through `JobService` (one atomic conditional write a job, and a no-op on a
   job already in the requested state).
3. *End the page*: count each job (changed, unchanged or failed with the reason), clear `pending`, move the cursor.

A crash before 1 lists the page again; between 1 and 3 the next request applies the action to the pending jobs again
(no-ops for those already changed) and counts them by the state recorded in 1, so a job changed before the crash
still counts as changed, once; a crash after 3 goes on with the next page. Every job ends in the requested state or
in `failed` with the reason, and none is half-changed (each change is one write).

What one tenant's bulk actions may take (docs/security.md, "Bulk actions"):

- each job a page changes counts as one request against the tenant's API request limit
  (`scheduler.core.tenancy.request_limits`), counted before the page is listed: a page is as many jobs as the
  tenant's window still takes (all of BULK_PAGE, else half as many, and so on down to one). When not even one fits,
  the request stops: before its first page it is `Throttled` (a 429 with Retry-After, the time to the next window);
  later it answers with its progress, and the next request goes on when the limit allows;
- at most `max_running` operations of a tenant run at once: an operation holds one of its tenant's bulk slots
  (`TenantSlots`) from its first request until it is done, renewed by each request and kept `BULK_IDLE` after the
  request's time is up (so an operation its caller gave up on frees its slot by then). Another operation's request
  meanwhile is `Throttled`, before it reads anything.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from scheduler.core.errors import (
    IdempotencyConflict,
    InvalidRequest,
    InvalidState,
    JobNotFound,
    Throttled,
    VersionConflict,
)
from scheduler.core.jobs.reads import owned_job
from scheduler.core.jobs.service import JobService, request_hash
from scheduler.core.model.job import JobQuery, JobState
from scheduler.core.model.labels import MAX_SELECTORS, LabelSelector
from scheduler.core.model.timefmt import truncate_ms
from scheduler.core.ports import Clock, TenantSlots
from scheduler.core.tenancy.request_limits import RequestGate

log = logging.getLogger(__name__)

#: Jobs one operation acts on at most. A selector that matches more is refused before anything changes (the first
#: request counts the matches): a bulk action either covers every job the selector names or none.
MAX_BULK_JOBS = 1_000
#: Jobs a page: each page costs two writes of the operation.
BULK_PAGE = 50
#: The longest one request works before it answers with the progress (the API's own deadline is 29 s).
BULK_TIME_BUDGET = timedelta(seconds=20)
#: A failure's reason is cut to this length (the operation is one item, under DynamoDB's 400 KB).
MAX_REASON = 200
#: How long an operation stays readable (and its key means it) after its last change.
OPERATION_RETENTION = timedelta(days=7)
#: Operations of one tenant running at once (the default of `SCHEDULER_BULK_MAX_RUNNING`).
MAX_RUNNING = 2
#: How long a running operation keeps its tenant's bulk slot after its request's time is up: room for its caller's
#: next request. An operation nobody goes on with frees its slot then.
BULK_IDLE = timedelta(seconds=40)


class _RequestsUsedUp(Exception):
    def __init__(self, wait: float) -> None:
        super().__init__(wait)
        self.wait = wait


class BulkAction(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"


class OperationState(StrEnum):
    RUNNING = "RUNNING"
    DONE = "DONE"


def reached(action: BulkAction, state: JobState) -> bool:
    """Whether a job in `state` is where `action` takes it (a resumed one-shot past its time is COMPLETED)."""
    if action == BulkAction.PAUSE:
        return state == JobState.PAUSED
    if action == BulkAction.CANCEL:
        return state == JobState.CANCELLED
    return state not in (JobState.PAUSED, JobState.CANCELLED)


@dataclass(frozen=True)
class JobFailure:
    job_id: str
    reason: str


@dataclass(frozen=True)
class PendingJob:
    """A job of the page being worked on, and its state when it was listed."""

    job_id: str
    state: JobState


@dataclass(frozen=True)
class PendingPage:
    jobs: tuple[PendingJob, ...]
    #: Where the list goes on after this page (None: this is the last page).
    next_cursor: str | None


@dataclass(frozen=True)
class BulkOperation:
    operation_id: str
    tenant: str
    action: BulkAction
    #: The selector, `key -> value` (an empty value: the key is present, whatever its value).
    labels: Mapping[str, str]
    request_hash: str
    created_at: datetime
    updated_at: datetime
    #: Jobs the selector matched when the operation started.
    matched: int
    state: OperationState = OperationState.RUNNING
    #: Where the next page of the job list starts (None: at the beginning, or nothing is left when DONE).
    cursor: str | None = None
    pending: PendingPage | None = None
    changed: int = 0
    unchanged: int = 0
    failed: tuple[JobFailure, ...] = ()
    #: Bumped by every write; each write is conditional on the version it read.
    version: int = 1

    @property
    def processed(self) -> int:
        return self.changed + self.unchanged + len(self.failed)

    @property
    def query(self) -> JobQuery:
        return selector_query(self.labels)


class OperationStore(Protocol):
    """Bulk operations, each read and written whole; every write after the first is conditional on its version."""

    def create(self, operation: BulkOperation) -> BulkOperation:
        """Store `operation` unless one with its id exists; the operation stored either way."""
        ...

    def get(self, tenant: str, operation_id: str) -> BulkOperation | None:
        """The tenant's operation (strongly consistent); another tenant's is None."""
        ...

    def save(self, operation: BulkOperation, expected_version: int) -> bool:
        """Replace the operation if it is still at `expected_version`; whether it was."""
        ...


def operation_id(tenant: str, idempotency_key: str) -> str:
    """The operation a request with this key is: the same for every retry of it, another for another tenant."""
    return hashlib.sha256(f"{tenant}\n{idempotency_key}".encode()).hexdigest()[:32]


def selector_query(labels: Mapping[str, str]) -> JobQuery:
    """The job list's filter for a bulk selector; InvalidRequest when it is empty or malformed."""
    if not labels:
        raise InvalidRequest("a bulk action names at least one label in selector.labels", field="selector.labels")
    if len(labels) > MAX_SELECTORS:
        raise InvalidRequest(
            f"a selector takes at most {MAX_SELECTORS} labels; this one has {len(labels)}", field="selector.labels"
        )
    selectors = []
    for key, value in labels.items():
        try:
            selectors.append(LabelSelector.parse(f"{key}:{value}"))
        except ValueError as exc:
            raise InvalidRequest(str(exc), field="selector.labels") from None
    return JobQuery(tuple(selectors))


@dataclass(eq=False)
class BulkService:
    jobs: JobService
    operations: OperationStore
    clock: Clock
    max_jobs: int = MAX_BULK_JOBS
    page_size: int = BULK_PAGE
    #: Called after each page is recorded (the CLI-facing progress in tests; a crash point in the protocol tests).
    on_page: Callable[[BulkOperation], None] = field(default=lambda operation: None)
    #: The tenants' API request limits, which every job a page changes counts against (None: no limit).
    requests: RequestGate | None = None
    #: Each tenant's bulk slots, one per running operation (None: no limit on running operations).
    slots: TenantSlots | None = None
    #: Operations of one tenant running at once (0: no limit).
    max_running: int = MAX_RUNNING

    def run(
        self,
        tenant: str,
        idempotency_key: str,
        action: BulkAction,
        labels: Mapping[str, str],
        stop_at: datetime,
    ) -> BulkOperation:
        """Start the operation this request names, or go on with it, until it is DONE or `stop_at` passes; the
        operation as it then is. A key reused with another action or selector raises IdempotencyConflict; Throttled
        when the tenant has `max_running` other operations running, or its request limit takes no page now."""
        query = selector_query(labels)
        op_id = operation_id(tenant, idempotency_key)
        digest = request_hash({"action": action.value, "labels": dict(labels)})
        operation = self.operations.get(tenant, op_id)
        if operation is not None and operation.request_hash != digest:
            raise IdempotencyConflict(idempotency_key)
        if operation is not None and operation.state == OperationState.DONE:
            return operation
        slot = self._hold_slot(tenant, op_id, stop_at)
        if operation is None:
            operation = self.operations.create(self._new(tenant, op_id, action, labels, query, digest))
            if operation.request_hash != digest:  # another request created it first, with another body
                raise IdempotencyConflict(idempotency_key)
        operation = self.resume_work(operation, stop_at)
        if operation.state == OperationState.DONE and slot is not None and self.slots is not None:
            self.slots.release(tenant, slot, op_id)
        return operation

    def get(self, tenant: str, op_id: str) -> BulkOperation:
        operation = self.operations.get(tenant, op_id)
        if operation is None:
            raise JobNotFound(f"operation {op_id}")
        return operation

    def resume_work(self, operation: BulkOperation, stop_at: datetime) -> BulkOperation:
        pages = 0
        while operation.state == OperationState.RUNNING and self.clock.now() < stop_at:
            if operation.pending is None:
                try:
                    begun = self._begin_page(operation)
                except _RequestsUsedUp as used_up:
                    if pages:
                        return operation  # the next request goes on when the limit allows
                    raise Throttled(
                        "this tenant's request limit is used up: a bulk action counts each job it changes as a "
                        f"request ({operation.processed} of {operation.matched} jobs done); send the same request "
                        f"again after {math.ceil(used_up.wait)} s to go on",
                        used_up.wait,
                    ) from None
                if begun is None:
                    return self.get(operation.tenant, operation.operation_id)  # another request works on it
                operation = begun
                if operation.state == OperationState.DONE:
                    break
            ended = self._end_page(operation)
            if ended is None:
                return self.get(operation.tenant, operation.operation_id)
            operation = ended
            pages += 1
            self.on_page(operation)
        return operation

    # -- internals ---------------------------------------------------------------------------------------

    def _new(
        self, tenant: str, op_id: str, action: BulkAction, labels: Mapping[str, str], query: JobQuery, digest: str
    ) -> BulkOperation:
        """The operation, after counting the matching jobs: more than `max_jobs` is refused, nothing changed."""
        matched, cursor = 0, None
        while True:
            page, cursor = self.jobs.jobs.list(tenant, None, self.page_size, cursor, query)
            matched += len(page)
            if matched > self.max_jobs:
                raise InvalidRequest(
                    f"the selector matches more than {self.max_jobs} jobs; one bulk action takes at most "
                    f"{self.max_jobs}: add a label to the selector to split them",
                    field="selector.labels",
                )
            if cursor is None:
                break
        now = truncate_ms(self.clock.now())
        log.info("bulk operation started", extra={"operation_id": op_id, "action": action.value, "matched": matched})
        return BulkOperation(op_id, tenant, action, dict(labels), digest, now, now, matched)

    def _hold_slot(self, tenant: str, op_id: str, stop_at: datetime) -> int | None:
        """The tenant's bulk slot this operation holds, renewed until `stop_at` and BULK_IDLE after (None: no limit);
        Throttled when `max_running` other operations of the tenant hold one each."""
        if self.slots is None or self.max_running <= 0:
            return None
        until = stop_at + BULK_IDLE
        for held in range(self.max_running):
            if self.slots.extend(tenant, held, op_id, until):
                return held
        slot = self.slots.acquire(tenant, self.max_running, op_id, self.clock.now(), until)
        if slot is None:
            wait = BULK_TIME_BUDGET.total_seconds()
            raise Throttled(
                f"this tenant has {self.max_running} bulk operations running, as many as run at once (each until it "
                f"is done, or {int(BULK_IDLE.total_seconds())} s after its last request); finish one, or send this "
                f"request again after {int(wait)} s",
                wait,
            )
        return slot

    def _begin_page(self, operation: BulkOperation) -> BulkOperation | None:
        room = self.max_jobs - operation.processed
        size = min(self.page_size, room)
        if self.requests is not None and size > 0:
            # The page's jobs count as requests, before it is listed (the last page may count a few it does not hold)
            size, wait = self.requests.admit_up_to(operation.tenant, size)
            if wait is not None:
                raise _RequestsUsedUp(wait)
        page, next_cursor = self.jobs.jobs.list(operation.tenant, None, size, operation.cursor, operation.query)
        if room <= len(page):
            # Jobs labelled after the count would take the operation over its limit: it ends at the limit.
            next_cursor = None
        now = truncate_ms(self.clock.now())
        if not page and next_cursor is None:
            begun = replace(operation, state=OperationState.DONE, cursor=None, updated_at=now)
        else:
            pending = PendingPage(tuple(PendingJob(job.job_id, job.state) for job in page), next_cursor)
            begun = replace(operation, pending=pending, updated_at=now)
        begun = replace(begun, version=operation.version + 1)
        return begun if self.operations.save(begun, operation.version) else None

    def _end_page(self, operation: BulkOperation) -> BulkOperation | None:
        assert operation.pending is not None
        changed, unchanged, failed = 0, 0, list(operation.failed)
        for pending in operation.pending.jobs:
            outcome = self._apply(operation, pending)
            if outcome is None:
                changed += 1
            elif outcome == "":
                unchanged += 1
            else:
                failed.append(JobFailure(pending.job_id, outcome[:MAX_REASON]))
        next_cursor = operation.pending.next_cursor
        ended = replace(
            operation,
            pending=None,
            cursor=next_cursor,
            changed=operation.changed + changed,
            unchanged=operation.unchanged + unchanged,
            failed=tuple(failed),
            state=OperationState.RUNNING if next_cursor is not None else OperationState.DONE,
            version=operation.version + 1,
            updated_at=truncate_ms(self.clock.now()),
        )
        if ended.state == OperationState.DONE and ended.processed != ended.matched:
            ended = replace(ended, matched=ended.processed)  # jobs labelled or unlabelled while it ran
        if not self.operations.save(ended, operation.version):
            return None
        if ended.state == OperationState.DONE:
            log.info(
                "bulk operation done",
                extra={"operation_id": ended.operation_id, "changed": ended.changed, "failed": len(ended.failed)},
            )
        return ended

    def _apply(self, operation: BulkOperation, pending: PendingJob) -> str | None:
        """Apply the action to one job: None when it changed the job (now or before a crash), "" when the job was
        already there, else the reason it could not."""
        action, tenant = operation.action, operation.tenant
        change = {BulkAction.PAUSE: self.jobs.pause, BulkAction.RESUME: self.jobs.resume}.get(action, self.jobs.cancel)
        try:
            state = change(tenant, pending.job_id).state
        except (InvalidState, VersionConflict, JobNotFound) as exc:
            try:
                state = owned_job(self.jobs.jobs, tenant, pending.job_id).state
            except JobNotFound:
                return "the job no longer exists"
            if not reached(action, state):
                return str(exc) if not isinstance(exc, JobNotFound) else "the job no longer exists"
        if not reached(action, state):
            return f"the job is {state.value} after the {action.value}"
        return "" if reached(action, pending.state) else None
