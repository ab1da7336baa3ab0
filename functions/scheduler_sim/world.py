"""The simulated world: the shared in-memory stores, the actors that run the real protocol code against them
through fault-injecting ports, and the seeded scheduler that interleaves the actors as the clock advances.

One run, step by step:
1. the active phase: the workload's API calls, sweeps (about once a minute per sweeper) and worker receives,
   in an order the seed chooses, with the seed's faults;
2. quiescence: faults stop and clocks agree, the clock moves past every lease and visibility timeout, the
   client's pending retries go through, sweepers and workers run undisturbed for a while, then the workers
   drain the queue;
3. the checker (`scheduler_sim.checker`) judges the end state and everything recorded on the way.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from pydantic import ValidationError

from scheduler.adapters.memory import (
    FakeClock,
    MemoryBatchVisibility,
    MemoryJobStore,
    MemoryLedger,
    MemoryMessage,
    MemoryQueue,
    MemoryTenantSlots,
    MemoryTimerStore,
    QueuedMessage,
    RecordingMetrics,
)
from scheduler.core.concurrency import ConcurrencyConfig, ConcurrencyGate
from scheduler.core.dispatch import DispatchConfig, Dispatcher
from scheduler.core.errors import SchedulerError
from scheduler.core.execute import ExecuteConfig, Executor
from scheduler.core.jobs import JobService
from scheduler.core.model import Job, JobSpec
from scheduler.core.ports import AdvanceResult, Dispatch, Timer
from scheduler.core.recovery import HeldBatch, HoldConfig
from scheduler.core.sweep import SweepConfig, Sweeper
from scheduler.core.timefmt import rfc3339
from scheduler_sim.checker import Violation, check, invalid_request
from scheduler_sim.determinism import deterministic_core
from scheduler_sim.faults import (
    Crash,
    Exposure,
    FaultProfile,
    FaultyJobStore,
    FaultyLedger,
    FaultyQueue,
    FaultyTenantSlots,
    FaultyTimerStore,
    Gate,
    SkewedClock,
    Throttled,
)
from scheduler_sim.sink import SinkTarget
from scheduler_sim.variants import Variant
from scheduler_sim.workload import (
    TENANT,
    CallKind,
    InvalidCall,
    PlannedCall,
    Workload,
    draw_workload,
)

Event = tuple[datetime, str, str]


@dataclass(frozen=True)
class SimConfig:
    """The system's settings in the simulation (production defaults where they matter to the protocol)."""

    lookahead: timedelta = timedelta(seconds=300)
    misfire_grace: timedelta = timedelta(seconds=60)
    catchup_window: timedelta = timedelta(days=1)
    bucket_lease: timedelta = timedelta(seconds=120)
    lease: timedelta = timedelta(seconds=60)
    #: >= 6x the worker timeout, as docs/design.md §2 asks.
    visibility_timeout: float = 360.0
    sweep_every: float = 60.0
    quiet: timedelta = timedelta(minutes=10)
    max_steps: int = 20_000


@dataclass
class Change:
    """An acknowledged API call that returned the job: first attempted at `started`, acknowledged at `acked`."""

    kind: CallKind
    started: datetime
    acked: datetime
    job: Job


@dataclass
class JobRecord:
    """What the client knows about one workload job: the acknowledged changes, in order."""

    index: int
    description: str
    job_id: str | None = None
    changes: list[Change] = field(default_factory=list)
    cancel_acked: datetime | None = None
    triggers: list[tuple[str, datetime]] = field(default_factory=list)
    #: First attempt of a call whose outcome the client never learnt (it failed, and its retry was refused
    #: because the first attempt had taken effect and the job moved on): its eras are not judged from here.
    uncertain_from: datetime | None = None


@dataclass(frozen=True)
class VersionChange:
    """An acknowledged change of version and what it sent: `resent` messages of older versions (allowed only when
    the chain's last plan was open - its next timer not stored - at some point during the call)."""

    job_index: int
    kind: str
    version: int
    resent: int
    sent: int
    plan_open: bool


@dataclass(frozen=True)
class Misfire:
    """A misfire decision the core made and wrote: a chain timer found late, `skipped` occurrences skipped."""

    version: int
    policy: str
    scheduled_for: datetime
    fire_at: datetime
    dispatched_for: datetime
    skipped: int
    now: datetime  # the deciding actor's clock


@dataclass(frozen=True)
class InvalidOutcome:
    name: str
    outcome: str  # "rejected: <error>", "accepted" or "error: <unexpected exception>"
    changed: bool
    must_reject: bool


