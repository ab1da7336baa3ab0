"""The ports: what the core needs from the outside world.

Adapters implement them for DynamoDB and SQS (`scheduler.adapters.dynamodb`, `scheduler.adapters.sqs`) and in
memory (`scheduler.adapters.memory`); one contract test suite runs against every implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal, Protocol

from scheduler.core.keys import occurrence_key
from scheduler.core.model import BackfillState, Job, JobState, MisfirePolicy, Priority, RunState
from scheduler.core.schedules import Schedule
from scheduler.core.timefmt import to_ms

#: `scheduled`: an occurrence of the job's chain; `manual`: an extra one (trigger); `backfill`: an occurrence of a
#: past range materialised on request (its key is the normal occurrence key: anything that ran is not run again).
TimerKind = Literal["scheduled", "manual", "backfill"]


@dataclass(frozen=True)
class ChainPlan:
    """What the sweeper needs to advance a recurring chain without reading the job: a snapshot of the job's
    schedule and policies at the timer's version. The advance is conditional on that version, so a stale
    snapshot can never act."""

    schedule: Schedule
    anchor: datetime  # the job's created_at (anchors rate and delay schedules)
    jitter_seconds: int
    misfire_policy: MisfirePolicy


@dataclass(frozen=True)
class Timer:
    """One pending occurrence, stored in the time bucket of its `fire_at` (or in the late lane).

    `plan` is None for manual triggers, which are extra occurrences outside the chain.
    """

    job_id: str
    tenant: str
    scheduled_for: datetime
    fire_at: datetime
    version: int
    kind: TimerKind = "scheduled"
    plan: ChainPlan | None = None
    #: The lane of the occurrence (the job's priority at the timer's version).
    priority: Priority = "normal"
    #: A deferred timer: an occurrence its tenant's dispatch budget held back, due again at this instant. It lives in
    #: the bucket of this instant (not of `fire_at`); its chain has already moved on (`plan` is None).
    defer_until: datetime | None = None
    #: The first timer of a resumed chain: the previous version's plan already queued this chain's occurrences up to
    #: (not including) this instant; its first plan sends none of them that are not yet due.
    queued_until: datetime | None = None

    @property
    def key(self) -> str:
        return occurrence_key(self.job_id, self.scheduled_for)

    @property
    def due_at(self) -> datetime:
        """When the timer is due: its fire time, or when a deferred one may be tried again. Its bucket's minute."""
        return self.defer_until if self.defer_until is not None else self.fire_at

    @property
    def slot(self) -> str:
        """The timer's place (and cursor) in its bucket: ordered by fire_at; job, scheduled instant, kind and version
        make it unique, so neither a manual trigger at the instant of a pending scheduled run nor an older version's
        timer written late (a sweep racing an edit) overwrites a chain's only link to its next occurrence."""
        return (
            f"{to_ms(self.fire_at):015d}#{self.job_id}#{to_ms(self.scheduled_for):015d}#{self.kind[0]}#{self.version}"
        )


@dataclass(frozen=True)
class BucketId:
    minute: datetime
    shard: int


@dataclass(frozen=True)
class BucketClaim:
    """A sweeper's hold on a bucket. `cursor` is where an earlier holder stopped (resume after it)."""

    bucket: BucketId
    owner: str
    epoch: int
    cursor: str | None = None


@dataclass(frozen=True)
class BucketBusy:
    """A bucket that cannot be claimed: already done, or held by another sweeper's live lease."""

    done: bool


@dataclass(frozen=True)
class Dispatch:
    """The ready-queue message body: everything the worker needs to find and run one occurrence."""

    job_id: str
    tenant: str
    scheduled_for: datetime
    fire_at: datetime
    version: int
    kind: TimerKind = "scheduled"
    #: The ready queue (lane) it goes to.
    priority: Priority = "normal"
    #: Not released before this instant (its tenant's dispatch budget delayed it). Not part of the message: the
    #: queue holds it back (DelaySeconds); the worker only ever checks the fire time.
    not_before: datetime | None = None

    @property
    def key(self) -> str:
        return occurrence_key(self.job_id, self.scheduled_for)

    @property
    def send_at(self) -> datetime:
        """When the message should become visible: its fire time, or later if its tenant's budget says so."""
        return self.fire_at if self.not_before is None else max(self.fire_at, self.not_before)

    def deferred_to(self, instant: datetime) -> Dispatch:
        return replace(self, not_before=instant)

    @classmethod
    def of(cls, timer: Timer) -> Dispatch:
        return cls(
            timer.job_id,
            timer.tenant,
            timer.scheduled_for,
            timer.fire_at,
            timer.version,
            timer.kind,
            timer.priority,
            timer.defer_until,
        )


