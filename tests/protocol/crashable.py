"""The core for protocol tests (`CrashableCore`): the real core services over either backend (in memory, or DynamoDB
Local), a fake clock, a MemoryQueue, a cooperating sink target, and crash injection at any port call."""

from __future__ import annotations

import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.adapters.dynamodb import (
    DynamoFlowControls,
    DynamoJobStore,
    DynamoLedger,
    DynamoTenantSlots,
    DynamoTimerStore,
)
from scheduler.adapters.memory import (
    FakeClock,
    MemoryBatchVisibility,
    MemoryEventPublisher,
    MemoryMessage,
    MemoryQueue,
    QueuedMessage,
    RecordingMetrics,
)
from scheduler.adapters.threads import ThreadTaskPool
from scheduler.composition import Configs, Container, Stores, compose, memory_stores
from scheduler.core.execution.executor import Executor
from scheduler.core.execution.packing import MessageRunner
from scheduler.core.execution.recovery import HeldBatch, HoldConfig
from scheduler.core.jobs.chain import counts_as_active
from scheduler.core.jobs.service import JobService
from scheduler.core.model.job import JobSpec, RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.schedules import unindexed_occurrence
from scheduler.core.ports import TargetCall
from scheduler.core.runtime.ids import RANDOM_IDS
from scheduler.core.runtime.tasks import InOrder
from scheduler.core.sweep.dispatch import Dispatcher
from scheduler.core.sweep.sweeper import Sweeper
from tests.unit.fixtures import LEASE, settings_for

# In the future on purpose: DynamoDB Local really deletes items whose TTL attribute lies in the (real) past,
# so a fake clock in the past would see its timers and ledger items vanish.
T0 = datetime(2030, 3, 4, 9, 0, 0, tzinfo=UTC)
SHARDS = 2
BUCKET_LEASE = timedelta(seconds=20)
LOOKAHEAD = timedelta(seconds=60)
#: What the protocol tests run at: the deployed occurrence lease (`LEASE`), a bucket lease and a look-ahead shorter than
#: deployed, so that they run out within a test's fake time.
SETTINGS = settings_for(
    shard_count=SHARDS,
    lookahead=LOOKAHEAD,
    misfire_grace=timedelta(seconds=60),
    catchup_window=timedelta(hours=6),
    max_active_jobs=1000,
    budget=10_000,
    bucket_lease_seconds=int(BUCKET_LEASE.total_seconds()),
    lease_seconds=int(LEASE.total_seconds()),
    sweep_safety_seconds=1,
)
_DERIVED = Configs.of(SETTINGS)
#: And what Settings do not say: sends at once (no landing wait), a first sweep from the watermark's own minute,
#: no background heartbeat (a target that needs one beats itself).
CONFIGS = replace(
    _DERIVED,
    dispatch=replace(_DERIVED.dispatch, landing_window=None),
    sweep=replace(_DERIVED.sweep, initial_lag=timedelta(0)),
    execute=replace(_DERIVED.execute, heartbeat_fraction=None),
)


#: The batch hold the worker tests run with: the deployed hold time, renewed by hand (steps take no real time).
HOLD = HoldConfig(renew_fraction=None)


class Crash(BaseException):
    """The process dies at this instruction (not an Exception: nothing in the core may catch it)."""


class CrashAt:
    """Proxy of a port object that crashes right before or right after the `nth` call of `method`."""

    def __init__(self, target: Any, method: str, when: str, nth: int = 1) -> None:
        self._target = target
        self._method = method
        self._when = when
        self._left = nth
        self.fired = False
        self._lock = threading.Lock()  # a sweep's buckets call it from their threads: exactly one call is the nth

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if name != self._method or not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self._left -= 1
                nth = self._left == 0
            if nth and self._when == "before":
                self.fired = True
                raise Crash(f"before {name}")
            result = attribute(*args, **kwargs)
            if nth and self._when == "after":
                self.fired = True
                raise Crash(f"after {name}")
            return result

        return call


