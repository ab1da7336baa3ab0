"""The faults the simulator injects, and the ports that inject them.

Every actor (API, sweeper, worker) talks to the shared in-memory stores through its own set of proxies. Each
port call passes a `Gate` twice: before delegating (crash, throttling error, or a pause while another actor
runs a step: the conditional-write races) and after it (crash: the write happened, the caller never learns).
A `Crash` is a `BaseException`, as a killed process is: the core's `except Exception` blocks, right for real
errors, must not be able to swallow it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any, Protocol

from scheduler.core.labels import ALL_JOBS, JobQuery
from scheduler.core.model import BackfillState, Job, JobState, RunState
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


class Crash(BaseException):
    """The actor's process dies at this instruction; whatever it held is abandoned."""


class Throttled(Exception):
    """A transient error from a port, like DynamoDB's ProvisionedThroughputExceeded or an SQS 5xx."""


@dataclass(frozen=True)
class FaultProfile:
    """How often each fault strikes in one run. Rates are per port call, per message or per target call."""

    crash: float = 0.0  #: per port call, half before delegating and half after
    throttle: float = 0.0  #: per port call: a transient error before delegating (a partial send for the queue)
    preempt: float = 0.0  #: per port call: the actor pauses while another actor runs a whole step
    duplicate: float = 0.0  #: per sent message: SQS delivers it twice
    late_copy: float = 0.0  #: per sent or acknowledged message: a copy arrives minutes later
    target_retryable: float = 0.0  #: the target answers 503/429 (not applied)
    target_permanent: float = 0.0  #: the target answers 400 (not applied)
    target_ambiguous: float = 0.0  #: the call times out, the effect applied or not (half each)
    target_pause: float = 0.0  #: the worker freezes inside the target past its lease; others take over
    outage: float = 0.0  #: probability that the run contains an outage (the clock jumps up to an hour)
    skew_seconds: float = 0.0  #: each actor's clock is off by up to this much, and jumps within it
    #: The target takes a while (well inside the lease) and other workers run meanwhile: one tenant's calls overlap.
    target_slow: float = 0.0

    @classmethod
    def calm(cls) -> FaultProfile:
        """No faults at all (the simulator still interleaves actors and reorders messages)."""
        return cls()

    @classmethod
    def draw(cls, rng: random.Random) -> FaultProfile:
        """One seed's mix: sometimes calm, usually a few faults at modest rates, sometimes a storm."""
        mood = rng.random()
        if mood < 0.08:
            return cls()
        scale = 1.0 if mood < 0.85 else 2.5

        def pick(high: float) -> float:
            return rng.choice((0.0, high * 0.3, high)) * scale

        return cls(
            crash=pick(0.01),
            throttle=pick(0.01),
            preempt=pick(0.03),
            duplicate=pick(0.1),
            late_copy=pick(0.04),
            target_retryable=pick(0.1),
            target_permanent=pick(0.02),
            target_ambiguous=pick(0.06),
            target_pause=pick(0.08),
            outage=rng.choice((0.0, 0.0, 0.35)),
            skew_seconds=rng.choice((0.0, 2.0, 5.0)),
            target_slow=pick(0.15),
        )

    def describe(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name):g}" for f in fields(self) if getattr(self, f.name)]
        return ", ".join(parts) if parts else "calm"


@dataclass(frozen=True)
class Exposure:
    """How much of the fault model and the workload a run uses. `Exposure()` is all of it. `KNOWN_BUGS_AVOIDED`
    stays out of the windows where the core bugs this simulator found strike (see the package README), so that
    everything else remains a regression guard while they are open."""

    #: Crashes, throttling and preemption between a chain advance (`JobStore.advance`) and the send of what it
    #: planned (bugs A and D: a re-run after a crash there is refused; a stale next-timer put lands late).
    chain_window_faults: bool = True
    #: The dispatcher's seal margin (bug C: the default 30 s does not cover the rest of a sealed bucket minute).
    seal_margin: timedelta = timedelta(seconds=30)


KNOWN_BUGS_AVOIDED = Exposure(chain_window_faults=False, seal_margin=timedelta(seconds=90))


