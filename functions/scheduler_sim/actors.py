"""The actors of the simulated world: the sweepers, the workers (fed by a simulated queue) and the API with
its client, each running the real protocol code one step at a time."""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, TypeVar

from pydantic import ValidationError

from scheduler.adapters.memory import FakeClock, MemoryBatchVisibility, MemoryMessage, MemoryQueue, QueuedMessage
from scheduler.composition import Container, Stores, compose
from scheduler.core.errors import SchedulerError
from scheduler.core.execution.packing import PackingConfig
from scheduler.core.execution.recovery import HeldBatch
from scheduler.core.jobs.service import Submission
from scheduler.core.model.job import Job, JobSpec
from scheduler.core.model.timefmt import parse_rfc3339, rfc3339
from scheduler.core.ports import Dispatch, JobStore, Ledger
from scheduler.core.tenancy.fairness import Admitted, TenantAdmission
from scheduler_sim.faults import Crash, Gate, Throttled
from scheduler_sim.faulty_ports import (
    FaultyBackfills,
    FaultyJobStore,
    FaultyLedger,
    FaultyPublisher,
    FaultyQueue,
    FaultyTenantBudgets,
    FaultyTenantSlots,
    FaultyTimerStore,
    SkewedClock,
)
from scheduler_sim.heartbeats import SimHeartbeats
from scheduler_sim.records import Change, VersionChange
from scheduler_sim.workload import InvalidCall, PlannedCall

if TYPE_CHECKING:
    from scheduler_sim.simulation import Simulation

T = TypeVar("T")


class SimQueue(MemoryQueue):
    """`MemoryQueue` with SQS standard's looser habits: visible messages come back in a seeded random order
    (reordering), delays (to each message's `send_at`: its fire time, or the later release its tenant's budget
    gave it) count from the queue's own clock, and copies can be injected to arrive later
    (duplicates and late redeliveries)."""

    def __init__(self, clock: FakeClock, visibility_timeout: float, rng: random.Random, packing: PackingConfig) -> None:
        super().__init__(clock=clock, visibility_timeout=visibility_timeout, packing=packing)
        self.rng = rng
        #: When each message was received (taken from the queue), for the checker's restart-time invariant.
        self.receives: dict[str, list[datetime]] = {}
        #: Every receive: when, and whether it came back full (a backlog: visible messages were left behind).
        self.polls: list[tuple[datetime, bool]] = []
        #: How many occurrences each message put on the queue carried, in the order they were put.
        self.carried: list[int] = []

    def _arrival(self, now: datetime) -> datetime:
        return self.clock.now()  # the true time: the sender's `now` is its own, maybe skewed, clock

    def inject(self, dispatches: Sequence[Dispatch], visible_at: datetime) -> str:
        """A copy of a message (its occurrences), delivered (again) from `visible_at`."""
        with self.lock:
            return self._put(dispatches, visible_at)

    def _put(self, dispatches: Sequence[Dispatch], visible_at: datetime) -> str:
        self.carried.append(len(dispatches))
        return super()._put(dispatches, visible_at)

    def receive(self, max_messages: int = 10) -> list[QueuedMessage]:
        with self.lock:
            out = super().receive(max_messages)
            self.polls.append((self.clock.now(), len(out) == max_messages))
            return out

    def _delivery_order(self, now: datetime) -> list[QueuedMessage]:
        visible = [m for m in self.messages.values() if m.visible_at <= now]
        self.rng.shuffle(visible)
        return visible

    def _receive_one(self, message: QueuedMessage, now: datetime) -> QueuedMessage | None:
        self.receives.setdefault(message.message_id, []).append(now)
        return super()._receive_one(message, now)

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
        jobs, timers = sim.stores_for(name)
        self.jobs = FaultyJobStore(jobs, self.gate, self.clock)
        self.timers = FaultyTimerStore(timers, self.gate)
        self.ledger = FaultyLedger(sim.ledger, self.gate)
        self.queue = FaultyQueue(sim.queue, self.gate)
        self.next_at = sim.clock.now()
        self.job_read_at: datetime | None = None
        #: The background heartbeat of the actor's target calls (beaten by `Simulation.busy`).
        self.heartbeats = SimHeartbeats(sim.clock)

    def core(self, *, jobs: JobStore | None = None, ledger: Ledger | None = None) -> Container:
        """The real core composed over this actor's fault-injecting ports (or the bare stores given instead), with
        the simulation's configuration and ids; waits pass simulated time."""
        sim = self.sim
        stores = Stores(
            jobs or self.jobs,
            self.timers,
            ledger or self.ledger,
            self.queue,
            tenant_budgets=FaultyTenantBudgets(sim.tenant_budgets, self.gate),
            tenant_slots=FaultyTenantSlots(sim.tenant_slots, self.gate, sim.slot_leases),
            flow_controls=sim.flow_controls,
            flow_slots=FaultyTenantSlots(sim.flow_slots, self.gate, sim.flow_slot_leases),
            events=FaultyPublisher(sim.bus, self.gate),
            backfills=FaultyBackfills(sim.backfills, self.gate),
        )
        container = compose(
            sim.settings,
            stores,
            self.clock,
            sim.ids,
            sim.metrics,
            configs=sim.configs,
            sleep=sim.sleep,
            heartbeats=self.heartbeats,
        )
        broken = sim.variant.admission if sim.variant is not None else None
        if broken is not None and container.dispatcher.admission is not None:
            container.dispatcher.admission = broken(container.dispatcher.admission)
        if container.dispatcher.admission is not None:
            container.dispatcher.admission = _Recorded.around(container.dispatcher.admission, sim)
        outbox = sim.variant.outbox if sim.variant is not None else None
        if outbox is not None and container.outbox is not None:
            container = replace(container, outbox=outbox(container.outbox))
        return container

    def ready(self, now: datetime) -> bool:
        """Whether the actor has a step to take now (its own schedule)."""
        return self.next_at <= now

    def can_interject(self, now: datetime) -> bool:
        """Whether running a step now, out of schedule, does something (for races and pauses)."""
        return True

    def step(self) -> None:
        raise NotImplementedError