@dataclass(frozen=True)
class IdempotencyRecord:
    tenant: str
    key: str
    request_hash: str
    job_id: str
    expires_at: datetime


@dataclass(frozen=True)
class AdvanceResult:
    """What the sweeper learnt from advancing a job past one of its timers."""

    proceed: bool  # the chain advanced from this timer, now or in an earlier run: send its plan, write its next timer
    put_next: bool  # write the next timer
    job_state: JobState | None
    #: (planned_at, planned_horizon) when this timer's advance happened in an earlier run that may have died before
    #: sending: re-plan with these to send exactly what it planned.
    replay: tuple[datetime, datetime] | None = None
    #: This timer's advance completed the job without releasing its quota slot (`release_by`): the caller must
    #: release it with its progress record (a bucket sweep: in the page checkpoint). True on a replay too.
    release: bool = False


@dataclass(frozen=True)
class OutboxEntry:
    """One recorded terminal outcome of an occurrence, waiting on the ledger item to be published.

    The ledger appends it in the same conditional write that records the outcome (so a recorded outcome always
    has its entry), and `Ledger.clear_outbox` removes it once the event was accepted by the bus.
    `event_id` names the outcome: an occurrence can have several (RECONCILING, then SUCCEEDED once resolved;
    DEAD, then SUCCEEDED after a redrive), each with its own id.
    """

    event_id: str
    state: RunState
    epoch: int
    at: datetime
    error: str | None = None
    result: str | None = None


@dataclass
class Execution:
    """One ledger item: the state of one occurrence, keyed by its occurrence key."""

    key: str
    job_id: str
    tenant: str
    scheduled_for: datetime
    state: RunState
    epoch: int
    attempts: int
    owner: str | None = None
    lease_until: datetime | None = None
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    result: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    dead_lettered: bool = False
    history: list[dict[str, Any]] = field(default_factory=list)
    #: Terminal outcomes recorded but not yet published as completion events (the transactional outbox).
    outbox: list[OutboxEntry] = field(default_factory=list)


@dataclass(frozen=True)
class OutcomeEvent:
    """A completion event: one terminal outcome of one occurrence, as published to the event bus.

    Publishing is at-least-once: consumers dedupe on `event_id` (or on `occurrence_key` and `state`)."""

    event_id: str
    occurrence_key: str
    job_id: str
    tenant: str
    scheduled_for: datetime
    state: RunState
    fencing_token: int
    attempts: int
    finished_at: datetime
    error: str | None = None
    result: str | None = None


@dataclass(frozen=True)
class Backfill:
    """A request to materialise a recurring job's occurrences in [range_from, range_to), drained in waves by the
    sweeper. `cursor` is the last occurrence dispatched (None before the first wave): the backfill itself is the
    durable record of what is left, as a timer is for one occurrence."""

    backfill_id: str
    job_id: str
    tenant: str
    range_from: datetime
    range_to: datetime
    plan: ChainPlan  # the schedule at the job's version when the backfill was requested
    version: int
    total: int
    state: BackfillState
    created_at: datetime
    updated_at: datetime
    dispatched: int = 0
    waves: int = 0
    cursor: datetime | None = None

    @property
    def remaining(self) -> int:
        return 0 if self.state == BackfillState.CANCELLED else max(0, self.total - self.dispatched)


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, aware UTC."""
        ...


class JobStore(Protocol):
    """Job definitions, idempotency records, and the writes that must be atomic with them."""

    def create(
        self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool, quota: int
    ) -> None:
        """Write the job, its first timer, its idempotency record, (if `late`) a late-lane copy of the timer and
        the tenant's active-job count in one transaction. Raises IdempotentReplay / IdempotencyConflict when the
        key is taken, QuotaExceeded when the tenant already has `quota` active or paused jobs."""
        ...

    def get(self, job_id: str) -> Job | None:
        """Strongly consistent read of a job."""
        ...

    def list(self, tenant: str, state: JobState | None, limit: int, cursor: str | None) -> tuple[list[Job], str | None]:
        """A tenant's jobs, oldest first, a page at a time; the cursor is opaque."""
        ...

    def replace(self, job: Job, previous: Job, timer: Timer | None, late: bool) -> None:
        """Store `job` if the stored version is still `previous.version`, with its next timer (and late copy),
        adjusting the tenant's active-job count; else VersionConflict."""
        ...

    def advance(
        self,
        timer: Timer,
        next_run_at: datetime | None,
        dispatched_for: datetime,
        skipped: int,
        *,
        planned_at: datetime | None = None,
        planned_horizon: datetime | None = None,
        release_by: str | None = None,
    ) -> AdvanceResult:
        """Move an ACTIVE job at `timer.version` past `dispatched_for` (conditional write; docs/design.md §3.3).

        `next_run_at=None` completes the chain (the job becomes COMPLETED). A job that was paused, cancelled or
        changed since the timer was written is not touched and `proceed` is False.

        Completing releases the job's quota slot in the same write (a transaction with the tenant's counter),
        unless `release_by` names the caller's progress record: then the write is a plain conditional update that
        marks the job (Job.completed_by_checkpoint), and `release` in the result tells the caller to release it
        with that record (also when the advance is replayed from an earlier run that died before recording).
        """
        ...