class GateHost(Protocol):
    """What a gate needs from the simulation (kept abstract to avoid an import cycle)."""

    rng: random.Random
    profile: FaultProfile
    exposure: Exposure
    faults_on: bool
    trace_calls: bool

    def trace(self, actor: str, text: str) -> None: ...

    def preempt(self, actor: str) -> None: ...

    def job_read(self, actor: str) -> None: ...

    def advanced(
        self, timer: Timer, dispatched_for: datetime, skipped: int, result: AdvanceResult, now: datetime
    ) -> None: ...

    def ledger_claimed(self, key: str, epoch: int) -> None: ...

    def ledger_write(self, op: str, key: str, epoch: int, owner: str | None) -> None: ...

    def queue_send(self, actor: str, dispatches: Sequence[Dispatch], now: datetime) -> None: ...

    def timer_stored(self, timer: Timer) -> None: ...


class Gate:
    """The fault point in front of every port call of one actor."""

    def __init__(self, host: GateHost, actor: str) -> None:
        self.host = host
        self.actor = actor
        #: Between a chain advance and its send; faults there are held back unless the exposure allows them.
        self.in_chain_window = False

    def _quiet(self) -> bool:
        host = self.host
        return not host.faults_on or (self.in_chain_window and not host.exposure.chain_window_faults)

    def before(self, op: str, *detail: object) -> None:
        host = self.host
        if host.trace_calls:
            host.trace(self.actor, f"{op}({', '.join(_brief(d) for d in detail)})" if detail else op)
        if self._quiet():
            return
        profile = host.profile
        roll = host.rng.random()
        if roll < profile.crash / 2:
            raise Crash(f"before {op}")
        roll -= profile.crash / 2
        if roll < profile.throttle:
            raise Throttled(f"{op} throttled")
        roll -= profile.throttle
        if roll < profile.preempt:
            host.preempt(self.actor)

    def result(self, op: str, value: object) -> None:
        """Trace what a call returned (only when tracing port calls)."""
        if self.host.trace_calls:
            self.host.trace(self.actor, f"  -> {_brief(value)}")

    def after(self, op: str) -> None:
        host = self.host
        if not self._quiet() and host.rng.random() < host.profile.crash / 2:
            raise Crash(f"after {op}")

    def throttled_part(self, op: str, total: int) -> int | None:
        """For batch writes: how many items go through before a throttling error (None: no error)."""
        host = self.host
        if not self._quiet() and total and host.rng.random() < host.profile.throttle:
            return host.rng.randrange(total)
        return None


def _brief(value: object) -> str:
    """Short forms of the values port calls carry, for traces."""
    if isinstance(value, Timer):
        return f"timer {value.key} v{value.version} fire {value.fire_at:%H:%M:%S.%f}"[:-3] + f" {value.kind}"
    if isinstance(value, Dispatch):
        return f"{value.key} v{value.version}"
    if isinstance(value, BucketId):
        return f"bucket {value.minute:%H:%M}/{value.shard}"
    if isinstance(value, BucketClaim):
        return f"claim {_brief(value.bucket)} epoch {value.epoch} cursor {value.cursor}"
    if isinstance(value, Job):
        last = value.last_dispatched_for
        return (
            f"job {value.job_id} v{value.version} {value.state.value} next {value.next_run_at} "
            f"last {last and f'{last:%H:%M:%S}'}"
        )
    if isinstance(value, Execution):
        return f"{value.key} {value.state.value} epoch {value.epoch} attempts {value.attempts}"
    if isinstance(value, datetime):
        return f"{value:%H:%M:%S.%f}"[:-3]
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_brief(v) for v in value) + "]"
    return str(value)


