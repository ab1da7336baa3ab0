"""The stores: the ports through which the core keeps its state (jobs, timers, the ledger, backfills, tenant budgets
and slots), re-exported by `scheduler.core.ports`.

Adapters implement them for DynamoDB (`scheduler.adapters.dynamodb`) and in memory (`scheduler.adapters.memory`);
one contract test suite runs against every implementation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from scheduler.core.model.flow import FlowControl
from scheduler.core.model.job import ALL_JOBS, BackfillState, Job, JobQuery, JobState, RunState
from scheduler.core.records import (
    ALL_RUNS,
    Advance,
    AdvanceResult,
    Attempt,
    AttemptEnd,
    Backfill,
    Between,
    BucketBusy,
    BucketClaim,
    BucketId,
    BudgetCalendar,
    Dispatch,
    Execution,
    FlowKeyState,
    Hold,
    IdempotencyRecord,
    NewJob,
    OutboxEntry,
    Timer,
)


class JobStore(Protocol):
    """Job definitions, idempotency records, and the writes that must be atomic with them."""

    def create(
        self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool, quota: int
    ) -> None:
        """Write the job, its first timer, its idempotency record, (if `late`) a late-lane copy of the timer and
        the tenant's active-job count in one transaction. Raises IdempotentReplay / IdempotencyConflict when the
        key is taken, QuotaExceeded when the tenant already has `quota` active or paused jobs."""
        ...

    def create_all(self, new: Sequence[NewJob], quota: int) -> int:
        """Store several new jobs of one tenant (each as `create` would) in as few transactions as the store allows,
        the tenant's count raised once per transaction. Each transaction is all or nothing, in order: returns how
        many of `new`, from the first, are stored. It stops at the first transaction a condition refuses (a key
        taken, a job id taken, the quota too small for all of its jobs): those jobs and the rest are not stored,
        and the caller creates them one at a time to learn each one's answer. A store error in a later transaction
        also ends it with the count stored so far; it raises when nothing was stored or its outcome is unknown (the
        answer lost): the creates one at a time then find what it stored by their keys (a replay naming the very
        job id)."""
        ...

    def get(self, job_id: str) -> Job | None:
        """Strongly consistent read of a job."""
        ...

    def list(
        self, tenant: str, state: JobState | None, limit: int, cursor: str | None, query: JobQuery = ALL_JOBS
    ) -> tuple[list[Job], str | None]:
        """A tenant's jobs, oldest first, a page at a time; the cursor is opaque. With label selectors in `query`:
        the jobs with the driving selector's label (`JobQuery.driving`), by its value then job id; every job on a
        page matches `state` and all of `query`."""
        ...

    def get_by_external_id(self, tenant: str, external_id: str) -> Job | None:
        """The tenant's job with this external id (JobSpec.external_id), if any."""
        ...

    def replace(self, job: Job, previous: Job, timer: Timer | None, late: bool) -> None:
        """Store `job` if the stored version is still `previous.version`, with its next timer (and late copy),
        adjusting the tenant's active-job count; else VersionConflict."""
        ...

    def advance(self, timer: Timer, step: Advance) -> AdvanceResult:
        """Move an ACTIVE job at `timer.version` past `step.dispatched_for` (conditional write; docs/design.md §3.3).

        `step.next_run_at=None` completes the chain (the job becomes COMPLETED). A job that was paused, cancelled or
        changed since the timer was written is not touched and `proceed` is False.

        Completing releases the job's share of the quota in the same write (a transaction with the tenant's counter),
        unless `step.release_by` names the caller's progress record: then the write is a plain conditional update that
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

    def upcoming(self, minute: datetime, recorded: int | None = None) -> list[Timer]:
        """Every timer in the minute's buckets (every shard a writer recorded), whether or not they were swept: for
        forecasts (scheduler.core.capacity.forecast), not for dispatch - eventually consistent, so it may miss a timer
        written a moment ago. `recorded`: `recorded_shards()` when the caller read it already (a forecast reads it
        once for its whole window); else the store reads it."""
        ...

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        """Record progress through the bucket and extend the lease, if the claim still holds (else ClaimLost).
        `releases` (tenant -> jobs) are the shares of the quota of the jobs the page completed: released in the same
        atomic write, so a page re-run after a crash (its cursor not moved) releases them exactly once."""
        ...

    def finish_bucket(
        self, claim: BucketClaim, cursor: str, expire_after: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        """The bucket's last page: its checkpoint (with its `releases`, exactly once in the same way) and the
        bucket's completion (`complete_bucket`) in one atomic write, if the claim still holds (else ClaimLost)."""
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

    def advance_watermark(self, minute: datetime, swept_shards: int | None = None) -> None:
        """Move the watermark forward to `minute` (never backwards), unless a writer recorded more shards than the
        sweep swept (`swept_shards`; default: this store's `shard_count`): that writer may have put a timer into a
        bucket the sweep never looked at (docs/design.md §3.3, changing the shard count). Then nothing moves, and the
        next sweep, reading the recorded count, sweeps those buckets too."""
        ...

    def recorded_shards(self) -> int:
        """The most shards any writer recorded before writing with them (grow-only; 0: none). Every store records
        its `shard_count` once, before its first timer or late-lane write. Strongly consistent."""
        ...

    def put_late(self, timer: Timer) -> None: ...

    def late_timers(self, limit: int, shards: int | None = None) -> list[Timer]:
        """Late-lane timers (of `shards` shards; default: this store's `shard_count`), oldest fire_at first."""
        ...

    def remove_late(self, timer: Timer) -> None: ...