class SimQueue(MemoryQueue):
    """`MemoryQueue` with SQS standard's looser habits: visible messages come back in a seeded random order
    (reordering), delays count from the queue's own clock, and copies can be injected to arrive later
    (duplicates and late redeliveries)."""

    def __init__(self, clock: FakeClock, visibility_timeout: float, rng: random.Random) -> None:
        super().__init__(clock=clock, visibility_timeout=visibility_timeout)
        self.rng = rng
        #: When each message was received (taken from the queue), for the checker's restart-time invariant.
        self.receives: dict[str, list[datetime]] = {}

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        arrival = self.clock.now()
        with self.lock:
            for dispatch in dispatches:
                delay = max(0, min(900, math.floor((dispatch.fire_at - now).total_seconds())))
                self._put(dispatch, arrival + timedelta(seconds=delay))

    def inject(self, dispatch: Dispatch, visible_at: datetime) -> str:
        """A copy of a message, delivered (again) from `visible_at`."""
        with self.lock:
            return self._put(dispatch, visible_at)

    def _put(self, dispatch: Dispatch, visible_at: datetime) -> str:
        self.sent += 1
        message_id = f"m{self.sent}"
        self.messages[message_id] = QueuedMessage(message_id, dispatch, visible_at)
        return message_id

    def receive(self, max_messages: int = 10) -> list[QueuedMessage]:
        now = self.clock.now()
        with self.lock:
            visible = [m for m in self.messages.values() if m.visible_at <= now]
            self.rng.shuffle(visible)
            out: list[QueuedMessage] = []
            for message in visible:
                if len(out) == max_messages:
                    break
                self.receives.setdefault(message.message_id, []).append(now)
                message.receive_count += 1
                if message.receive_count > self.max_receive_count:
                    del self.messages[message.message_id]
                    self.dead.append((message.dispatch, None))
                    continue
                message.visible_at = now + timedelta(seconds=self.visibility_timeout)
                message.receipt = f"{message.message_id}#{message.receive_count}"
                out.append(replace(message))
            return out

    def earliest_visible(self) -> datetime | None:
        return min((m.visible_at for m in self.messages.values()), default=None)

    def has_visible(self, now: datetime) -> bool:
        return any(m.visible_at <= now for m in self.messages.values())


class Actor:
    """One process of the system: its own clock view and its own fault-injecting ports."""

    def __init__(self, sim: Simulation, name: str) -> None:
        self.sim = sim
        self.name = name
        self.clock = SkewedClock(sim.clock)
        self.gate = Gate(sim, name)
        self.jobs = FaultyJobStore(sim.jobs, self.gate, self.clock)
        self.timers = FaultyTimerStore(sim.timers, self.gate)
        self.ledger = FaultyLedger(sim.ledger, self.gate)
        self.queue = FaultyQueue(sim.queue, self.gate)
        self.next_at = sim.clock.now()
        self.job_read_at: datetime | None = None

    def ready(self, now: datetime) -> bool:
        """Whether the actor has a step to take now (its own schedule)."""
        return self.next_at <= now

    def can_interject(self, now: datetime) -> bool:
        """Whether running a step now, out of schedule, does something (for races and pauses)."""
        return True

    def step(self) -> None:
        raise NotImplementedError


class SweeperActor(Actor):
    """A sweeper Lambda, invoked about once a minute; each invocation has its own owner id."""

    def __init__(self, sim: Simulation, name: str) -> None:
        super().__init__(sim, name)
        dispatcher = Dispatcher(
            self.jobs, self.timers, self.queue, self.clock, sim.dispatch_config, sim.metrics, sleep=sim.sleep
        )
        self.sweeper = Sweeper(self.timers, dispatcher, self.clock, sim.sweep_config, sim.metrics, name)
        self.invocations = 0
        self.next_at = sim.clock.now() + timedelta(milliseconds=sim.rng.randint(0, 60_000))

    def step(self) -> None:
        sim = self.sim
        self.invocations += 1
        self.sweeper.owner = f"{self.name}#{self.invocations}"
        if self.next_at <= sim.clock.now():
            jitter = sim.rng.randint(-3000, 3000)
            self.next_at = sim.clock.now() + timedelta(milliseconds=sim.config.sweep_every * 1000 + jitter)
        report = self.sweeper.sweep(self.clock.now() + timedelta(seconds=60))
        sim.trace(
            self.name,
            f"sweep #{self.invocations}: dispatched {report.dispatched} (late lane {report.late_drained}), "
            f"buckets done {report.buckets_done}, busy {report.buckets_busy}, "
            f"watermark {report.watermark and rfc3339(report.watermark)}",
        )