class TimerStore(Protocol):
    """Time buckets, their claims, the watermark and the late lane (docs/design.md §3.2 and §3.3)."""

    shard_count: int

    def bucket_of(self, timer: Timer) -> BucketId:
        """The bucket a timer belongs in: its fire_at minute and its job's shard."""
        ...

    def put_timer(self, timer: Timer) -> None:
        """Idempotent put of a timer into its bucket."""
        ...

    def claim_bucket(
        self, bucket: BucketId, owner: str, now: datetime, lease_until: datetime
    ) -> BucketClaim | BucketBusy:
        """Claim and seal a bucket in one conditional write: succeeds if it is not done and unclaimed or its lease
        expired, and bumps the epoch. Sealing before querying is what makes the API's seal check sound."""
        ...

    def is_sealed(self, bucket: BucketId) -> bool:
        """Strongly consistent: has a sweeper sealed this bucket (so it may already have been queried)?"""
        ...

    def has_timer(self, timer: Timer) -> bool:
        """Strongly consistent: is this timer (same slot) stored in its bucket? Swept timers stay until they expire."""
        ...

    def timers(self, bucket: BucketId, after: str | None) -> Iterator[tuple[list[Timer], str]]:
        """The bucket's timers after cursor `after`, page by page, strongly consistent, in fire_at order.
        Yields each page with the cursor of its last timer."""
        ...

    def upcoming(self, minute: datetime) -> list[Timer]:
        """Every timer in the minute's buckets (all shards), whether or not they were swept: for forecasts
        (scheduler.core.forecast), not for dispatch - eventually consistent, so it may miss a timer written a moment
        ago."""
        ...

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        """Record progress through the bucket and extend the lease, if the claim still holds (else ClaimLost).
        `releases` (tenant -> jobs) are the quota slots of the jobs the page completed: released in the same
        atomic write, so a page re-run after a crash (its cursor not moved) releases them exactly once."""
        ...

    def release(self, claim: BucketClaim) -> None:
        """Give the bucket up before it is done (budget or deadline reached) so the next sweep resumes it at once."""
        ...

    def complete_bucket(self, claim: BucketClaim, expire_after: datetime) -> None:
        """Mark the bucket done if the claim still holds (else ClaimLost)."""
        ...

    def watermark(self) -> datetime | None: ...

    def init_watermark(self, minute: datetime) -> datetime:
        """Create the watermark if absent; returns the stored one."""
        ...

    def advance_watermark(self, minute: datetime) -> None:
        """Move the watermark forward to `minute` (never backwards)."""
        ...

    def put_late(self, timer: Timer) -> None: ...

    def late_timers(self, limit: int) -> list[Timer]:
        """Late-lane timers (all shards), oldest fire_at first."""
        ...

    def remove_late(self, timer: Timer) -> None: ...