class Ledger(Protocol):
    """The executions table: one item per occurrence key; conditional writes decide every race."""

    def claim(self, dispatch: Dispatch, attempt: Attempt) -> Execution:
        """Claim the occurrence for `attempt`: RUNNING, epoch+1, attempts+1, if it is new, waiting to retry and due,
        (when `attempt.take_over_expired`) RUNNING with an expired lease, or SKIPPED because its job was paused and
        `dispatch` is from a later version of the job than the paused one (`Execution.reopened_by`: the resumed
        chain sends it again; the claim clears the mark and the finish instant, and keeps the outbox and the
        history). Raises ClaimRefused with the current item. `attempt.indexed=False` keeps the item out of the
        run-history index (`runs` then finds it by its key). `attempt.on_copy`: refused (`ClaimRefused.void_copy`)
        if `void_copies` was called for the occurrence."""
        ...

    def void_copies(self, key: str, now: datetime) -> None:
        """The job of occurrence `key` is about to change (edit, pause, cancel) after the advance that sent the
        occurrence with a copy of it: from now on a claim made on such a copy is refused, so its worker reads the job.
        Idempotent; changes nothing else (the occurrence is still new, claimable, and out of `get` and `runs`)."""
        ...

    def mark_held(self, dispatch: Dispatch, hold: Hold) -> None:
        """A flow-control key holds `dispatch`'s occurrence back before its first claim (a parallelism or pause
        hold): record it, merged with what an earlier mark recorded (its key, its earliest `since`, the union of its
        reasons). One write a hold; changes nothing else (the occurrence is still new, claimable, and out of `get`
        and `runs` until claimed, which keeps the hold on the run). Does nothing once the occurrence was claimed."""
        ...

    def get(self, key: str) -> Execution | None: ...

    def heartbeat(self, key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        """Extend the lease if `owner` still holds it at `epoch`; else LeaseLost."""
        ...

    def finish(self, key: str, owner: str, epoch: int, now: datetime, end: AttemptEnd) -> Execution:
        """Record how the attempt held at `epoch` ends (RETRY_WAIT or a terminal state); Fenced if stale.
        A terminal state also appends its outbox entry, in the same write; `end.paused_version` marks a pause skip
        that a later version's claim may reopen. Returns the item as written."""
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
        self, job_id: str, limit: int, cursor: str | None, unindexed: str | None = None, within: Between = ALL_RUNS
    ) -> tuple[list[Execution], str | None]:
        """Run history of a job, newest first, a page at a time; `unindexed` is the key of the job's occurrence
        claimed outside the index (scheduler.core.model.schedules.unindexed_occurrence), merged in at its place.
        `within` keeps only the runs scheduled strictly between its instants. Read from an index
        that lists keys only, so each run on the page is read by key, eventually consistent (a page costs a query
        and a read per run: ask for the page the caller needs)."""
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
    """Each tenant's execution slots (scheduler.core.tenancy.concurrency): leased items, taken with conditional
    writes."""

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

    def in_use(self, tenant: str, now: datetime) -> int:
        """How many of the tenant's slots a live holder has (strongly consistent)."""
        ...