class SimBatchVisibility(MemoryBatchVisibility):
    """The batch's visibility change through the worker's gate (a crash right before or after it, or a throttled
    request). `applied`: the hold reached the queue. A broken variant may skip it (the visibility timeout stays)."""

    def __init__(self, actor: WorkerActor, messages: Sequence[QueuedMessage]) -> None:
        super().__init__(actor.sim.queue, messages)
        self.actor = actor
        self.applied: datetime | None = None

    def hold(self, message_ids: Sequence[str], seconds: int) -> list[str]:
        sim = self.actor.sim
        self.actor.gate.before("queue.hold", len(message_ids))
        variant = sim.variant
        refused = super().hold(message_ids, seconds) if variant is None or variant.batch_hold else []
        self.applied = self.applied or sim.clock.now()
        sim.trace(self.actor.name, f"held {', '.join(message_ids)} for {seconds}s")
        self.actor.gate.after("queue.hold")
        return refused


@dataclass(frozen=True)
class Abandoned:
    """Messages a worker held, with their hold applied, when its step ended without settling them (a crash, or
    a failed invocation): each must be received again within the hold time."""

    at: datetime
    actor: str
    message_ids: tuple[str, ...]
    keys: tuple[str, ...]
    #: Per message: whether the dead worker had claimed its occurrence (its own heartbeat may have extended the
    #: message to the lease; the next worker waits for that lease anyway).
    started: tuple[bool, ...] = ()


class WorkerActor(Actor):
    """A worker Lambda fed by the event source mapping: receives a small batch, runs each message through the
    real `Executor`, deletes what it acknowledges and changes the visibility of what it keeps."""

    def __init__(self, sim: Simulation, name: str) -> None:
        super().__init__(sim, name)
        self.executor = Executor(
            self.jobs,
            self.ledger,
            self.queue,
            {"handler": sim.sink},
            self.clock,
            sim.execute_config,
            sim.metrics,
            name,
            sleep=sim.sleep,
            gate=ConcurrencyGate(FaultyTenantSlots(sim.tenant_slots, self.gate), sim.concurrency, sim.metrics),
        )
        self.batch = sim.rng.randint(1, 3)
        #: The batch this worker holds while it works through it (None between steps).
        self.held: HeldBatch | None = None
        self.holding: SimBatchVisibility | None = None

    def ready(self, now: datetime) -> bool:
        return self.next_at <= now and self.sim.queue.has_visible(now)

    def can_interject(self, now: datetime) -> bool:
        return self.sim.queue.has_visible(now)

    def step(self) -> None:
        sim = self.sim
        self.next_at = sim.clock.now() + timedelta(milliseconds=sim.rng.randint(50, 1500))
        self.gate.before("queue.receive")
        messages = sim.queue.receive(self.batch)
        self.gate.after("queue.receive")
        if not messages:
            return
        # Bounded recovery: the batch is held for the hold time (one visibility change for the batch; no renewal:
        # simulated steps take no real time). A crash from here on abandons what `held` still holds.
        visibility = SimBatchVisibility(self, messages)
        self.held = HeldBatch(visibility, {m.message_id: m.dispatch.key for m in messages}, sim.hold_config,
                              sim.metrics)  # fmt: skip
        self.holding = visibility
        with self.held:
            for message in messages:
                self._handle(message)
        self.held = self.holding = None

    def _handle(self, message: QueuedMessage) -> None:
        sim = self.sim
        dispatch = message.dispatch
        if sim.variant is not None and sim.variant.rewrite is not None:
            dispatch = sim.variant.rewrite(dispatch, sim.rng)
        sim.trace(self.name, f"received {message.message_id} {dispatch.key} (receive #{message.receive_count})")
        try:
            outcome = self.executor.execute(dispatch, MemoryMessage(sim.queue, message))
        except Throttled as exc:
            # The record fails; SQS shows the message again when its visibility timeout ends.
            sim.trace(self.name, f"{message.message_id}: {exc}; left to time out")
            return
        if outcome.ack:
            if self.held is not None:
                self.held.release(message.message_id)  # deleted now (the event source mapping: after the batch)
            self.gate.before("queue.delete")
            sim.queue.delete(message)
            self.gate.after("queue.delete")
            sim.trace(self.name, f"{message.message_id} acknowledged: {outcome.reason}")
            if sim.faults_on and sim.rng.random() < sim.profile.late_copy:
                later = sim.clock.now() + timedelta(seconds=sim.rng.randint(30, 900))
                copy_id = sim.queue.inject(message.dispatch, later)
                sim.trace(self.name, f"FAULT {message.message_id} redelivered as {copy_id} at {rfc3339(later)}")
        else:
            if self.held is not None:
                self.held.release(message.message_id)
            self.gate.before("queue.change_visibility")
            sim.queue.change_visibility(message, outcome.hide_seconds)
            self.gate.after("queue.change_visibility")
            sim.trace(self.name, f"{message.message_id} kept {outcome.hide_seconds}s: {outcome.reason}")


