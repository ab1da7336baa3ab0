"""A small harness for unit tests of the core: fake clock, in-memory adapters, a scripted target.

`MemoryCore.build()` composes the services the Lambda handlers use (`scheduler.composition.compose`: JobService,
Dispatcher, Sweeper, Executor, ...) over in-memory adapters, so a test can create jobs, sweep, deliver messages
to workers and move time by hand.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import TypeAdapter

from scheduler.adapters.heartbeat import ThreadHeartbeats
from scheduler.adapters.memory import (
    FakeClock,
    MemoryBackfillStore,
    MemoryEventPublisher,
    MemoryJobStore,
    MemoryLedger,
    MemoryMessage,
    MemoryQueue,
    MemoryTenantBudgets,
    MemoryTenantSlots,
    MemoryTimerStore,
    QueuedMessage,
    RecordingMetrics,
)
from scheduler.composition import Configs, Container, compose, memory_stores
from scheduler.core.execution.events import Outbox
from scheduler.core.execution.executor import ExecuteConfig, Executor, Outcome
from scheduler.core.jobs.backfill import BackfillService
from scheduler.core.jobs.reads import JobReads
from scheduler.core.jobs.resolution import Resolution
from scheduler.core.jobs.service import JobService
from scheduler.core.jobs.signing_keys import KeyRotation
from scheduler.core.model.job import Job, JobSpec
from scheduler.core.model.schedules import Schedule
from scheduler.core.ports import Dispatch, Heartbeats, Ids, TargetCall, TargetFailure
from scheduler.core.runtime.ids import RANDOM_IDS, RandomIds
from scheduler.core.sweep.backfill import BackfillConfig, BackfillRunner
from scheduler.core.sweep.dispatch import Dispatcher, timer_for
from scheduler.core.sweep.sweeper import Sweeper, SweepReport
from scheduler.core.tenancy.concurrency import ConcurrencyConfig, ConcurrencyGate
from scheduler.core.tenancy.fairness import FairnessConfig
from scheduler.settings import Settings


class GivenJobIds(RandomIds):
    """Ids whose job ids are the given ones, in order (tokens stay random)."""

    def __init__(self, job_ids: Iterable[str]) -> None:
        self._job_ids = iter(job_ids)

    def job_id(self) -> str:
        return next(self._job_ids)


#: Monday 2026-01-05 09:00:00 UTC: the default start of every world.
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
TENANT = "acme"
#: The deployed lease on an occurrence (the functions' default), which every world runs with.
LEASE = timedelta(seconds=Settings.model_fields["lease_seconds"].default)

_SCHEDULE = TypeAdapter(Schedule)


def at(text: str) -> datetime:
    """`at("2026-01-05T09:10")` -> an aware UTC instant (seconds optional)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def schedule(**fields: Any) -> Schedule:
    """`schedule(type="cron", expression="0 9 * * *")` -> a validated Schedule."""
    return _SCHEDULE.validate_python(fields)