class FlowControlStore(Protocol):
    """Each tenant's flow-control keys (scheduler.core.tenancy.flow_control): one item per key, holding its limits,
    its release calendar and its destination's feedback. The limits are last-write-wins; the calendar is replaced
    with conditional writes on its own version, so concurrent sweepers and workers never both fill one window."""

    def put_limits(self, tenant: str, limits: FlowControl, now: datetime) -> None:
        """Make `limits` the key's limits (creating the key), leaving its calendar and feedback as they are."""
        ...

    def get(self, tenant: str, key: str) -> FlowKeyState | None:
        """The key, strongly consistent; None for a key no write has named."""
        ...

    def list(self, tenant: str) -> list[FlowKeyState]:
        """The tenant's keys, by key."""
        ...

    def save_calendar(
        self, tenant: str, key: str, calendar: BudgetCalendar, expected: int | None, expires: datetime
    ) -> bool:
        """Store the key's calendar if the stored one is still at version `expected` (None: none yet); False if
        another writer got there first. Leaves the limits and the feedback as they are."""
        ...

    def take_start(self, tenant: str, key: str, seen: datetime | None, next_start: datetime) -> bool:
        """Start a call of the key now: its next call may start at `next_start`, if the stored `next_start` is still
        `seen` (None: none yet); False if another worker started one meanwhile."""
        ...

    def throttled(
        self, tenant: str, key: str, paused_until: datetime | None, rate_factor: float, now: datetime
    ) -> None:
        """The key's destination pushed back: pause it until `paused_until` (never earlier than a pause already
        stored) and hold it to `rate_factor` of its rate from `now`."""
        ...


class JobReader(Protocol):
    def get(self, job_id: str) -> Job | None: ...


@dataclass(frozen=True)
class FanOutRecord:
    """What the sweeps leave for the next tick to size its fan-out by (`scheduler.core.capacity.fan_out`)."""

    #: The last forecast: occurrences due per minute (an upper bound: `scheduler.core.capacity.forecast`).
    due: Mapping[datetime, int] = field(default_factory=dict)
    forecast_at: datetime | None = None
    #: Sweeps the last sweep that ran out of budget or time asked for, and when.
    backlog_sweeps: int = 0
    backlog_at: datetime | None = None


class FanOutStore(Protocol):
    """The fan-out's one shared record (docs/design.md §3.3, fan-out): last-writer-wins, advisory only: whatever it
    says, the bucket claims keep sweeps disjoint and the watermark correct."""

    def read(self) -> FanOutRecord: ...

    def record_forecast(self, due: Mapping[datetime, int], at: datetime) -> None: ...

    def record_backlog(self, sweeps: int, at: datetime) -> None: ...

    def claim_launch(self, minute: datetime) -> bool:
        """The first tick of `minute` to fan out claims it (a conditional write): True for it, False for any other
        tick of that minute (a retried tick, the local stack's ticks every few seconds), which then starts none."""
        ...