class FaultyJobStore:
    """JobStore (and JobReader) of one actor, through its gate."""

    def __init__(self, inner: JobStore, gate: Gate, clock: _TrueClock) -> None:
        self.inner = inner
        self.gate = gate
        self.clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(
        self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool, quota: int
    ) -> None:
        self.gate.before("jobs.create", job, timer, late)
        self.inner.create(job, timer, idempotency, late, quota)
        self.gate.after("jobs.create")

    def create_all(self, new: Sequence[NewJob], quota: int) -> int:
        self.gate.before("jobs.create_all", [item.job for item in new])
        stored = self.inner.create_all(new, quota)
        self.gate.result("jobs.create_all", stored)
        self.gate.after("jobs.create_all")
        return stored

    def get(self, job_id: str) -> Job | None:
        self.gate.before("jobs.get", job_id)
        job = self.inner.get(job_id)
        self.gate.result("jobs.get", job)
        self.gate.host.job_read(self.gate.actor)
        self.gate.after("jobs.get")
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
        self.gate.before("jobs.replace", job, timer, late)
        self.inner.replace(job, previous, timer, late)
        self.gate.after("jobs.replace")

    def advance(self, timer: Timer, step: Advance) -> AdvanceResult:
        self.gate.before("jobs.advance", timer, step.next_run_at, step.dispatched_for, step.skipped)
        result = self.inner.advance(timer, step)
        self.gate.result("jobs.advance", result)
        self.gate.host.advanced(timer, step.dispatched_for, step.skipped, result, self.clock.now())
        self.gate.in_chain_window = True
        self.gate.after("jobs.advance")
        return result


