"""In-memory adapters for every port: for unit tests and the simulator. They keep the exact conditional
semantics of the DynamoDB adapters (the same contract tests run against both)."""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.core.chain import active_delta, advance_allowed, already_advanced, completion_mark, replace_allowed
from scheduler.core.errors import (
    ClaimLost,
    ClaimRefused,
    EventPublishFailed,
    Fenced,
    IdempotencyConflict,
    IdempotentReplay,
    LeaseLost,
    QuotaExceeded,
    VersionConflict,
)
from scheduler.core.events import outbox_entry
from scheduler.core.keys import shard_of
from scheduler.core.model import BackfillState, Job, JobState, RunState
from scheduler.core.ports import (
    AdvanceResult,
    Backfill,
    BucketBusy,
    BucketClaim,
    BucketId,
    BudgetCalendar,
    Dispatch,
    Execution,
    IdempotencyRecord,
    OutboxEntry,
    OutcomeEvent,
    Timer,
)
from scheduler.core.timefmt import minute_of, to_ms

PAGE_SIZE = 100


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)

    def set(self, when: datetime) -> None:
        self._now = when


class MemoryJobStore:
    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}
        self.idempotency: dict[tuple[str, str], IdempotencyRecord] = {}
        self.active: dict[str, int] = {}
        self.timers: MemoryTimerStore | None = None
        self.lock = threading.RLock()

    def attach(self, timers: MemoryTimerStore) -> None:
        """Jobs and timers share one table in DynamoDB; creates write both atomically."""
        self.timers = timers
        timers.quota = self

    def create(
        self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool, quota: int
    ) -> None:
        with self.lock:
            if idempotency is not None:
                existing = self.idempotency.get((idempotency.tenant, idempotency.key))
                if existing is not None and existing.expires_at > job.created_at:
                    if existing.request_hash != idempotency.request_hash:
                        raise IdempotencyConflict(idempotency.key)
                    raise IdempotentReplay(existing)
            if job.job_id in self.jobs:
                raise VersionConflict(self.jobs[job.job_id])
            if self.active.get(job.tenant, 0) >= quota:
                raise QuotaExceeded(f"this tenant already has {quota} active or paused jobs")
            self.active[job.tenant] = self.active.get(job.tenant, 0) + 1
            self.jobs[job.job_id] = job
            if idempotency is not None:
                self.idempotency[(idempotency.tenant, idempotency.key)] = idempotency
            if timer is not None:
                assert self.timers is not None
                self.timers.put_timer(timer)
                if late:
                    self.timers.put_late(timer)

    def get(self, job_id: str) -> Job | None:
        with self.lock:
            return self.jobs.get(job_id)

    def list(self, tenant: str, state: JobState | None, limit: int, cursor: str | None) -> tuple[list[Job], str | None]:
        with self.lock:
            mine = sorted(
                (j for j in self.jobs.values() if j.tenant == tenant),
                key=lambda j: (to_ms(j.created_at), j.job_id),
            )
        position = 0
        if cursor:
            position = next((i + 1 for i, j in enumerate(mine) if j.job_id == cursor), len(mine))
        page: list[Job] = []
        last_seen: str | None = None
        for job in mine[position:]:
            last_seen = job.job_id
            if state is None or job.state == state:
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
                assert self.timers is not None
                self.timers.put_timer(timer)
                if late:
                    self.timers.put_late(timer)

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
        with self.lock:
            job = self.jobs.get(timer.job_id)
            if job is None:
                return AdvanceResult(False, False, None)
            if advance_allowed(job, timer, dispatched_for):
                deferred_release = next_run_at is None and release_by is not None
                if next_run_at is None and not deferred_release:
                    self.active[job.tenant] = self.active.get(job.tenant, 0) - 1
                self.jobs[job.job_id] = job.model_copy(
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
                return AdvanceResult(True, True, JobState.ACTIVE, release=deferred_release)
            return already_advanced(job, timer, dispatched_for, release_by)


@dataclass
class _Bucket:
    sealed: bool = False
    done: bool = False
    owner: str | None = None
    epoch: int = 0
    lease_until: datetime | None = None
    cursor: str | None = None


class MemoryTimerStore:
    def __init__(self, shard_count: int) -> None:
        self.shard_count = shard_count
        self.buckets: dict[BucketId, _Bucket] = {}
        self.timer_items: dict[BucketId, dict[str, Timer]] = {}
        self.late: dict[str, Timer] = {}
        self._watermark: datetime | None = None
        self.lock = threading.RLock()
        #: The job store whose tenant counters page checkpoints release into (one table in DynamoDB).
        self.quota: MemoryJobStore | None = None

    def bucket_of(self, timer: Timer) -> BucketId:
        return BucketId(minute_of(timer.due_at), shard_of(timer.job_id, self.shard_count))

    def put_timer(self, timer: Timer) -> None:
        with self.lock:
            self.timer_items.setdefault(self.bucket_of(timer), {})[timer.slot] = timer

    def claim_bucket(
        self, bucket: BucketId, owner: str, now: datetime, lease_until: datetime
    ) -> BucketClaim | BucketBusy:
        with self.lock:
            item = self.buckets.setdefault(bucket, _Bucket())
            if item.done:
                return BucketBusy(done=True)
            # A lease is live until strictly after its end (as in DynamoDB: claimable when lease_until < now).
            if item.owner is not None and item.lease_until is not None and item.lease_until >= now:
                return BucketBusy(done=False)
            item.sealed = True
            item.owner = owner
            item.epoch += 1
            item.lease_until = lease_until
            return BucketClaim(bucket, owner, item.epoch, item.cursor)

    def is_sealed(self, bucket: BucketId) -> bool:
        with self.lock:
            item = self.buckets.get(bucket)
            if item is not None:
                return item.sealed
            return self._watermark is not None and bucket.minute < self._watermark

    def has_timer(self, timer: Timer) -> bool:
        with self.lock:
            return timer.slot in self.timer_items.get(self.bucket_of(timer), {})

    def timers(self, bucket: BucketId, after: str | None) -> Iterator[tuple[list[Timer], str]]:
        while True:
            with self.lock:
                items = sorted(self.timer_items.get(bucket, {}).items())
            page = [(k, t) for k, t in items if after is None or k > after][:PAGE_SIZE]
            if not page:
                return
            after = page[-1][0]
            yield [t for _, t in page], after
            if len(page) < PAGE_SIZE:
                return

    def upcoming(self, minute: datetime) -> list[Timer]:
        with self.lock:
            return [
                timer
                for shard in range(self.shard_count)
                for _, timer in sorted(self.timer_items.get(BucketId(minute, shard), {}).items())
            ]

    def _held(self, claim: BucketClaim) -> _Bucket:
        item = self.buckets.get(claim.bucket)
        if item is None or item.epoch != claim.epoch or item.owner != claim.owner or item.done:
            raise ClaimLost(str(claim.bucket))
        return item

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        # One atomic write in DynamoDB (the checkpoint and the counters): both locks, the job store's first as in
        # `create`.
        with self.quota.lock if self.quota is not None else self.lock, self.lock:
            item = self._held(claim)
            item.cursor = cursor
            item.lease_until = lease_until
            if releases and self.quota is not None:
                for tenant, count in releases.items():
                    self.quota.active[tenant] = self.quota.active.get(tenant, 0) - count

    def release(self, claim: BucketClaim) -> None:
        with self.lock:
            item = self._held(claim)
            item.owner = None
            item.lease_until = None

    def complete_bucket(self, claim: BucketClaim, expire_after: datetime) -> None:
        with self.lock:
            self._held(claim).done = True

    def watermark(self) -> datetime | None:
        with self.lock:
            return self._watermark

    def init_watermark(self, minute: datetime) -> datetime:
        with self.lock:
            if self._watermark is None:
                self._watermark = minute
            return self._watermark

    def advance_watermark(self, minute: datetime) -> None:
        with self.lock:
            if self._watermark is None or minute > self._watermark:
                self._watermark = minute

    def put_late(self, timer: Timer) -> None:
        with self.lock:
            self.late[timer.slot] = timer

    def late_timers(self, limit: int) -> list[Timer]:
        with self.lock:
            return [t for _, t in sorted(self.late.items())][:limit]

    def remove_late(self, timer: Timer) -> None:
        with self.lock:
            self.late.pop(timer.slot, None)


class MemoryLedger:
    def __init__(self) -> None:
        self.items: dict[str, Execution] = {}
        self.lock = threading.RLock()

    def claim(
        self,
        dispatch: Dispatch,
        owner: str,
        now: datetime,
        lease_until: datetime,
        take_over_expired: bool,
        indexed: bool = True,
    ) -> Execution:
        # No index here: `runs` lists every item, which is what the DynamoDB adapter's merge gives.
        with self.lock:
            item = self.items.get(dispatch.key)
            claimable = (
                item is None
                or (item.state == RunState.RETRY_WAIT and (item.next_attempt_at is None or item.next_attempt_at <= now))
                or (
                    take_over_expired
                    and item.state == RunState.RUNNING
                    and item.lease_until is not None
                    and item.lease_until < now
                )
            )
            if not claimable:
                raise ClaimRefused(copy.deepcopy(item))
            if item is None:
                item = Execution(
                    key=dispatch.key,
                    job_id=dispatch.job_id,
                    tenant=dispatch.tenant,
                    scheduled_for=dispatch.scheduled_for,
                    state=RunState.RUNNING,
                    epoch=0,
                    attempts=0,
                    created_at=now,
                )
                self.items[dispatch.key] = item
            item.state = RunState.RUNNING
            item.epoch += 1
            item.attempts += 1
            item.owner = owner
            item.lease_until = lease_until
            item.next_attempt_at = None
            item.updated_at = now
            return copy.deepcopy(item)

    def get(self, key: str) -> Execution | None:
        with self.lock:
            item = self.items.get(key)
            return copy.deepcopy(item) if item else None

    def _held(self, key: str, owner: str, epoch: int) -> Execution | None:
        item = self.items.get(key)
        if item is None or item.epoch != epoch or item.owner != owner or item.state != RunState.RUNNING:
            return None
        return item

    def heartbeat(self, key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        with self.lock:
            item = self._held(key, owner, epoch)
            if item is None:
                raise LeaseLost(key)
            item.lease_until = lease_until

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
    ) -> Execution:
        with self.lock:
            item = self._held(key, owner, epoch)
            if item is None:
                raise Fenced(key)
            if refund_attempt:
                item.attempts -= 1
            item.state = state
            item.updated_at = now
            item.lease_until = None
            item.next_attempt_at = next_attempt_at
            if result is not None:
                item.result = result
            if error is not None:
                item.last_error = error
            if state.terminal:
                item.finished_at = now
                if announce:
                    item.outbox.append(outbox_entry(key, epoch, state, now, error=error, result=result))
            item.history.append(_history_entry(epoch, state, now, error))
            return copy.deepcopy(item)

    def record_unclaimed(self, dispatch: Dispatch, state: RunState, now: datetime, reason: str) -> bool:
        with self.lock:
            if dispatch.key in self.items:
                return False
            self.items[dispatch.key] = Execution(
                key=dispatch.key,
                job_id=dispatch.job_id,
                tenant=dispatch.tenant,
                scheduled_for=dispatch.scheduled_for,
                state=state,
                epoch=0,
                attempts=0,
                last_error=reason,
                created_at=now,
                updated_at=now,
                finished_at=now,
                history=[_history_entry(0, state, now, reason)],
                outbox=[outbox_entry(dispatch.key, 0, state, now, error=reason)],
            )
            return True

    def expire_to(
        self, key: str, epoch: int, state: RunState, now: datetime, reason: str, *, announce: bool = True
    ) -> bool:
        with self.lock:
            item = self.items.get(key)
            if (
                item is None
                or item.epoch != epoch
                or item.state != RunState.RUNNING
                or item.lease_until is None
                or item.lease_until >= now
            ):
                return False
            item.state = state
            item.last_error = reason
            item.lease_until = None
            item.updated_at = now
            item.finished_at = now
            item.history.append(_history_entry(epoch, state, now, reason))
            if announce:
                item.outbox.append(outbox_entry(key, epoch, state, now, error=reason))
            return True

    def mark_dead_lettered(self, key: str) -> None:
        with self.lock:
            item = self.items.get(key)
            if item is not None:
                item.dead_lettered = True

    def revive(self, key: str, now: datetime, note: str) -> bool:
        with self.lock:
            item = self.items.get(key)
            if item is None or item.state != RunState.DEAD:
                return False
            item.state = RunState.RETRY_WAIT
            item.attempts = 0
            item.next_attempt_at = now
            item.dead_lettered = False
            item.finished_at = None
            item.updated_at = now
            item.history.append(_history_entry(item.epoch, RunState.RETRY_WAIT, now, note))
            return True

    def runs(
        self, job_id: str, limit: int, cursor: str | None, unindexed: str | None = None
    ) -> tuple[list[Execution], str | None]:
        with self.lock:
            mine = sorted(
                (i for i in self.items.values() if i.job_id == job_id),
                key=lambda e: e.scheduled_for,
                reverse=True,
            )
        start = 0
        if cursor:
            start = next((n + 1 for n, e in enumerate(mine) if e.key == cursor), len(mine))
        page = [copy.deepcopy(e) for e in mine[start : start + limit]]
        more = start + limit < len(mine)
        return page, (page[-1].key if more and page else None)

    def resolve(self, key: str, state: RunState, now: datetime, note: str) -> Execution:
        with self.lock:
            item = self.items.get(key)
            if item is None or item.state != RunState.RECONCILING:
                raise ClaimRefused(copy.deepcopy(item))
            item.state = state
            item.updated_at = now
            item.next_attempt_at = now if state == RunState.RETRY_WAIT else None
            item.finished_at = now if state.terminal else None
            item.history.append(_history_entry(item.epoch, state, now, note))
            if state.terminal:
                item.outbox.append(outbox_entry(key, item.epoch, state, now, error=note))
            return copy.deepcopy(item)

    def pending_outbox(self, limit: int) -> list[Execution]:
        with self.lock:
            pending = sorted((i for i in self.items.values() if i.outbox), key=lambda e: e.outbox[-1].at)
            return [copy.deepcopy(e) for e in pending[:limit]]

    def clear_outbox(self, key: str, published: Sequence[OutboxEntry]) -> bool:
        with self.lock:
            item = self.items.get(key)
            if item is None or not published or len(item.outbox) != len(published):
                return False
            if item.outbox[-1].event_id != published[-1].event_id:
                return False
            item.outbox = []
            return True


def _history_entry(epoch: int, state: RunState, now: datetime, error: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"epoch": epoch, "state": state.value, "at": now.isoformat()}
    if error:
        entry["error"] = error[:500]
    return entry


@dataclass
class QueuedMessage:
    message_id: str
    dispatch: Dispatch
    visible_at: datetime
    receive_count: int = 0
    receipt: str | None = None


@dataclass
class MemoryQueue:
    """An SQS-like queue: per-message delay, visibility timeouts, receive counts, a DLQ."""

    clock: Any
    visibility_timeout: float = 720
    max_receive_count: int = 50
    messages: dict[str, QueuedMessage] = field(default_factory=dict)
    dead: list[tuple[Dispatch, Execution | None]] = field(default_factory=list)
    sent: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        with self.lock:
            for d in dispatches:
                self.sent += 1
                delay = min(900, max(0, math.floor((d.send_at - now).total_seconds())))
                mid = f"m{self.sent}"
                self.messages[mid] = QueuedMessage(mid, d, now + timedelta(seconds=delay))

    def dead_letter(self, dispatch: Dispatch, execution: Execution) -> None:
        with self.lock:
            self.dead.append((dispatch, copy.deepcopy(execution)))

    def receive(self, max_messages: int = 10) -> list[QueuedMessage]:
        now = self.clock.now()
        out: list[QueuedMessage] = []
        with self.lock:
            for msg in sorted(self.messages.values(), key=lambda m: m.visible_at):
                if len(out) == max_messages:
                    break
                if msg.visible_at > now:
                    continue
                msg.receive_count += 1
                if msg.receive_count > self.max_receive_count:
                    del self.messages[msg.message_id]
                    self.dead.append((msg.dispatch, None))
                    continue
                msg.visible_at = now + timedelta(seconds=self.visibility_timeout)
                msg.receipt = f"{msg.message_id}#{msg.receive_count}"
                out.append(replace(msg))
        return out

    def delete(self, message: QueuedMessage) -> None:
        with self.lock:
            current = self.messages.get(message.message_id)
            if current is not None and current.receipt == message.receipt:
                del self.messages[message.message_id]

    def change_visibility(self, message: QueuedMessage, seconds: int) -> None:
        with self.lock:
            current = self.messages.get(message.message_id)
            if current is not None and current.receipt == message.receipt:
                current.visible_at = self.clock.now() + timedelta(seconds=seconds)


class MemoryMessage:
    """MessageControl for one received MemoryQueue message."""

    def __init__(self, queue: MemoryQueue, message: QueuedMessage) -> None:
        self.queue = queue
        self.message = message
        self.receive_count = message.receive_count

    def extend_visibility(self, seconds: int) -> None:
        self.queue.change_visibility(self.message, seconds)


class MemoryBatchVisibility:
    """BatchVisibility for one batch received from a MemoryQueue."""

    def __init__(self, queue: MemoryQueue, messages: Sequence[QueuedMessage]) -> None:
        self.queue = queue
        self.messages = {m.message_id: m for m in messages}

    def hold(self, message_ids: Sequence[str], seconds: int) -> list[str]:
        refused = []
        with self.queue.lock:
            for message_id in message_ids:
                received = self.messages[message_id]
                current = self.queue.messages.get(message_id)
                if current is None or current.receipt != received.receipt:
                    refused.append(message_id)
                else:
                    self.queue.change_visibility(received, seconds)
        return refused


class MemoryBackfillStore:
    def __init__(self) -> None:
        self.items: dict[str, Backfill] = {}
        self.lock = threading.RLock()

    def create(self, backfill: Backfill) -> None:
        with self.lock:
            if backfill.backfill_id in self.items:
                raise ValueError(f"backfill {backfill.backfill_id} exists")
            self.items[backfill.backfill_id] = backfill

    def get(self, backfill_id: str) -> Backfill | None:
        with self.lock:
            return self.items.get(backfill_id)

    def for_job(self, job_id: str, limit: int, cursor: str | None) -> tuple[list[Backfill], str | None]:
        """Newest first (ids sort by creation); the cursor is the id of the last backfill of the previous page."""
        with self.lock:
            mine = [b for _, b in sorted(self.items.items(), reverse=True) if b.job_id == job_id]
        start = 0
        if cursor:
            start = next((n + 1 for n, b in enumerate(mine) if b.backfill_id == cursor), 0)
            if start == 0:
                raise ValueError("cursor is not one this API returned for this job")
        page = mine[start : start + limit]
        more = start + limit < len(mine)
        return page, (page[-1].backfill_id if more and page else None)

    def running(self, limit: int) -> list[Backfill]:
        with self.lock:
            found = [b for _, b in sorted(self.items.items()) if b.state == BackfillState.RUNNING]
            return found[:limit]

    def advance(self, backfill: Backfill, cursor: datetime, dispatched: int, done: bool, now: datetime) -> bool:
        with self.lock:
            current = self.items.get(backfill.backfill_id)
            if current is None or current.state != BackfillState.RUNNING or current.cursor != backfill.cursor:
                return False
            self.items[backfill.backfill_id] = replace(
                current,
                cursor=cursor,
                dispatched=dispatched,
                waves=current.waves + 1,
                updated_at=now,
                state=BackfillState.COMPLETED if done else BackfillState.RUNNING,
            )
            return True

    def finish(self, backfill: Backfill, state: BackfillState, now: datetime) -> Backfill | None:
        with self.lock:
            current = self.items.get(backfill.backfill_id)
            if current is None or current.state != BackfillState.RUNNING:
                return current
            self.items[backfill.backfill_id] = replace(current, state=state, updated_at=now)
            return self.items[backfill.backfill_id]


class MemoryTenantBudgets:
    def __init__(self) -> None:
        self.calendars: dict[str, BudgetCalendar] = {}
        self.lock = threading.RLock()

    def load(self, tenant: str) -> BudgetCalendar | None:
        with self.lock:
            current = self.calendars.get(tenant)
            return copy.deepcopy(current) if current is not None else None

    def save(self, tenant: str, calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
        with self.lock:
            current = self.calendars.get(tenant)
            if (current.version if current is not None else None) != expected:
                return False
            self.calendars[tenant] = copy.deepcopy(calendar)
            return True


class MemoryTenantSlots:
    """Execution slots: (tenant, slot) -> (holder, lease end)."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], tuple[str, datetime]] = {}
        self.lock = threading.RLock()

    def live(self, tenant: str, now: datetime) -> dict[int, str]:
        """The tenant's live holders by slot (for tests and the simulator's checker)."""
        with self.lock:
            return {slot: h for (t, slot), (h, until) in self.held.items() if t == tenant and until >= now}

    def acquire(self, tenant: str, limit: int, holder: str, now: datetime, lease_until: datetime) -> int | None:
        with self.lock:
            live = self.live(tenant, now)
            if len(live) >= limit:
                return None
            free = [i for i in range(limit) if i not in live]
            if not free:
                return None
            slot = free[0]
            self.held[(tenant, slot)] = (holder, lease_until)
            return slot

    def extend(self, tenant: str, slot: int, holder: str, lease_until: datetime) -> bool:
        with self.lock:
            current = self.held.get((tenant, slot))
            if current is None or current[0] != holder:
                return False
            self.held[(tenant, slot)] = (holder, lease_until)
            return True

    def release(self, tenant: str, slot: int, holder: str) -> None:
        with self.lock:
            current = self.held.get((tenant, slot))
            if current is not None and current[0] == holder:
                del self.held[(tenant, slot)]


class MemoryEventPublisher:
    """An event bus that keeps what it was given; `failing` makes it refuse (as an unreachable bus would)."""

    def __init__(self) -> None:
        self.published: list[OutcomeEvent] = []
        self.failing = False
        self.lock = threading.RLock()

    def publish(self, events: Sequence[OutcomeEvent]) -> None:
        with self.lock:
            if self.failing:
                raise EventPublishFailed(f"{len(events)} events refused")
            self.published.extend(events)


class RecordingMetrics:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def count(self, name: str, value: float = 1, unit: str = "Count") -> None:
        self.counts[name] = self.counts.get(name, 0) + value


class MemoryPollerControl:
    """PollerControl in memory: each lane's MinimumPollers, every write recorded; lanes in `busy` refuse writes
    (as a mapping with another update under way does)."""

    def __init__(self, pollers: dict[str, int | None]) -> None:
        self.pollers = dict(pollers)
        self.busy: set[str] = set()
        self.writes: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def lanes(self) -> list[str]:
        return sorted(self.pollers)

    def minimum_pollers(self, lane: str) -> int | None:
        with self.lock:
            return self.pollers[lane]

    def set_minimum_pollers(self, lane: str, pollers: int) -> bool:
        with self.lock:
            if lane in self.busy:
                return False
            self.pollers[lane] = pollers
            self.writes.append((lane, pollers))
            return True