@dataclass
class _Pending:
    call: PlannedCall | InvalidCall
    due: datetime
    attempts: int = 0
    started: datetime | None = None


class ApiActor(Actor):
    """The API Lambda and its client in one: it makes the workload's calls through the real `JobService`, and
    retries a call whose outcome it could not learn (a crash or a 5xx), as a client does. Creates carry an
    Idempotency-Key, so a retried create returns the job the first attempt made. Triggers are not retried."""

    def __init__(self, sim: Simulation, name: str) -> None:
        super().__init__(sim, name)
        dispatcher = Dispatcher(self.jobs, self.timers, self.queue, self.clock, sim.dispatch_config, sim.metrics)
        self.service = JobService(self.jobs, sim.ledger, dispatcher, self.clock, max_active_jobs=100)
        # Invalid requests run on the bare stores, with no faults and nothing interleaved, so that any change
        # to stored state is theirs alone.
        plain = Dispatcher(sim.jobs, sim.timers, sim.queue, self.clock, sim.dispatch_config, sim.metrics)
        self.plain_service = JobService(sim.jobs, sim.ledger, plain, self.clock, max_active_jobs=100)
        self.queues: dict[int, deque[_Pending]] = {}
        for call in sim.workload.calls:
            self.queues.setdefault(call.job, deque()).append(_Pending(call, call.at))
        for invalid in sim.workload.invalid:
            self.queues.setdefault(-1, deque()).append(_Pending(invalid, invalid.at))

    def head(self) -> _Pending | None:
        heads = [q[0] for q in self.queues.values() if q]
        return min(heads, key=lambda p: (p.due, p.call.seq)) if heads else None

    def ready(self, now: datetime) -> bool:
        head = self.head()
        return head is not None and head.due <= now

    def can_interject(self, now: datetime) -> bool:
        head = self.head()
        return head is not None and head.due <= now + timedelta(seconds=30)

    def step(self) -> None:
        pending = self.head()
        if pending is None:
            return
        sim = self.sim
        call = pending.call
        queue = self.queues[call.job if isinstance(call, PlannedCall) else -1]
        if isinstance(call, InvalidCall):
            queue.popleft()
            sim.invalid_request(call, self.plain_service)
            return
        pending.attempts += 1
        if pending.started is None:
            pending.started = sim.clock.now()
        try:
            self._perform(call, pending.started)
        except (Crash, Throttled) as exc:
            if call.kind == "trigger":
                sim.trace(self.name, f"{call.kind} job-{call.job}: {type(exc).__name__} {exc}; outcome unknown")
            else:
                pending.due = sim.clock.now() + timedelta(milliseconds=sim.rng.randint(1000, 20_000))
                sim.trace(self.name, f"{call.kind} job-{call.job}: {type(exc).__name__} {exc}; will retry")
                return
        except (SchedulerError, ValidationError) as exc:
            sim.trace(self.name, f"{call.kind} job-{call.job} rejected: {type(exc).__name__}: {_brief(exc)}")
            record = sim.records[call.job]
            if pending.attempts > 1 and record.uncertain_from is None:
                record.uncertain_from = pending.started
                sim.trace(
                    self.name, f"{call.kind} job-{call.job}: outcome unknown (an earlier attempt may have applied)"
                )
        queue.popleft()

    def _perform(self, call: PlannedCall, started: datetime) -> None:
        sim = self.sim
        record = sim.records[call.job]
        service = self.service
        job: Job
        sim.api_sends = []
        watched = record.job_id
        open_before = watched is not None and watched in sim.open_plans
        opened_before = sim.plans_opened.get(watched or "", 0)
        if call.kind == "create":
            assert call.body is not None
            spec = JobSpec.model_validate(call.body)  # the handler's validation, before the service
            job = service.create(TENANT, spec, call.idempotency_key, call.body).job
            record.job_id = job.job_id
        elif record.job_id is None:
            sim.trace(self.name, f"{call.kind} job-{call.job}: skipped, the job was never created")
            return
        elif call.kind == "cancel":
            job = service.cancel(TENANT, record.job_id)
        elif call.kind == "pause":
            job = service.pause(TENANT, record.job_id)
        elif call.kind == "resume":
            job = service.resume(TENANT, record.job_id)
        elif call.kind == "update":
            assert call.body is not None
            job = service.update(TENANT, record.job_id, call.body, None)
        else:
            timer = service.trigger(TENANT, record.job_id)
            record.triggers.append((timer.key, sim.clock.now()))
            sim.trace(self.name, f"trigger job-{call.job} -> {timer.key}")
            return
        acked = sim.clock.now()
        if call.kind != "create" and (not record.changes or record.changes[-1].job.version != job.version):
            resent = sum(1 for d in sim.api_sends if d.version < job.version)
            plan_open = open_before or sim.plans_opened.get(job.job_id, 0) > opened_before
            change = VersionChange(call.job, call.kind, job.version, resent, len(sim.api_sends), plan_open)
            sim.version_changes.append(change)
        record.changes.append(Change(call.kind, started, acked, job))
        if call.kind == "cancel" and record.cancel_acked is None:
            record.cancel_acked = acked
        sim.trace(
            self.name,
            f"{call.kind} job-{call.job} -> {job.job_id} v{job.version} {job.state.value} "
            f"next {job.next_run_at and rfc3339(job.next_run_at)}",
        )