def spec_body(sched: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """The JSON body of a job whose target is the `handler` type (served by FakeTarget in tests)."""
    return {"schedule": sched, "target": {"type": "handler", "name": "record"}, **fields}


def job_spec(sched: dict[str, Any], **fields: Any) -> JobSpec:
    return JobSpec.model_validate(spec_body(sched, **fields))


@dataclass(frozen=True)
class Sent:
    """One message handed to the ready queue."""

    dispatch: Dispatch
    sent_at: datetime
    visible_at: datetime


@dataclass
class RecordingQueue(MemoryQueue):
    """A MemoryQueue that also remembers every message ever sent (deleted ones included)."""

    history: list[Sent] = field(default_factory=list)

    def send(self, dispatches: Any, now: datetime) -> None:
        # Under the queue's (re-entrant) lock: a sweep's buckets send from their own threads, and another thread's
        # messages added between `before` and the send would be recorded twice.
        with self.lock:
            before = set(self.messages)
            super().send(dispatches, now)
            for mid, msg in self.messages.items():
                if mid not in before:
                    self.history.append(Sent(msg.dispatch, now, msg.visible_at))


@dataclass(frozen=True)
class Call:
    """What a FakeTarget saw on one invocation."""

    key: str
    token: int
    attempt: int
    at: datetime
    scheduled_for: datetime
    version: int
    payload: Any


Action = str | BaseException | Callable[[TargetCall], str | None]


class FakeTarget:
    """A TargetInvoker that records its calls and plays a script.

    Each call takes the next action of the script (the last one repeats): a string is returned as the result,
    an exception is raised, a callable is called with the TargetCall (it may heartbeat, move the clock, or run
    another worker) and its return value is the result.
    """

    def __init__(self, clock: FakeClock, *script: Action) -> None:
        self.clock = clock
        self.script: list[Action] = list(script) or ["ok"]
        self.calls: list[Call] = []

    def invoke(self, call: TargetCall) -> str | None:
        self.calls.append(
            Call(
                call.occurrence_key,
                call.fencing_token,
                call.attempt,
                self.clock.now(),
                call.scheduled_for,
                call.job.version,
                call.job.spec.payload,
            )
        )
        action = self.script[min(len(self.calls), len(self.script)) - 1]
        if isinstance(action, BaseException):
            raise action
        if callable(action):
            return action(call)
        return action


def retryable(message: str = "503 Service Unavailable", retry_after: float | None = None) -> TargetFailure:
    return TargetFailure("retryable", message, retry_after=retry_after)


def permanent(message: str = "400 Bad Request") -> TargetFailure:
    return TargetFailure("permanent", message)


def ambiguous(message: str = "timed out after the request was sent") -> TargetFailure:
    return TargetFailure("ambiguous", message)


@dataclass
class Delivery:
    """One message handled by a worker, and what the worker decided."""

    dispatch: Dispatch
    outcome: Outcome
    at: datetime


class StubMessage:
    """A MessageControl for calling an Executor directly, without a queue."""

    def __init__(self, receive_count: int = 1) -> None:
        self.receive_count = receive_count
        self.extensions: list[int] = []

    def extend_visibility(self, seconds: int) -> None:
        self.extensions.append(seconds)


def settings_for(
    *,
    shard_count: int,
    lookahead: timedelta,
    misfire_grace: timedelta,
    catchup_window: timedelta,
    max_active_jobs: int,
    budget: int,
    **more: Any,
) -> Settings:
    """A test world's Settings, every value that matters given: no dispatch budgets (tests ask for them), completion
    events on and announced by default, small backfill waves, a short sweep safety margin; `more` changes others
    (by their field names)."""
    given: dict[str, Any] = {
        "shard_count": shard_count,
        "lookahead_seconds": int(lookahead.total_seconds()),
        "misfire_grace_seconds": int(misfire_grace.total_seconds()),
        "catchup_window_seconds": int(catchup_window.total_seconds()),
        "bucket_lease_seconds": 120,
        "lease_seconds": int(LEASE.total_seconds()),
        "dispatch_budget": budget,
        "sweep_safety_seconds": 5,
        "max_active_jobs_per_tenant": max_active_jobs,
        "backfill_max_occurrences": 1000,
        "backfill_wave_size": 50,
        "tenant_dispatch_rate": 0,
        "tenant_max_concurrency": 0,
        "completion_events": True,
        "completion_events_default": True,
    }
    return Settings(**{**given, **more})


@dataclass
class MemoryCore:
    """The core composed over memory stores (`scheduler.composition.compose`), and the stores themselves."""

    core: Container
    clock: FakeClock
    jobs: MemoryJobStore
    timers: MemoryTimerStore
    ledger: MemoryLedger
    queue: RecordingQueue
    metrics: RecordingMetrics
    events: MemoryEventPublisher
    backfills: MemoryBackfillStore
    tenant_budgets: MemoryTenantBudgets
    tenant_slots: MemoryTenantSlots
    service: JobService
    backfill_config: BackfillConfig

    @property
    def dispatcher(self) -> Dispatcher:
        return self.core.dispatcher

    @property
    def reads(self) -> JobReads:
        return self.core.job_reads()

    @property
    def key_rotation(self) -> KeyRotation:
        return self.core.key_rotation()

    @property
    def resolution(self) -> Resolution:
        """An operator's resolve, which publishes its outcome at once, as the api's does."""
        return self.core.resolution()

    @property
    def gate(self) -> ConcurrencyGate | None:
        """Per-tenant execution budgets (None: none)."""
        return self.core.gate

    @property
    def ids(self) -> Ids:
        """Job ids, attempt owners and backfill ids."""
        return self.core.ids

    @property
    def lookahead(self) -> timedelta:
        return self.core.configs.sweep.lookahead

    @property
    def budget(self) -> int:
        return self.core.configs.sweep.dispatch_budget

    @property
    def backfill(self) -> BackfillService:
        return self.core.backfill_service(self.backfill_config)

    def backfill_runner(self) -> BackfillRunner:
        runner = self.core.backfill_runner(self.backfill_config)
        assert runner is not None
        return runner

    @property
    def outbox(self) -> Outbox:
        """Completion events: the worker publishes after each terminal write, the sweep drains leftovers."""
        assert self.core.outbox is not None
        return self.core.outbox

    @classmethod
    def build(
        cls,
        *,
        start: datetime = T0,
        shard_count: int = 1,
        lookahead: timedelta = timedelta(minutes=5),
        misfire_grace: timedelta = timedelta(seconds=60),
        catchup_window: timedelta = timedelta(days=1),
        max_active_jobs: int = 100,
        budget: int = 10_000,
        fairness: FairnessConfig | None = None,
        concurrency: ConcurrencyConfig | None = None,
        ids: Ids = RANDOM_IDS,
        heartbeats: Heartbeats | None = None,
    ) -> MemoryCore:
        """`fairness`: per-tenant dispatch budgets, `concurrency`: per-tenant execution budgets (None: none);
        `ids`: where new jobs' ids come from; `heartbeats`: real threads unless given."""
        clock = FakeClock(start)
        stores = memory_stores(clock, shard_count, queue=RecordingQueue(clock))
        metrics = RecordingMetrics()
        settings = settings_for(
            shard_count=shard_count,
            lookahead=lookahead,
            misfire_grace=misfire_grace,
            catchup_window=catchup_window,
            max_active_jobs=max_active_jobs,
            budget=budget,
        )
        derived = Configs.of(settings)
        configs = replace(
            derived,
            dispatch=replace(derived.dispatch, landing_window=None),  # sends at once: nothing waits for a landing
            fairness=fairness,
            concurrency=concurrency,
        )
        # A worker waiting out a sub-second remainder moves the fake clock.
        beats = heartbeats or ThreadHeartbeats()
        core = compose(settings, stores, clock, ids, metrics, configs=configs, sleep=clock.advance, heartbeats=beats)
        service = core.job_service()
        s = stores
        return cls(core, clock, s.jobs, s.timers, s.ledger, s.queue, metrics, s.events, s.backfills, s.tenant_budgets,
                   s.tenant_slots, service, configs.backfill)  # fmt: skip

    # -- time ---------------------------------------------------------------------------------------------

    def now(self) -> datetime:
        return self.clock.now()

    def set_time(self, when: datetime) -> None:
        self.clock.set(when)

    # -- jobs ---------------------------------------------------------------------------------------------

    def create(self, sched: dict[str, Any], *, tenant: str = TENANT, key: str | None = None, **fields: Any) -> Job:
        body = spec_body(sched, **fields)
        return self.service.create(tenant, JobSpec.model_validate(body), key, body).job

    def due(self, sched: dict[str, Any] | None = None, **fields: Any) -> tuple[Job, Dispatch]:
        """Create a job (by default: once, in 10 s), move the clock to its first fire time, and return the
        ready-queue message the sweeper would have sent for it."""
        job = self.create(sched or {"type": "once", "delay_seconds": 10}, **fields)
        assert job.next_run_at is not None
        timer = timer_for(job, job.next_run_at)
        self.set_time(timer.fire_at)
        return job, Dispatch.of(timer)

    def job(self, job_id: str) -> Job:
        found = self.jobs.get(job_id)
        assert found is not None
        return found

    # -- sweeping -----------------------------------------------------------------------------------------

    def sweeper(self, owner: str = "sweeper-1", budget: int | None = None) -> Sweeper:
        config = self.core.configs.sweep
        if budget is not None:
            config = replace(config, dispatch_budget=budget)
        return self.core.sweeper(owner, config=config, backfills=self.backfill_runner())

    def sweep(self, owner: str = "sweeper-1", budget: int | None = None) -> SweepReport:
        return self.sweeper(owner, budget).sweep(deadline=self.now() + timedelta(minutes=1))

    def watermark_passed(self, minute: datetime) -> bool:
        mark = self.timers.watermark()
        return mark is not None and mark > minute

    def sent(self, job_id: str | None = None) -> list[Dispatch]:
        return [s.dispatch for s in self.queue.history if job_id is None or s.dispatch.job_id == job_id]

    def sent_for(self, job_id: str | None = None) -> list[datetime]:
        """The scheduled instants sent to the queue, in send order."""
        return [d.scheduled_for for d in self.sent(job_id)]

    def pending_timers(self, job_id: str | None = None) -> list[Any]:
        found = [t for items in self.timers.timer_items.values() for t in items.values()]
        return [t for t in found if job_id is None or t.job_id == job_id]

    # -- workers ------------------------------------------------------------------------------------------

    def executor(
        self,
        target: Any = None,
        *,
        worker_id: str = "worker-1",
        lease: timedelta = LEASE,
        config: ExecuteConfig | None = None,
        extra_targets: dict[str, Any] | None = None,
    ) -> Executor:
        target = target if target is not None else FakeTarget(self.clock)
        targets = {"handler": target, **(extra_targets or {})}
        return self.core.executor(
            worker_id, targets, config=config or ExecuteConfig(lease=lease, heartbeat_fraction=None)
        )

    def deliver(self, executor: Executor, limit: int = 1000) -> list[Delivery]:
        """Receive every visible message and run it, applying the outcome as the worker handler does."""
        done: list[Delivery] = []
        while len(done) < limit:
            batch = self.queue.receive(10)
            if not batch:
                return done
            for msg in batch:
                done.append(self.handle(executor, msg))
        return done

    def handle(self, executor: Executor, msg: QueuedMessage) -> Delivery:
        outcome = executor.execute(msg.dispatch, MemoryMessage(self.queue, msg))
        if outcome.ack:
            self.queue.delete(msg)
        else:
            self.queue.change_visibility(msg, outcome.hide_seconds)
        return Delivery(msg.dispatch, outcome, self.now())

    def run(self, until: datetime, executor: Executor, step: timedelta = timedelta(minutes=1)) -> list[Delivery]:
        """The whole system, minute by minute: sweep, then let the worker drain what is visible."""
        done: list[Delivery] = []
        while self.now() <= until:
            self.sweep()
            done += self.deliver(executor)
            self.clock.advance(step.total_seconds())
        return done

    def deliver_until(self, until: datetime, executor: Executor, step: float = 1.0) -> list[Delivery]:
        """Let the worker drain the queue second by second (no sweeps), up to `until`."""
        done: list[Delivery] = []
        while self.now() <= until:
            done += self.deliver(executor)
            self.clock.advance(step)
        return done


def keys_of(items: Iterable[Dispatch]) -> list[str]:
    return [d.key for d in items]


def ceil_seconds(delta: timedelta) -> int:
    return math.ceil(delta.total_seconds())