class _Recorded(TenantAdmission):
    """A tenant admission whose keyed releases the simulation records as the tenant's calendar booked them."""

    inner: TenantAdmission
    sim: Simulation

    @classmethod
    def around(cls, admission: TenantAdmission, sim: Simulation) -> TenantAdmission:
        recorded = cls(admission.budgets, admission.clock, admission.config, admission.metrics)
        recorded.inner, recorded.sim = admission, sim
        return recorded

    def admit(self, dispatches: Sequence[Dispatch]) -> Admitted:
        admitted = self.inner.admit(dispatches)
        self.sim.tenant_released(admitted.sent)
        return admitted


class SeededOrder:
    """The sweep's TaskPool in the simulator: a minute's buckets, which production sweeps at once in threads, in
    a seeded random order (each bucket is claimed, drained and checkpointed on its own; the sim's gates preempt
    between its port calls, as several sweepers already interleave)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def run_all(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        order = list(range(len(tasks)))
        self.rng.shuffle(order)
        results: dict[int, T] = {}
        for index in order:
            results[index] = tasks[index]()
        return [results[index] for index in range(len(tasks))]


class SweeperActor(Actor):
    """A sweeper Lambda, invoked about once a minute; each invocation has its own owner id."""

    def __init__(self, sim: Simulation, name: str) -> None:
        super().__init__(sim, name)
        order = random.Random(f"{sim.seed}/{name}/buckets")  # its own stream: the run's is untouched
        broken = sim.variant.buckets if sim.variant is not None else None
        pool = broken(order) if broken is not None else SeededOrder(order)
        self.sweeper = self.core().sweeper(name, pool=pool)
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


class WorkerActor(Actor):
    """A worker Lambda fed by the event source mapping: receives a small batch, runs each message's occurrences
    through the real `MessageRunner` and `Executor`, deletes what it acknowledges and changes the visibility of what
    it keeps."""

    def __init__(self, sim: Simulation, name: str) -> None:
        super().__init__(sim, name)
        self.services = self.core()
        self.executor = self.services.executor(name, {"handler": sim.sink})
        # A message's occurrences, which production runs at once in threads, in a seeded order of their own.
        order = SeededOrder(random.Random(f"{sim.seed}/{name}/occurrences"))
        self.runner = self.services.message_runner(self.executor, pool=order)
        broken = sim.variant.runner if sim.variant is not None else None
        if broken is not None:
            self.runner = broken(self.runner)
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
        self.held = self.services.held_batch(visibility, {m.message_id: m.dispatch.key for m in messages})
        self.holding = visibility
        with self.held:
            for message in messages:
                self._handle(message)
        self.held = self.holding = None

    def _handle(self, message: QueuedMessage) -> None:
        sim = self.sim
        dispatches = message.dispatches
        if sim.variant is not None and sim.variant.rewrite is not None:
            dispatches = [sim.variant.rewrite(dispatch, sim.rng) for dispatch in dispatches]
        keys = ", ".join(dispatch.key for dispatch in dispatches)
        sim.trace(self.name, f"received {message.message_id} {keys} (receive #{message.receive_count})")
        try:
            outcome = self.runner.run(dispatches, MemoryMessage(sim.queue, message))
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
                copy_id = sim.queue.inject(message.dispatches, later)
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
        api = self.core(ledger=sim.ledger)
        self.service = api.job_service()
        self.backfills = api.backfill_service()
        # Invalid requests run on the bare stores, with no faults and nothing interleaved, so that any change
        # to stored state is theirs alone.
        bare_jobs, bare_timers = sim.stores_for(name)
        bare = Stores(
            bare_jobs,
            bare_timers,
            sim.ledger,
            sim.queue,
            tenant_budgets=sim.tenant_budgets,
            flow_controls=sim.flow_controls,
            flow_slots=sim.flow_slots,
        )
        plain = compose(sim.settings, bare, self.clock, sim.ids, sim.metrics, configs=sim.configs, sleep=sim.sleep)
        self.plain_service = plain.job_service()
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
            if call.kind in ("trigger", "backfill"):
                sim.trace(self.name, f"{call.kind} job-{call.job}: {type(exc).__name__} {exc}; outcome unknown")
            else:
                pending.due = sim.clock.now() + timedelta(milliseconds=sim.rng.randint(1000, 20_000))
                sim.trace(self.name, f"{call.kind} job-{call.job}: {type(exc).__name__} {exc}; will retry")
                return
        except (SchedulerError, ValidationError) as exc:
            sim.trace(self.name, f"{call.kind} job-{call.job} rejected: {type(exc).__name__}: {brief(exc)}")
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
            if call.job % 2:  # every other job is created as an item of a batch (`POST /v1/jobs/batch`)
                [answer] = service.create_many(call.tenant, [Submission(spec, call.idempotency_key, call.body)])
                if isinstance(answer, Exception):
                    raise answer
                job = answer.job
            else:
                job = service.create(call.tenant, spec, call.idempotency_key, call.body).job
            record.job_id = job.job_id
        elif record.job_id is None:
            sim.trace(self.name, f"{call.kind} job-{call.job}: skipped, the job was never created")
            return
        elif call.kind == "cancel":
            job = service.cancel(call.tenant, record.job_id)
        elif call.kind == "pause":
            job = service.pause(call.tenant, record.job_id)
        elif call.kind == "resume":
            job = service.resume(call.tenant, record.job_id)
        elif call.kind == "update":
            assert call.body is not None
            job = service.update(call.tenant, record.job_id, call.body, None)
        elif call.kind == "backfill":
            assert call.body is not None
            range_from, range_to = parse_rfc3339(call.body["from"]), parse_rfc3339(call.body["to"])
            backfill = self.backfills.start(call.tenant, record.job_id, range_from, range_to)
            sim.trace(
                self.name,
                f"backfill job-{call.job} -> {backfill.backfill_id}: {backfill.total} occurrence(s) in "
                f"[{call.body['from']}, {call.body['to']})",
            )
            return
        else:
            timer = service.trigger(call.tenant, record.job_id)
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


def brief(exc: Exception) -> str:
    text = str(exc).replace("\n", " ")
    return text if len(text) <= 120 else text[:117] + "..."