def _brief(exc: Exception) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= 120 else text[:117] + "..."


class Simulation:
    """One seeded run of the real protocol under faults. `run()` returns the events and the checker's verdict."""

    def __init__(
        self,
        seed: int,
        *,
        profile: FaultProfile | None = None,
        variant: Variant | None = None,
        config: SimConfig | None = None,
        exposure: Exposure | None = None,
        workload: Workload | None = None,
        trace_calls: bool = False,
    ) -> None:
        self.seed = seed
        self.exposure = exposure or Exposure()
        self.config = config or SimConfig()
        self.variant = variant
        self.trace_calls = trace_calls
        self.events: list[Event] = []
        self.rng = random.Random(f"punctual-sim/run/{seed}")
        self.ids = random.Random(f"punctual-sim/ids/{seed}")
        self.profile = profile or FaultProfile.draw(random.Random(f"punctual-sim/faults/{seed}"))
        self.workload = workload or draw_workload(random.Random(f"punctual-sim/workload/{seed}"))
        self.clock = FakeClock(self.workload.start)
        cfg = self.config
        shards = self.rng.randint(1, 3)
        self.jobs = variant.jobs() if variant is not None else MemoryJobStore()
        self.timers = variant.timers(shards) if variant is not None else MemoryTimerStore(shards)
        self.jobs.attach(self.timers)
        self.ledger = variant.ledger() if variant is not None else MemoryLedger()
        self.queue = SimQueue(self.clock, cfg.visibility_timeout, self.rng)
        self.sink = SinkTarget(self)
        self.metrics = RecordingMetrics()
        # Every page lands on time here, however small (the deployed threshold is a cost choice; the mechanism's
        # timing and crash-safety are what a run proves).
        self.dispatch_config = DispatchConfig(
            cfg.lookahead,
            cfg.misfire_grace,
            cfg.catchup_window,
            seal_margin=self.exposure.seal_margin,
            landing_min_messages=1,
        )
        self.sweep_config = SweepConfig(
            shard_count=shards,
            lookahead=cfg.lookahead,
            bucket_lease=cfg.bucket_lease,
            dispatch_budget=1000,
            safety=timedelta(seconds=20),
        )
        self.execute_config = ExecuteConfig(lease=cfg.lease, heartbeat_fraction=None, misfire_grace=cfg.misfire_grace)
        self.hold_config = HoldConfig(renew_fraction=None)
        # Per-tenant execution budgets, small enough that workers racing on one tenant hit them.
        self.tenant_slots = variant.slots() if variant is not None else MemoryTenantSlots()
        self.concurrency = ConcurrencyConfig(default=random.Random(f"punctual-sim/limits/{seed}").randint(1, 3))
        self.faults_on = True
        self.stack: list[Actor] = []
        self.records = [JobRecord(i, self.workload.describe(i)) for i in range(self.workload.jobs)]
        self.invalid_outcomes: list[InvalidOutcome] = []
        self.errors: list[str] = []
        # What the checker needs that the end state does not show.
        self.max_epoch: dict[str, int] = {}
        self.stale_writes: list[str] = []
        self.first_send: dict[str, datetime] = {}
        self.sent_dispatch: dict[str, Dispatch] = {}
        #: Per job, the chain's last plan (version, advancing timer's instant) while its next timer is not stored.
        self.open_plans: dict[str, tuple[int, datetime]] = {}
        self.plans_opened: dict[str, int] = {}
        #: What the API sent during the call in progress, and each acknowledged change of version's cost.
        self.api_sends: list[Dispatch] = []
        self.version_changes: list[VersionChange] = []
        self.misfires: dict[str, list[Misfire]] = {}
        self.quiet_from: datetime | None = None
        self.steps = 0
        #: Batches dead workers left behind, and the time the fault model injected (outages, frozen and paused
        #: actors, the jump into quiescence): the checker's restart-time invariant allows for those.
        self.abandoned: list[Abandoned] = []
        self.stalls: list[tuple[datetime, float]] = []

        self.api = ApiActor(self, "api")
        self.sweepers = [SweeperActor(self, f"sweeper-{n}") for n in range(1, self.rng.randint(1, 3) + 1)]
        self.workers = [WorkerActor(self, f"worker-{n}") for n in range(1, self.rng.randint(1, 3) + 1)]
        self.actors: dict[str, Actor] = {a.name: a for a in [self.api, *self.sweepers, *self.workers]}
        skew = self.profile.skew_seconds
        if skew:
            for actor in self.actors.values():
                actor.clock.offset = timedelta(milliseconds=self.rng.randint(-int(skew * 1000), int(skew * 1000)))
        self.end = self.workload.start + self.workload.window
        self.outage: tuple[datetime, timedelta] | None = None
        if self.rng.random() < self.profile.outage:
            at = self.workload.start + timedelta(seconds=self.rng.uniform(120, self.workload.window.total_seconds()))
            duration = timedelta(seconds=self.rng.randint(10 * 60, 60 * 60))
            self.outage = (at, duration)
            self.end += duration

    # -- running ------------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run the active phase, then quiesce, then check the invariants."""
        with deterministic_core(self.ids):
            self.trace("sim", f"seed {self.seed}: faults {self.profile.describe()}")
            offsets = ", ".join(f"{a.name} {a.clock.offset.total_seconds():+.3f}s" for a in self.actors.values())
            self.trace("sim", f"actors and clock offsets: {offsets}; {self.timers.shard_count} shard(s)")
            if self.outage is not None:
                self.trace("sim", f"an outage of {self.outage[1]} will start at {rfc3339(self.outage[0])}")
            for record in self.records:
                self.trace("sim", f"job-{record.index}: {record.description}")
            self._loop(self.end, api=True)
            self._quiesce()
            violations = check(self)
        return SimResult(self.seed, violations, self.events, self.profile, self._stats())

    def _loop(self, until: datetime, *, api: bool) -> None:
        """Advance from event to event until `until`: whichever actors are due, in a seeded order."""
        candidates: list[Actor] = [*self.sweepers, *self.workers] + ([self.api] if api else [])
        while self.steps < self.config.max_steps:
            upcoming = self._next_event(api)
            if upcoming is None or upcoming > until:
                self.clock.set(max(self.clock.now(), until))
                return
            if upcoming > self.clock.now():
                self.clock.set(upcoming)
            now = self.clock.now()
            if self.outage is not None and self.outage[0] <= now:
                self.trace("sim", f"FAULT outage: nothing runs for {self.outage[1]}")
                self.stalls.append((now, self.outage[1].total_seconds()))
                self.clock.advance(self.outage[1].total_seconds())
                self.outage = None
                continue
            if self.faults_on and self.profile.skew_seconds and self.rng.random() < 0.02:
                self._clock_jump()
            ready = [a for a in candidates if a.ready(now)]
            if not ready:
                self.clock.advance(0.001)
                continue
            self.run_step(self.rng.choice(ready))
        self.errors.append(f"no quiescence within {self.config.max_steps} steps")

    def _next_event(self, api: bool) -> datetime | None:
        times = [s.next_at for s in self.sweepers]
        if api:
            head = self.api.head()
            if head is not None:
                times.append(head.due)
        visible = self.queue.earliest_visible()
        if visible is not None:
            times.append(max(visible, min(w.next_at for w in self.workers)))
        if self.outage is not None:
            times.append(self.outage[0])
        return min(times, default=None)

    def _clock_jump(self) -> None:
        actor = self.rng.choice(list(self.actors.values()))
        skew = int(self.profile.skew_seconds * 1000)
        actor.clock.offset = timedelta(milliseconds=self.rng.randint(-skew, skew))
        self.trace(actor.name, f"FAULT clock jumps: now off by {actor.clock.offset.total_seconds():+.3f}s")

    def run_step(self, actor: Actor) -> None:
        """One step of one actor. A crash ends the step where it struck: what the actor held is abandoned."""
        self.steps += 1
        self.stack.append(actor)
        actor.gate.in_chain_window = False
        try:
            actor.step()
        except Crash as crash:
            self.trace(actor.name, f"FAULT CRASH {crash}")
        except Throttled as exc:
            self.trace(actor.name, f"FAULT step failed: {exc}")
        except Exception as exc:  # a bug in the core or in the simulator: report it, keep the run going
            self.errors.append(f"{actor.name}: unexpected {type(exc).__name__}: {_brief(exc)}")
            self.trace(actor.name, f"UNEXPECTED {type(exc).__name__}: {_brief(exc)}")
        finally:
            self.stack.pop()
            if isinstance(actor, WorkerActor):
                self._abandoned_by(actor)

    def _abandoned_by(self, worker: WorkerActor) -> None:
        """A worker's step ended while it still held messages (it died, or its invocation failed)."""
        held, visibility = worker.held, worker.holding
        worker.held = worker.holding = None
        if held is None or visibility is None or visibility.applied is None or not held.held:
            return
        # Only what it still held: a message another worker received meanwhile (while this one was frozen past
        # the hold) is that worker's now.
        current = self.queue.messages
        ids = tuple(i for i in held.held if i in current and current[i].receipt == visibility.messages[i].receipt)
        if not ids:
            return
        keys = tuple(held.keys[i] or "" for i in ids)
        items = [self.ledger.items.get(key) for key in keys]
        started = tuple(item is not None and (item.owner or "").startswith(f"{worker.name}/") for item in items)
        self.abandoned.append(Abandoned(self.clock.now(), worker.name, ids, keys, started))
        self.trace(worker.name, f"abandoned {', '.join(ids)} (held since {rfc3339(visibility.applied)})")

    def _quiesce(self) -> None:
        self.faults_on = False
        for actor in self.actors.values():
            actor.clock.offset = timedelta(0)
        cfg = self.config
        jump = max(cfg.visibility_timeout, cfg.bucket_lease.total_seconds(), cfg.lease.total_seconds()) + 1
        self.stalls.append((self.clock.now(), jump))
        self.clock.advance(jump)
        self.trace("sim", "quiescence: faults stop, clocks agree, leases and visibility timeouts have run out")
        while (pending := self.api.head()) is not None:
            pending.due = self.clock.now()
            self.run_step(self.api)
            self.clock.advance(0.5)
        self.quiet_from = self.clock.now()
        # Without faults one sweeper is as good as three, and sweeps are most of a run's cost.
        del self.sweepers[1:]
        self.sweepers[0].next_at = self.clock.now() + timedelta(milliseconds=self.rng.randint(0, 60_000))
        self._loop(self.clock.now() + cfg.quiet, api=False)
        self.trace("sim", "drain: sweeps stop, workers empty the queue")
        while self.steps < cfg.max_steps:
            visible = self.queue.earliest_visible()
            if visible is None:
                return
            if visible > self.clock.now():
                self.clock.set(visible)
            self.run_step(self.rng.choice(self.workers))
        self.errors.append(f"the queue did not drain within {cfg.max_steps} steps")

    # -- hooks for actors, gates and the sink --------------------------------------------------------------

    def trace(self, actor: str, text: str) -> None:
        self.events.append((self.clock.now(), actor, text))

    def current_actor(self) -> Actor:
        return self.stack[-1]

    def sleep(self, seconds: float) -> None:
        """The executor's sleep: simulated time passes."""
        self.clock.advance(seconds)

    def preempt(self, actor: str) -> None:
        """At a port call: the actor pauses while another runs a whole step (one level deep)."""
        if len(self.stack) > 1:
            return
        now = self.clock.now()
        others = [a for a in self.actors.values() if a not in self.stack and a.can_interject(now)]
        if not others:
            return
        other = self.rng.choice(others)
        pause = self.rng.randint(0, 2000) / 1000
        self.stalls.append((now, pause))
        self.clock.advance(pause)
        self.trace(actor, f"FAULT paused at a port call while {other.name} runs")
        self.run_step(other)

    def freeze(self, actor: Actor, where: str) -> None:
        """The actor freezes (GC, a stalled container) past its lease, maybe past its message's visibility
        timeout; meanwhile other workers and due sweepers run."""
        if len(self.stack) > 2:
            return
        cfg = self.config
        if self.rng.random() < 0.6:
            seconds = cfg.lease.total_seconds() + self.rng.randint(1, 30)
        else:
            seconds = cfg.visibility_timeout + self.rng.randint(1, 60)
        self.stalls.append((self.clock.now(), seconds))
        self.clock.advance(seconds)
        self.trace(actor.name, f"FAULT frozen {seconds:.0f}s {where}")
        for _ in range(self.rng.randint(1, 2)):
            now = self.clock.now()
            others: list[Actor] = [w for w in self.workers if w not in self.stack and w.can_interject(now)]
            others += [s for s in self.sweepers if s not in self.stack and s.ready(now)]
            if not others:
                break
            self.run_step(self.rng.choice(others))

    def job_read(self, actor: str) -> None:
        self.actors[actor].job_read_at = self.clock.now()

    def advanced(
        self, timer: Timer, dispatched_for: datetime, skipped: int, result: AdvanceResult, now: datetime
    ) -> None:
        if result.proceed and timer.plan is not None:
            # Open until the chain's next timer is stored (the proof that the plan was sent).
            self.open_plans[timer.job_id] = (timer.version, timer.scheduled_for)
            self.plans_opened[timer.job_id] = self.plans_opened.get(timer.job_id, 0) + 1
        if skipped and result.proceed and timer.plan is not None:
            policy = timer.plan.misfire_policy
            misfire = Misfire(timer.version, policy, timer.scheduled_for, timer.fire_at, dispatched_for, skipped, now)
            self.misfires.setdefault(timer.job_id, []).append(misfire)

    def timer_stored(self, timer: Timer) -> None:
        plan = self.open_plans.get(timer.job_id)
        if plan is not None and timer.plan is not None and timer.version == plan[0] and timer.scheduled_for > plan[1]:
            del self.open_plans[timer.job_id]

    def ledger_claimed(self, key: str, epoch: int) -> None:
        previous = self.max_epoch.get(key, 0)
        if epoch <= previous:
            self.stale_writes.append(f"a claim of {key} was granted epoch {epoch}, not above {previous}")
        self.max_epoch[key] = max(previous, epoch)

    def ledger_write(self, op: str, key: str, epoch: int, owner: str | None) -> None:
        current = self.max_epoch.get(key, 0)
        if epoch < current:
            self.stale_writes.append(
                f"ledger accepted {op} of {key} from epoch {epoch} (owner {owner}); epoch {current} holds it"
            )
            self.trace("sim", f"STALE WRITE ACCEPTED: {op} of {key} from epoch {epoch} < {current}")

    def queue_send(self, actor: str, dispatches: Sequence[Dispatch], now: datetime) -> None:
        if not dispatches:
            return
        for dispatch in dispatches:
            self.first_send.setdefault(dispatch.key, now)
            self.sent_dispatch.setdefault(dispatch.key, dispatch)
        if actor == self.api.name:
            self.api_sends += dispatches
        self.queue.send(dispatches, now)
        self.trace(actor, f"sent {', '.join(d.key for d in dispatches)}")
        if not self.faults_on:
            return
        for dispatch in dispatches:
            if self.rng.random() < self.profile.duplicate:
                delay = max(0.0, min(900.0, (dispatch.fire_at - now).total_seconds()))
                at = self.clock.now() + timedelta(seconds=delay + self.rng.randint(0, 5000) / 1000)
                copy_id = self.queue.inject(dispatch, at)
                self.trace(actor, f"FAULT {dispatch.key} delivered twice ({copy_id})")
            if self.rng.random() < self.profile.late_copy:
                at = self.clock.now() + timedelta(seconds=self.rng.randint(60, 900))
                copy_id = self.queue.inject(dispatch, at)
                self.trace(actor, f"FAULT {dispatch.key} redelivered late ({copy_id} at {rfc3339(at)})")

    def invalid_request(self, call: InvalidCall, service: JobService) -> None:
        """Make one request that must change nothing; compare the stores before and after."""
        before = self.snapshot()
        name, outcome, must_reject = invalid_request(self, call, service)
        changed = self.snapshot() != before
        self.invalid_outcomes.append(InvalidOutcome(name, outcome, changed, must_reject))
        self.trace("api", f"invalid request {name}: {outcome}{' (STATE CHANGED)' if changed else ''}")

    def snapshot(self) -> object:
        """Everything stored, cheaply comparable (jobs and timers are immutable; ledger items are not)."""
        return (
            dict(self.jobs.jobs),
            dict(self.jobs.idempotency),
            dict(self.jobs.active),
            {bucket: dict(items) for bucket, items in self.timers.timer_items.items()},
            {bucket: replace(item) for bucket, item in self.timers.buckets.items()},
            dict(self.timers.late),
            self.timers.watermark(),
            {key: (e.state, e.epoch, e.attempts, e.owner, e.lease_until) for key, e in self.ledger.items.items()},
            self.queue.sent,
            len(self.queue.messages),
        )

    def _stats(self) -> dict[str, int]:
        return {
            "steps": self.steps,
            "messages": self.queue.sent,
            "target_calls": len(self.sink.calls),
            "effects": sum(len(v) for v in self.sink.effects.values()),
            "occurrences": len(self.ledger.items),
        }


@dataclass
class SimResult:
    """The outcome of one seed."""

    seed: int
    violations: list[Violation]
    events: list[Event]
    profile: FaultProfile
    stats: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations
