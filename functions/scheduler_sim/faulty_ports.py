"""The ports as one actor sees them: proxies of the shared in-memory stores, the ready queue, the event bus and the
clock, each call passing the actor's `Gate` (`scheduler_sim.faults`) before and after it delegates."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar

from scheduler.core.model.job import ALL_JOBS, BackfillState, Job, JobQuery, JobState, RunState
from scheduler.core.ports import (
    ALL_RUNS,
    Advance,
    AdvanceResult,
    Attempt,
    AttemptEnd,
    Backfill,
    BackfillStore,
    Between,
    BucketBusy,
    BucketClaim,
    BucketId,
    BudgetCalendar,
    Dispatch,
    EventPublisher,
    Execution,
    Hold,
    IdempotencyRecord,
    JobStore,
    Ledger,
    NewJob,
    OutboxEntry,
    OutcomeEvent,
    ReadyQueue,
    TenantBudgetStore,
    TenantSlots,
    Timer,
    TimerStore,
)
from scheduler_sim.faults import Gate, Throttled

Port = TypeVar("Port")


class Gated(Generic[Port]):
    """A port as one actor sees it: the shared `inner` one, each call through the actor's `gate`."""

    def __init__(self, inner: Port, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate


class FaultyJobStore(Gated[JobStore]):
    """JobStore (and JobReader) of one actor, through its gate."""

    def __init__(self, inner: JobStore, gate: Gate, clock: _TrueClock) -> None:
        super().__init__(inner, gate)
        self.clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(
        self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool, quota: int
    ) -> None:
        with self.gate.call("jobs.create", job, timer, late):
            self.inner.create(job, timer, idempotency, late, quota)

    def create_all(self, new: Sequence[NewJob], quota: int) -> int:
        with self.gate.call("jobs.create_all", [item.job for item in new]):
            stored = self.inner.create_all(new, quota)
            self.gate.result("jobs.create_all", stored)
        return stored

    def get(self, job_id: str) -> Job | None:
        with self.gate.call("jobs.get", job_id):
            job = self.inner.get(job_id)
            self.gate.result("jobs.get", job)
            self.gate.host.job_read(self.gate.actor)
        return job

    def list(
        self, tenant: str, state: JobState | None, limit: int, cursor: str | None, query: JobQuery = ALL_JOBS
    ) -> tuple[list[Job], str | None]:
        self.gate.before("jobs.list")
        return self.inner.list(tenant, state, limit, cursor, query)

    def get_by_external_id(self, tenant: str, external_id: str) -> Job | None:
        self.gate.before("jobs.get_by_external_id")
        return self.inner.get_by_external_id(tenant, external_id)

    def replace(self, job: Job, previous: Job, timer: Timer | None, late: bool) -> None:
        with self.gate.call("jobs.replace", job, timer, late):
            self.inner.replace(job, previous, timer, late)

    def advance(self, timer: Timer, step: Advance) -> AdvanceResult:
        with self.gate.call("jobs.advance", timer, step.next_run_at, step.dispatched_for, step.skipped):
            result = self.inner.advance(timer, step)
            self.gate.result("jobs.advance", result)
            self.gate.host.advanced(timer, step.dispatched_for, step.skipped, result, self.clock.now())
            self.gate.in_chain_window = True
        return result


class FaultyTimerStore(Gated[TimerStore]):
    """TimerStore of one actor, through its gate."""

    def __init__(self, inner: TimerStore, gate: Gate) -> None:
        super().__init__(inner, gate)
        self.shard_count = inner.shard_count

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bucket_of(self, timer: Timer) -> BucketId:
        return self.inner.bucket_of(timer)

    def put_timer(self, timer: Timer) -> None:
        with self.gate.call("timers.put_timer", timer):
            self.inner.put_timer(timer)
            self.gate.host.timer_stored(timer)

    def claim_bucket(
        self, bucket: BucketId, owner: str, now: datetime, lease_until: datetime
    ) -> BucketClaim | BucketBusy:
        with self.gate.call("timers.claim_bucket", bucket, owner, lease_until):
            claim = self.inner.claim_bucket(bucket, owner, now, lease_until)
            self.gate.result("timers.claim_bucket", claim)
        return claim

    def is_sealed(self, bucket: BucketId) -> bool:
        self.gate.before("timers.is_sealed", bucket)
        sealed = self.inner.is_sealed(bucket)
        self.gate.result("timers.is_sealed", sealed)
        return sealed

    def has_timer(self, timer: Timer) -> bool:
        self.gate.before("timers.has_timer", timer)
        stored = self.inner.has_timer(timer)
        self.gate.result("timers.has_timer", stored)
        return stored

    def timers(self, bucket: BucketId, after: str | None) -> Iterator[tuple[list[Timer], str]]:
        self.gate.before("timers.query", bucket, after)
        for page, cursor in self.inner.timers(bucket, after):
            self.gate.result("timers.query", page)
            yield page, cursor

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        with self.gate.call("timers.checkpoint", claim, cursor):
            self.inner.checkpoint(claim, cursor, lease_until, releases)

    def finish_bucket(
        self, claim: BucketClaim, cursor: str, expire_after: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        with self.gate.call("timers.finish_bucket", claim, cursor):
            self.inner.finish_bucket(claim, cursor, expire_after, releases)

    def release(self, claim: BucketClaim) -> None:
        with self.gate.call("timers.release", claim):
            self.inner.release(claim)

    def complete_bucket(self, claim: BucketClaim, expire_after: datetime) -> None:
        with self.gate.call("timers.complete_bucket", claim):
            self.inner.complete_bucket(claim, expire_after)

    def watermark(self) -> datetime | None:
        self.gate.before("timers.watermark")
        return self.inner.watermark()

    def init_watermark(self, minute: datetime) -> datetime:
        with self.gate.call("timers.init_watermark"):
            current = self.inner.init_watermark(minute)
            self.gate.host.watermark_moved()
            return current

    def advance_watermark(self, minute: datetime, swept_shards: int | None = None) -> None:
        with self.gate.call("timers.advance_watermark", minute):
            self.inner.advance_watermark(minute, swept_shards)
            self.gate.host.watermark_moved()

    def recorded_shards(self) -> int:
        self.gate.before("timers.recorded_shards")
        return self.inner.recorded_shards()

    def put_late(self, timer: Timer) -> None:
        with self.gate.call("timers.put_late", timer):
            self.inner.put_late(timer)

    def late_timers(self, limit: int, shards: int | None = None) -> list[Timer]:
        self.gate.before("timers.late_timers")
        return self.inner.late_timers(limit, shards)

    def remove_late(self, timer: Timer) -> None:
        with self.gate.call("timers.remove_late", timer):
            self.inner.remove_late(timer)


class FaultyLedger(Gated[Ledger]):
    """Ledger of one actor, through its gate. It also reports every accepted write to the host, which keeps
    the highest epoch claimed per occurrence: a write accepted from a lower epoch breaks invariant 3.
    Methods it does not wrap go straight through."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def claim(self, dispatch: Dispatch, attempt: Attempt) -> Execution:
        with self.gate.call("ledger.claim", dispatch, attempt.owner, attempt.lease_until):
            execution = self.inner.claim(dispatch, attempt)
            self.gate.result("ledger.claim", execution)
            self.gate.host.ledger_claimed(execution.key, execution.epoch)
            if attempt.on_copy:
                # A claim on the message's copy of the job is where its worker learns that the job did not change
                # (no change voided the copy before it): for invariant 4 it checks the job here, as a read would.
                self.gate.host.job_read(self.gate.actor)
        return execution

    def void_copies(self, key: str, now: datetime) -> None:
        with self.gate.call("ledger.void_copies", key):
            self.inner.void_copies(key, now)

    def mark_held(self, dispatch: Dispatch, hold: Hold) -> None:
        # Told, never decided on: a mark changes no state any invariant judges, and the worker goes on the same
        # whether it failed or not, so a fault here reaches no state the neighbouring gates do not. It passes no
        # gate (and draws nothing from the seed's faults, which stay those of the protocol's own calls); traced.
        host = self.gate.host
        if host.trace_calls:
            host.trace(self.gate.actor, f"ledger.mark_held({dispatch.key})")
        self.inner.mark_held(dispatch, hold)

    def get(self, key: str) -> Execution | None:
        self.gate.before("ledger.get", key)
        return self.inner.get(key)

    def heartbeat(self, key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        with self.gate.call("ledger.heartbeat", key, owner, epoch):
            self.inner.heartbeat(key, owner, epoch, lease_until)
            self.gate.host.ledger_write("heartbeat", key, epoch, owner)

    def finish(self, key: str, owner: str, epoch: int, now: datetime, end: AttemptEnd) -> Execution:
        with self.gate.call("ledger.finish", key, owner, epoch, end.state.value):
            recorded = self.inner.finish(key, owner, epoch, now, end)
            self.gate.host.ledger_write(f"finish {end.state.value}", key, epoch, owner)
        return recorded

    def record_unclaimed(self, dispatch: Dispatch, state: RunState, now: datetime, reason: str) -> bool:
        with self.gate.call("ledger.record_unclaimed", dispatch, state.value, reason):
            return self.inner.record_unclaimed(dispatch, state, now, reason)

    def expire_to(
        self, key: str, epoch: int, state: RunState, now: datetime, reason: str, *, announce: bool = True
    ) -> bool:
        with self.gate.call("ledger.expire_to", key, epoch, state.value):
            done = self.inner.expire_to(key, epoch, state, now, reason, announce=announce)
            if done:
                self.gate.host.ledger_write(f"expire_to {state.value}", key, epoch, None)
        return done

    def mark_dead_lettered(self, key: str) -> None:
        with self.gate.call("ledger.mark_dead_lettered"):
            self.inner.mark_dead_lettered(key)

    def revive(self, key: str, now: datetime, note: str) -> bool:
        with self.gate.call("ledger.revive"):
            return self.inner.revive(key, now, note)

    def runs(
        self, job_id: str, limit: int, cursor: str | None, unindexed: str | None = None, within: Between = ALL_RUNS
    ) -> tuple[list[Execution], str | None]:
        self.gate.before("ledger.runs")
        return self.inner.runs(job_id, limit, cursor, unindexed, within)

    def pending_outbox(self, limit: int) -> list[Execution]:
        self.gate.before("ledger.pending_outbox")
        pending = self.inner.pending_outbox(limit)
        self.gate.result("ledger.pending_outbox", [e.key for e in pending])
        return pending

    def clear_outbox(self, key: str, published: Sequence[OutboxEntry]) -> bool:
        with self.gate.call("ledger.clear_outbox", key, len(published)):
            cleared = self.inner.clear_outbox(key, published)
            self.gate.result("ledger.clear_outbox", cleared)
        return cleared

    def resolve(self, key: str, state: RunState, now: datetime, note: str) -> Execution:
        with self.gate.call("ledger.resolve"):
            return self.inner.resolve(key, state, now, note)


class FaultyQueue(Gated[ReadyQueue]):
    """The ready queue as one actor sends to it. A throttled send may deliver part of the batch first (as a
    SendMessageBatch with some failed entries does); the duplicates and late copies are added by the host."""

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        with self.gate.call("queue.send", list(dispatches)):
            part = self.gate.throttled_part("queue.send", len(dispatches))
            if part is not None:
                self.gate.host.queue_send(self.gate.actor, dispatches[:part], now)
                raise Throttled(f"queue.send: {len(dispatches) - part} of {len(dispatches)} messages not accepted")
            self.gate.host.queue_send(self.gate.actor, dispatches, now)
            self.gate.in_chain_window = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def dead_letter(self, dispatch: Dispatch, execution: Execution) -> None:
        with self.gate.call("queue.dead_letter"):
            self.inner.dead_letter(dispatch, execution)


class FaultyTenantSlots(Gated[TenantSlots]):
    """A worker's execution slots (per-tenant execution budgets, or flow-control keys'), through its gate; the lease
    each acquire or extension grants is noted in `leases` by (slot owner, holder), for the checker."""

    def __init__(self, inner: TenantSlots, gate: Gate, leases: dict[tuple[str, str], datetime] | None = None) -> None:
        super().__init__(inner, gate)
        self.leases = leases

    def acquire(self, tenant: str, limit: int, holder: str, now: datetime, lease_until: datetime) -> int | None:
        with self.gate.call("slots.acquire", tenant):
            slot = self.inner.acquire(tenant, limit, holder, now, lease_until)
            self.gate.result("slots.acquire", slot)
        if slot is not None and self.leases is not None:
            self.leases[(tenant, holder)] = lease_until
        return slot

    def extend(self, tenant: str, slot: int, holder: str, lease_until: datetime) -> bool:
        with self.gate.call("slots.extend", tenant):
            kept = self.inner.extend(tenant, slot, holder, lease_until)
        if kept and self.leases is not None:
            self.leases[(tenant, holder)] = lease_until
        return kept

    def release(self, tenant: str, slot: int, holder: str) -> None:
        with self.gate.call("slots.release", tenant):
            self.inner.release(tenant, slot, holder)

    def in_use(self, tenant: str, now: datetime) -> int:
        return self.inner.in_use(tenant, now)


class FaultyPublisher(Gated[EventPublisher]):
    """The completion-event bus as one actor publishes to it, through its gate: a crash before the publish (the
    outcome stays in the outbox) or after it (published, not cleared: published again), or a throttled PutEvents
    (refused; the drain publishes it later)."""

    def publish(self, events: Sequence[OutcomeEvent]) -> None:
        with self.gate.call("events.publish", [e.event_id for e in events]):
            self.inner.publish(events)


class FaultyTenantBudgets(Gated[TenantBudgetStore]):
    """The tenants' dispatch-budget calendars as one actor books them, through its gate (a pause between the load
    and the conditional save lets another actor book first: the save is refused and the admission reads again)."""

    def load(self, tenant: str) -> BudgetCalendar | None:
        self.gate.before("budgets.load", tenant)
        calendar = self.inner.load(tenant)
        self.gate.result("budgets.load", calendar and f"v{calendar.version} {sorted(calendar.booked.items())}")
        return calendar

    def save(self, tenant: str, calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
        with self.gate.call("budgets.save", tenant, f"v{calendar.version}", expected):
            saved = self.inner.save(tenant, calendar, expected, expires)
            self.gate.result("budgets.save", saved)
        return saved


class SkewedClock:
    """One actor's view of time: the simulation's true clock plus the actor's own offset (which may jump)."""

    def __init__(self, true_clock: _TrueClock) -> None:
        self.true_clock = true_clock
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return self.true_clock.now() + self.offset


class _TrueClock(Protocol):
    def now(self) -> datetime: ...


class FaultyBackfills(Gated[BackfillStore]):
    """The backfill store as one actor uses it, through its gate: the API's create, the sweeper's waves (a crash
    between a wave's send and its cursor's conditional advance sends the wave again)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, backfill: Backfill) -> None:
        with self.gate.call("backfills.create", backfill.backfill_id):
            self.inner.create(backfill)

    def running(self, limit: int) -> list[Backfill]:
        self.gate.before("backfills.running")
        found = self.inner.running(limit)
        self.gate.result("backfills.running", [f"{b.backfill_id} cursor {b.cursor}" for b in found])
        return found

    def advance(self, backfill: Backfill, cursor: datetime, dispatched: int, done: bool, now: datetime) -> bool:
        with self.gate.call("backfills.advance", backfill.backfill_id, cursor, dispatched, done):
            advanced = self.inner.advance(backfill, cursor, dispatched, done, now)
            self.gate.result("backfills.advance", advanced)
        return advanced

    def finish(self, backfill: Backfill, state: BackfillState, now: datetime) -> Backfill | None:
        with self.gate.call("backfills.finish", backfill.backfill_id, state.value):
            return self.inner.finish(backfill, state, now)