class FaultyTimerStore:
    """TimerStore of one actor, through its gate."""

    def __init__(self, inner: TimerStore, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate
        self.shard_count = inner.shard_count

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bucket_of(self, timer: Timer) -> BucketId:
        return self.inner.bucket_of(timer)

    def put_timer(self, timer: Timer) -> None:
        self.gate.before("timers.put_timer", timer)
        self.inner.put_timer(timer)
        self.gate.host.timer_stored(timer)
        self.gate.after("timers.put_timer")

    def claim_bucket(
        self, bucket: BucketId, owner: str, now: datetime, lease_until: datetime
    ) -> BucketClaim | BucketBusy:
        self.gate.before("timers.claim_bucket", bucket, owner, lease_until)
        claim = self.inner.claim_bucket(bucket, owner, now, lease_until)
        self.gate.result("timers.claim_bucket", claim)
        self.gate.after("timers.claim_bucket")
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
        self.gate.before("timers.checkpoint", claim, cursor)
        self.inner.checkpoint(claim, cursor, lease_until, releases)
        self.gate.after("timers.checkpoint")

    def finish_bucket(
        self, claim: BucketClaim, cursor: str, expire_after: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        self.gate.before("timers.finish_bucket", claim, cursor)
        self.inner.finish_bucket(claim, cursor, expire_after, releases)
        self.gate.after("timers.finish_bucket")

    def release(self, claim: BucketClaim) -> None:
        self.gate.before("timers.release", claim)
        self.inner.release(claim)
        self.gate.after("timers.release")

    def complete_bucket(self, claim: BucketClaim, expire_after: datetime) -> None:
        self.gate.before("timers.complete_bucket", claim)
        self.inner.complete_bucket(claim, expire_after)
        self.gate.after("timers.complete_bucket")

    def watermark(self) -> datetime | None:
        self.gate.before("timers.watermark")
        return self.inner.watermark()

    def init_watermark(self, minute: datetime) -> datetime:
        self.gate.before("timers.init_watermark")
        result = self.inner.init_watermark(minute)
        self.gate.after("timers.init_watermark")
        return result

    def advance_watermark(self, minute: datetime) -> None:
        self.gate.before("timers.advance_watermark", minute)
        self.inner.advance_watermark(minute)
        self.gate.after("timers.advance_watermark")

    def put_late(self, timer: Timer) -> None:
        self.gate.before("timers.put_late", timer)
        self.inner.put_late(timer)
        self.gate.after("timers.put_late")

    def late_timers(self, limit: int) -> list[Timer]:
        self.gate.before("timers.late_timers")
        return self.inner.late_timers(limit)

    def remove_late(self, timer: Timer) -> None:
        self.gate.before("timers.remove_late", timer)
        self.inner.remove_late(timer)
        self.gate.after("timers.remove_late")


class FaultyLedger:
    """Ledger of one actor, through its gate. It also reports every accepted write to the host, which keeps
    the highest epoch claimed per occurrence: a write accepted from a lower epoch breaks invariant 3.
    Methods it does not wrap go straight through."""

    def __init__(self, inner: Ledger, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def claim(self, dispatch: Dispatch, attempt: Attempt) -> Execution:
        self.gate.before("ledger.claim", dispatch, attempt.owner, attempt.lease_until)
        execution = self.inner.claim(dispatch, attempt)
        self.gate.result("ledger.claim", execution)
        self.gate.host.ledger_claimed(execution.key, execution.epoch)
        if attempt.on_copy:
            # A claim on the message's copy of the job is where its worker learns that the job did not change (no
            # change voided the copy before it): for invariant 4 it checks the job here, as a read would.
            self.gate.host.job_read(self.gate.actor)
        self.gate.after("ledger.claim")
        return execution

    def void_copies(self, key: str, now: datetime) -> None:
        self.gate.before("ledger.void_copies", key)
        self.inner.void_copies(key, now)
        self.gate.after("ledger.void_copies")

    def get(self, key: str) -> Execution | None:
        self.gate.before("ledger.get", key)
        return self.inner.get(key)

    def heartbeat(self, key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        self.gate.before("ledger.heartbeat", key, owner, epoch)
        self.inner.heartbeat(key, owner, epoch, lease_until)
        self.gate.host.ledger_write("heartbeat", key, epoch, owner)
        self.gate.after("ledger.heartbeat")

    def finish(self, key: str, owner: str, epoch: int, now: datetime, end: AttemptEnd) -> Execution:
        self.gate.before("ledger.finish", key, owner, epoch, end.state.value)
        recorded = self.inner.finish(key, owner, epoch, now, end)
        self.gate.host.ledger_write(f"finish {end.state.value}", key, epoch, owner)
        self.gate.after("ledger.finish")
        return recorded

    def record_unclaimed(self, dispatch: Dispatch, state: RunState, now: datetime, reason: str) -> bool:
        self.gate.before("ledger.record_unclaimed", dispatch, state.value, reason)
        created = self.inner.record_unclaimed(dispatch, state, now, reason)
        self.gate.after("ledger.record_unclaimed")
        return created

    def expire_to(
        self, key: str, epoch: int, state: RunState, now: datetime, reason: str, *, announce: bool = True
    ) -> bool:
        self.gate.before("ledger.expire_to", key, epoch, state.value)
        done = self.inner.expire_to(key, epoch, state, now, reason, announce=announce)
        if done:
            self.gate.host.ledger_write(f"expire_to {state.value}", key, epoch, None)
        self.gate.after("ledger.expire_to")
        return done

    def mark_dead_lettered(self, key: str) -> None:
        self.gate.before("ledger.mark_dead_lettered")
        self.inner.mark_dead_lettered(key)
        self.gate.after("ledger.mark_dead_lettered")

    def revive(self, key: str, now: datetime, note: str) -> bool:
        self.gate.before("ledger.revive")
        revived = self.inner.revive(key, now, note)
        self.gate.after("ledger.revive")
        return revived

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
        self.gate.before("ledger.clear_outbox", key, len(published))
        cleared = self.inner.clear_outbox(key, published)
        self.gate.result("ledger.clear_outbox", cleared)
        self.gate.after("ledger.clear_outbox")
        return cleared

    def resolve(self, key: str, state: RunState, now: datetime, note: str) -> Execution:
        self.gate.before("ledger.resolve")
        execution = self.inner.resolve(key, state, now, note)
        self.gate.after("ledger.resolve")
        return execution


class FaultyQueue:
    """The ready queue as one actor sends to it. A throttled send may deliver part of the batch first (as a
    SendMessageBatch with some failed entries does); the duplicates and late copies are added by the host."""

    def __init__(self, inner: ReadyQueue, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        self.gate.before("queue.send", list(dispatches))
        part = self.gate.throttled_part("queue.send", len(dispatches))
        if part is not None:
            self.gate.host.queue_send(self.gate.actor, dispatches[:part], now)
            raise Throttled(f"queue.send: {len(dispatches) - part} of {len(dispatches)} messages not accepted")
        self.gate.host.queue_send(self.gate.actor, dispatches, now)
        self.gate.in_chain_window = False
        self.gate.after("queue.send")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def dead_letter(self, dispatch: Dispatch, execution: Execution) -> None:
        self.gate.before("queue.dead_letter")
        self.inner.dead_letter(dispatch, execution)
        self.gate.after("queue.dead_letter")


class FaultyTenantSlots:
    """A worker's execution slots (per-tenant execution budgets), through its gate."""

    def __init__(self, inner: TenantSlots, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def acquire(self, tenant: str, limit: int, holder: str, now: datetime, lease_until: datetime) -> int | None:
        self.gate.before("slots.acquire", tenant)
        slot = self.inner.acquire(tenant, limit, holder, now, lease_until)
        self.gate.result("slots.acquire", slot)
        self.gate.after("slots.acquire")
        return slot

    def extend(self, tenant: str, slot: int, holder: str, lease_until: datetime) -> bool:
        self.gate.before("slots.extend", tenant)
        extended = self.inner.extend(tenant, slot, holder, lease_until)
        self.gate.after("slots.extend")
        return extended

    def release(self, tenant: str, slot: int, holder: str) -> None:
        self.gate.before("slots.release", tenant)
        self.inner.release(tenant, slot, holder)
        self.gate.after("slots.release")


class FaultyPublisher:
    """The completion-event bus as one actor publishes to it, through its gate: a crash before the publish (the
    outcome stays in the outbox) or after it (published, not cleared: published again), or a throttled PutEvents
    (refused; the drain publishes it later)."""

    def __init__(self, inner: EventPublisher, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def publish(self, events: Sequence[OutcomeEvent]) -> None:
        self.gate.before("events.publish", [e.event_id for e in events])
        self.inner.publish(events)
        self.gate.after("events.publish")


class FaultyTenantBudgets:
    """The tenants' dispatch-budget calendars as one actor books them, through its gate (a pause between the load
    and the conditional save lets another actor book first: the save is refused and the admission reads again)."""

    def __init__(self, inner: TenantBudgetStore, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def load(self, tenant: str) -> BudgetCalendar | None:
        self.gate.before("budgets.load", tenant)
        calendar = self.inner.load(tenant)
        self.gate.result("budgets.load", calendar and f"v{calendar.version} {sorted(calendar.slots.items())}")
        return calendar

    def save(self, tenant: str, calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
        self.gate.before("budgets.save", tenant, f"v{calendar.version}", expected)
        saved = self.inner.save(tenant, calendar, expected, expires)
        self.gate.result("budgets.save", saved)
        self.gate.after("budgets.save")
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


class FaultyBackfills:
    """The backfill store as one actor uses it, through its gate: the API's create, the sweeper's waves (a crash
    between a wave's send and its cursor's conditional advance sends the wave again)."""

    def __init__(self, inner: BackfillStore, gate: Gate) -> None:
        self.inner = inner
        self.gate = gate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def create(self, backfill: Backfill) -> None:
        self.gate.before("backfills.create", backfill.backfill_id)
        self.inner.create(backfill)
        self.gate.after("backfills.create")

    def running(self, limit: int) -> list[Backfill]:
        self.gate.before("backfills.running")
        found = self.inner.running(limit)
        self.gate.result("backfills.running", [f"{b.backfill_id} cursor {b.cursor}" for b in found])
        return found

    def advance(self, backfill: Backfill, cursor: datetime, dispatched: int, done: bool, now: datetime) -> bool:
        self.gate.before("backfills.advance", backfill.backfill_id, cursor, dispatched, done)
        advanced = self.inner.advance(backfill, cursor, dispatched, done, now)
        self.gate.result("backfills.advance", advanced)
        self.gate.after("backfills.advance")
        return advanced

    def finish(self, backfill: Backfill, state: BackfillState, now: datetime) -> Backfill | None:
        self.gate.before("backfills.finish", backfill.backfill_id, state.value)
        finished = self.inner.finish(backfill, state, now)
        self.gate.after("backfills.finish")
        return finished