@dataclass
class Sink:
    """A cooperating target: applies each occurrence key at most once, refuses stale fencing tokens."""

    calls: list[tuple[str, int]] = field(default_factory=list)
    effects: Counter[str] = field(default_factory=Counter)
    highest_token: dict[str, int] = field(default_factory=dict)
    stale_refused: int = 0
    before_effect: Callable[[TargetCall], None] | None = None
    after_effect: Callable[[TargetCall], None] | None = None

    def invoke(self, call: TargetCall) -> str | None:
        if self.before_effect:
            self.before_effect(call)
        key, token = call.occurrence_key, call.fencing_token
        self.calls.append((key, token))
        if token < self.highest_token.get(key, 0):
            self.stale_refused += 1
            return "stale token refused"
        self.highest_token[key] = token
        if self.effects[key] == 0:
            self.effects[key] += 1
        if self.after_effect:
            self.after_effect(call)
        return "ok"


@dataclass
class CrashableCore:
    """The real core over one backend's stores, each of its services composed over crash proxies given in place of
    the stores (`Crash`, `CrashAt`), with the sink target that counts effects."""

    backend: str
    clock: FakeClock
    jobs: Any
    timers: Any
    ledger: Any
    queue: MemoryQueue
    metrics: RecordingMetrics = field(default_factory=RecordingMetrics)
    sink: Sink = field(default_factory=Sink)
    created: list[str] = field(default_factory=list)
    events: MemoryEventPublisher = field(default_factory=MemoryEventPublisher)
    #: The flow-control keys and their slots (scheduler.core.tenancy.flow_control), on the world's backend.
    flows: Any = None
    flow_slots: Any = None

    @classmethod
    def build(cls, backend: str, resources: Any = None, dynamodb: Any = None, start: datetime = T0) -> CrashableCore:
        clock = FakeClock(start)
        flows: Any
        flow_slots: Any
        if backend == "memory":
            memory = memory_stores(clock, SHARDS)
            jobs, timers, ledger = memory.jobs, memory.timers, memory.ledger
            flows, flow_slots = memory.flow_controls, memory.flow_slots
        else:
            jobs = DynamoJobStore(resources.jobs_table, SHARDS, dynamodb)
            timers = DynamoTimerStore(resources.jobs_table, SHARDS, dynamodb)
            ledger = DynamoLedger(resources.executions_table, dynamodb)
            flows = DynamoFlowControls(resources.jobs_table, dynamodb)
            flow_slots = DynamoTenantSlots(resources.jobs_table, dynamodb, kind="FLOWSLOT")
        queue = MemoryQueue(clock, visibility_timeout=120)
        return cls(backend, clock, jobs, timers, ledger, queue, flows=flows, flow_slots=flow_slots)

    # -- services, each optionally over crash proxies ------------------------------------------------------

    def core(
        self,
        *,
        jobs: Any = None,
        timers: Any = None,
        ledger: Any = None,
        queue: Any = None,
        events: bool = True,
        flows: Any = None,
        flow_slots: Any = None,
    ) -> Container:
        """The core composed over the world's stores, or over the proxies given in their place; `events`: with
        completion events (the outbox)."""
        stores = Stores(
            jobs or self.jobs,
            timers or self.timers,
            ledger or self.ledger,
            queue or self.queue,
            events=self.events if events else None,
            flow_controls=flows or self.flows,
            flow_slots=flow_slots or self.flow_slots,
        )
        return compose(
            SETTINGS, stores, self.clock, RANDOM_IDS, self.metrics, configs=CONFIGS, sleep=self.clock.advance
        )

    def dispatcher(self, jobs: Any = None, timers: Any = None, queue: Any = None) -> Dispatcher:
        return self.core(jobs=jobs, timers=timers, queue=queue).dispatcher

    def service(self) -> JobService:
        return self.core().job_service()

    def sweeper(
        self, owner: str = "s", timers: Any = None, dispatcher: Dispatcher | None = None, threads: bool = False
    ) -> Sweeper:
        """A sweeper; with `threads`, one that sweeps a minute's buckets at once, each in a thread (as deployed)."""
        core = self.core(timers=timers)
        if dispatcher is not None:
            core = replace(core, dispatcher=dispatcher)
        return core.sweeper(owner, pool=ThreadTaskPool(SHARDS) if threads else None)

    def executor(self, worker: str = "w", ledger: Any = None, queue: Any = None, target: Any = None) -> Executor:
        return self.core(ledger=ledger, queue=queue).executor(worker, {"http": target or self.sink})

    def runner(self, worker: str = "w", ledger: Any = None, queue: Any = None, target: Any = None) -> MessageRunner:
        """A worker's runner of a message's occurrences (in turn), over the proxies given; its sends of what it keeps
        go to `queue` too."""
        core = self.core(ledger=ledger, queue=queue)
        return core.message_runner(core.executor(worker, {"http": target or self.sink}), pool=InOrder())

    # -- driving ---------------------------------------------------------------------------------------------

    def work_batch(self, runner: MessageRunner, messages: list[QueuedMessage], visibility: Any = None) -> None:
        """What the worker handler does with a batch: hold it, run each message's occurrences, release a message
        before setting its own visibility; the event source mapping deletes the acknowledged ones after the
        invocation."""
        visibility = visibility or MemoryBatchVisibility(self.queue, messages)
        done = []
        with HeldBatch(visibility, {m.message_id: m.dispatch.key for m in messages}, HOLD, self.metrics) as held:
            for message in messages:
                outcome = runner.run(message.dispatches, MemoryMessage(self.queue, message))
                if outcome.ack:
                    done.append(message)
                else:
                    held.release(message.message_id)
                    self.queue.change_visibility(message, outcome.hide_seconds)
        for message in done:
            self.queue.delete(message)

    def assert_exactly_once(self, keys: list[str]) -> None:
        """Each occurrence SUCCEEDED, with one effect at the target."""
        for key in keys:
            run = self.ledger.get(key)
            assert run is not None and run.state == RunState.SUCCEEDED, (key, run)
            assert self.sink.effects[key] == 1, key

    def create(self, schedule: dict[str, Any], **extra: Any) -> str:
        spec = JobSpec.model_validate(
            {"schedule": schedule, "target": {"type": "http", "url": "https://example.com/hook"}, **extra}
        )
        job_id = self.service().create("tenant", spec, None, {}).job.job_id
        self.created.append(job_id)
        return job_id

    def deadline(self) -> datetime:
        return self.clock.now() + timedelta(minutes=5)

    def work(self, executor: Executor | None = None) -> int:
        """Deliver every visible message once to a worker; returns how many were handled."""
        executor = executor or self.executor()
        handled = 0
        for message in self.queue.receive(10):
            handled += 1
            outcome = executor.execute(message.dispatch, MemoryMessage(self.queue, message))
            if outcome.ack:
                self.queue.delete(message)
            else:
                self.queue.change_visibility(message, outcome.hide_seconds)
        return handled

    def run_until(self, end: datetime, step: float = 5.0) -> None:
        """Sweep every `step` seconds of fake time and work the queue, fault-free, until `end`."""
        sweeper = self.sweeper(f"recovery-{uuid.uuid4().hex[:6]}")
        while self.clock.now() < end:
            sweeper.sweep(self.deadline())
            while self.work():
                pass
            self.clock.advance(step)

    def quota_counter(self, tenant: str = "tenant") -> int:
        """The tenant's quota counter as the API's create check reads it."""
        if self.backend == "memory":
            return int(self.jobs.active.get(tenant, 0))
        key = {"PK": {"S": f"TENANT#{tenant}"}, "SK": {"S": "QUOTA"}}
        item = self.jobs.client.get_item(TableName=self.jobs.table, Key=key, ConsistentRead=True).get("Item", {})
        return int(item.get("active", {}).get("N", "0"))

    def can_still_fire(self) -> int:
        """The created jobs that count against the quota (ACTIVE or PAUSED)."""
        return sum(1 for job_id in self.created if counts_as_active(self.jobs.get(job_id)))

    def runs_by_key(self) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for job_id in self.created:
            job = self.jobs.get(job_id)
            at = unindexed_occurrence(job.spec.schedule, job.created_at)
            own = occurrence_key(job_id, at) if at is not None else None
            cursor = None
            while True:
                page, cursor = self.ledger.runs(job_id, 100, cursor, own)
                found.update({run.key: run for run in page})
                if not cursor:
                    break
        return found


def effects_by_job(world: CrashableCore) -> dict[str, set[str]]:
    grouped: dict[str, set[str]] = defaultdict(set)
    for key in world.sink.effects:
        grouped[key.split(":")[0]].add(key)
    return grouped