class Ledger(Protocol):
    """The executions table: one item per occurrence key; conditional writes decide every race."""

    def claim(
        self,
        dispatch: Dispatch,
        owner: str,
        now: datetime,
        lease_until: datetime,
        take_over_expired: bool,
        indexed: bool = True,
    ) -> Execution:
        """Claim the occurrence: RUNNING, epoch+1, attempts+1, if it is new, waiting to retry and due, or (when
        `take_over_expired`) RUNNING with an expired lease. Raises ClaimRefused with the current item.
        `indexed=False` keeps the item out of the run-history index (`runs` then finds it by its key)."""
        ...

    def get(self, key: str) -> Execution | None: ...

    def heartbeat(self, key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        """Extend the lease if `owner` still holds it at `epoch`; else LeaseLost."""
        ...

    def finish(
        self,
        key: str,
        owner: str,
        epoch: int,
        state: RunState,
        now: datetime,
        *,
        result: str | None = None,
        error: str | None = None,
        next_attempt_at: datetime | None = None,
        refund_attempt: bool = False,
        announce: bool = True,
    ) -> Execution | None:
        """Record the outcome of the attempt held at `epoch` (RETRY_WAIT or a terminal state); Fenced if stale.
        `refund_attempt` gives the attempt back (a wait that ran nothing, e.g. an overlap buffer).
        A terminal state also appends its outbox entry, in the same write. Returns the item as written."""
        ...

    def record_unclaimed(self, dispatch: Dispatch, state: RunState, now: datetime, reason: str) -> bool:
        """Record a terminal state (and its outbox entry) for an occurrence nobody claimed (e.g. SKIPPED);
        False if it already exists."""
        ...

    def expire_to(
        self, key: str, epoch: int, state: RunState, now: datetime, reason: str, *, announce: bool = True
    ) -> bool:
        """Move an expired RUNNING item at `epoch` to a terminal state (at-most-once jobs: RECONCILING), with its
        outbox entry."""
        ...

    def mark_dead_lettered(self, key: str) -> None: ...

    def revive(self, key: str, now: datetime, note: str) -> bool:
        """Redrive: a DEAD occurrence becomes claimable again (RETRY_WAIT, due now, a fresh attempt budget).
        Conditional on DEAD; False when it is not (e.g. it SUCCEEDED, or was already revived)."""
        ...

    def runs(
        self, job_id: str, limit: int, cursor: str | None, unindexed: str | None = None
    ) -> tuple[list[Execution], str | None]:
        """Run history of a job, newest first; `unindexed` is the key of the job's occurrence claimed outside the
        index (scheduler.core.schedules.unindexed_occurrence), merged in at its place."""
        ...

    def resolve(self, key: str, state: RunState, now: datetime, note: str) -> Execution:
        """Resolve a RECONCILING occurrence to SUCCEEDED (with its outbox entry) or RETRY_WAIT (conditional on
        RECONCILING)."""
        ...

    def pending_outbox(self, limit: int) -> list[Execution]:
        """Up to `limit` executions whose outbox is not empty, oldest outcome first. Read from a sparse index, so
        it may lag a write by a moment (an entry published a moment ago can show up again: at-least-once)."""
        ...

    def clear_outbox(self, key: str, published: Sequence[OutboxEntry]) -> bool:
        """Empty the outbox if it still holds exactly `published` (same count, same last entry): an outcome
        appended since is never cleared unpublished. False when the condition fails."""
        ...


class EventPublisher(Protocol):
    """The completion-event bus (EventBridge on AWS and locally on the moto server)."""

    def publish(self, events: Sequence[OutcomeEvent]) -> None:
        """Put every event on the bus. Returns only when all were accepted; raises EventPublishFailed otherwise
        (the outbox keeps them, and the next attempt publishes them again)."""
        ...


class ReadyQueue(Protocol):
    """The SQS ready queue (and its DLQ) as the core sees it."""

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        """Send each dispatch with `DelaySeconds = clamp(fire_at - now, 0, 900)`, in batches. Rounded down: a message
        arrives at most a second early and the worker waits out the rest, so precision stays sub-second and no
        occurrence ever starts before its fire time.
        Returns only when every message was accepted; raises otherwise (the caller re-runs)."""
        ...

    def dead_letter(self, dispatch: Dispatch, execution: Execution) -> None:
        """Put the occurrence, with its attempt history, on the dead-letter queue."""
        ...


class BackfillStore(Protocol):
    """Backfill requests (in the jobs table)."""

    def create(self, backfill: Backfill) -> None: ...

    def get(self, backfill_id: str) -> Backfill | None:
        """Strongly consistent."""
        ...

    def for_job(self, job_id: str, limit: int, cursor: str | None) -> tuple[list[Backfill], str | None]:
        """A job's backfills, newest first, a page at a time; the cursor is opaque (None: this was the last page).
        A cursor this store did not return for this job raises ValueError."""
        ...

    def running(self, limit: int) -> list[Backfill]:
        """Up to `limit` RUNNING backfills, oldest first (strongly consistent)."""
        ...

    def advance(self, backfill: Backfill, cursor: datetime, dispatched: int, done: bool, now: datetime) -> bool:
        """Record a wave: move the cursor, count it, COMPLETED when `done`. Conditional on the backfill still being
        RUNNING at `backfill.cursor` (a concurrent sweeper's wave, or a cancel, wins); False if not."""
        ...

    def finish(self, backfill: Backfill, state: BackfillState, now: datetime) -> Backfill | None:
        """Move a RUNNING backfill to CANCELLED or COMPLETED (conditional on RUNNING). Returns the stored backfill
        (as it is after the write, or as another writer left it), None if there is none."""
        ...


@dataclass(frozen=True)
class BudgetCalendar:
    """A tenant's booked releases (scheduler.core.fairness): releases per window of `window_ms`, by window index
    (epoch ms // window_ms). `version` orders writes."""

    version: int
    window_ms: int
    slots: dict[int, int]


class TenantBudgetStore(Protocol):
    """Each tenant's dispatch-budget calendar: one item per tenant, replaced with conditional writes."""

    def load(self, tenant: str) -> BudgetCalendar | None:
        """The tenant's calendar, strongly consistent; None for a tenant with nothing booked."""
        ...

    def save(self, tenant: str, calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
        """Store `calendar` if the stored one is still at version `expected` (None: absent); False if another writer
        got there first. `expires`: when an idle tenant's calendar may go (nothing in it matters by then)."""
        ...


class TenantSlots(Protocol):
    """Each tenant's execution slots (scheduler.core.concurrency): leased items, taken with conditional writes."""

    def acquire(self, tenant: str, limit: int, holder: str, now: datetime, lease_until: datetime) -> int | None:
        """Take one of slots `0 .. limit-1` that is free or whose lease ended before `now`, for `holder` until
        `lease_until`; None when fewer than one is free (live holders in slots beyond a lowered limit count too).
        Two callers never both hold one slot."""
        ...

    def extend(self, tenant: str, slot: int, holder: str, lease_until: datetime) -> bool:
        """Move the slot's lease to `lease_until` if `holder` still holds it; False if not."""
        ...

    def release(self, tenant: str, slot: int, holder: str) -> None:
        """Free the slot if `holder` still holds it (a no-op if not)."""
        ...


class PollerControl(Protocol):
    """The worker event source mappings' provisioned pollers, one mapping per priority lane (Lambda's
    UpdateEventSourceMapping on AWS; the local worker pool locally)."""

    def lanes(self) -> list[str]:
        """The lanes whose pollers this controls."""
        ...

    def minimum_pollers(self, lane: str) -> int | None:
        """The lane mapping's MinimumPollers now (None: not in provisioned mode)."""
        ...

    def set_minimum_pollers(self, lane: str, pollers: int) -> bool:
        """Set it; False when the mapping is busy with another update (try again at the next sweep)."""
        ...


class JobReader(Protocol):
    def get(self, job_id: str) -> Job | None: ...


class MessageControl(Protocol):
    """The one SQS message the worker is handling."""

    receive_count: int

    def extend_visibility(self, seconds: int) -> None: ...


class BatchVisibility(Protocol):
    """The visibility of the messages of one batch a worker received (SQS: ChangeMessageVisibilityBatch)."""

    def hold(self, message_ids: Sequence[str], seconds: int) -> list[str]:
        """Hide these messages of the batch for `seconds` from now, in as few requests as the queue allows (one
        per 10 messages and lane on SQS). Returns the ids it could not hold (deleted, received again elsewhere,
        or refused); raises if the queue could not be reached at all."""
        ...


@dataclass(frozen=True)
class TargetCall:
    """What a target receives for one attempt."""

    job: Job
    occurrence_key: str
    scheduled_for: datetime
    attempt: int
    fencing_token: int
    heartbeat: Callable[[], None]
    deadline: datetime


class TargetFailure(Exception):
    """A failed target call, classified (docs/design.md §3.4 step 6)."""

    def __init__(
        self,
        kind: Literal["retryable", "permanent", "ambiguous"],
        message: str,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after


class TargetInvoker(Protocol):
    def invoke(self, call: TargetCall) -> str | None:
        """Run the target once; return a short result summary, or raise TargetFailure."""
        ...


class Metrics(Protocol):
    def count(self, name: str, value: float = 1, unit: str = "Count") -> None: ...


class NullMetrics:
    def count(self, name: str, value: float = 1, unit: str = "Count") -> None:
        return None
