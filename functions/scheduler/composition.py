"""The composition root for any backend: the core's services from Settings and a set of stores.

`compose(settings, stores, clock, ids, metrics)` wires what every deployment shares (the dispatcher with its tenant
admission, the outbox, the execution budgets, the job and backfill services, the sweeper, the executor, a
worker's batch hold) over whatever implements the core's ports. The Lambda handlers compose it over DynamoDB and
SQS (`scheduler.handlers.wiring.build`); the unit fixtures, the protocol tests and the simulator over memory (or
fault-injecting) stores (`memory_stores` makes them, wired as they share tables in DynamoDB). What Settings
cannot say (the simulator's seal margin, a test's short sweep safety) is a `Configs` derived from them and changed
where needed.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from scheduler.adapters.memory import (
    MemoryBackfillStore,
    MemoryEventPublisher,
    MemoryFlowControls,
    MemoryJobStore,
    MemoryLedger,
    MemoryOperationStore,
    MemoryQueue,
    MemoryRequestWindows,
    MemoryTenantBudgets,
    MemoryTenantSlots,
    MemoryTimerStore,
    Snapshot,
)
from scheduler.core.capacity.forecast import ForecastService
from scheduler.core.execution.events import Outbox
from scheduler.core.execution.executor import ExecuteConfig, Executor
from scheduler.core.execution.packing import MessageRunner, PackingConfig
from scheduler.core.execution.recovery import HeldBatch, HoldConfig
from scheduler.core.jobs.backfill import BackfillService
from scheduler.core.jobs.bulk import BulkService, OperationStore
from scheduler.core.jobs.reads import JobReads
from scheduler.core.jobs.resolution import Resolution
from scheduler.core.jobs.service import JobService
from scheduler.core.jobs.signing_keys import KeyRotation
from scheduler.core.model.job import JobSpec
from scheduler.core.ports import (
    BackfillStore,
    BatchVisibility,
    Clock,
    Dispatch,
    EventPublisher,
    FlowControlStore,
    Heartbeats,
    Ids,
    JobStore,
    Ledger,
    Metrics,
    ReadyQueue,
    SecretSealer,
    TargetInvoker,
    TaskPool,
    TenantBudgetStore,
    TenantSlots,
    TimerStore,
)
from scheduler.core.runtime.tasks import InOrder
from scheduler.core.sweep.backfill import BackfillConfig, BackfillRunner
from scheduler.core.sweep.dispatch import DispatchConfig, Dispatcher
from scheduler.core.sweep.sweeper import SweepConfig, Sweeper
from scheduler.core.tenancy.concurrency import ConcurrencyConfig, ConcurrencyGate
from scheduler.core.tenancy.fairness import Budget, FairnessConfig, TenantAdmission
from scheduler.core.tenancy.flow_control import FlowKeys
from scheduler.core.tenancy.per_tenant import PerTenant
from scheduler.core.tenancy.request_limits import RequestGate, RequestLimitConfig, RequestWindows
from scheduler.settings import Settings


@dataclass(frozen=True)
class Stores:
    """What the core reads and writes, one implementation of each port. A mechanism whose store is missing is off:
    no `backfills`, no backfill waves; no `events`, no completion events; no `tenant_budgets` or `tenant_slots`,
    no dispatch or execution budgets (whatever the settings say)."""

    jobs: JobStore
    timers: TimerStore
    ledger: Ledger
    queue: ReadyQueue
    backfills: BackfillStore | None = None
    tenant_budgets: TenantBudgetStore | None = None
    tenant_slots: TenantSlots | None = None
    events: EventPublisher | None = None
    request_windows: RequestWindows | None = None
    #: Bulk actions' progress (`scheduler.core.jobs.bulk`); None: no bulk actions.
    operations: OperationStore | None = None
    #: Each tenant's running bulk actions (`BulkService.max_running`); None: no limit on them.
    bulk_slots: TenantSlots | None = None
    #: Flow-control keys (`scheduler.core.tenancy.flow_control`) and their slots; either None: no flow control (a
    #: job naming a key is refused).
    flow_controls: FlowControlStore | None = None
    flow_slots: TenantSlots | None = None


@dataclass(frozen=True)
class MemoryStores(Stores):
    """Every store in memory (`memory_stores`), typed as what they are so that a test can read their state."""

    jobs: MemoryJobStore
    timers: MemoryTimerStore
    ledger: MemoryLedger
    queue: ReadyQueue
    backfills: MemoryBackfillStore
    tenant_budgets: MemoryTenantBudgets
    tenant_slots: MemoryTenantSlots
    events: MemoryEventPublisher
    request_windows: MemoryRequestWindows
    operations: MemoryOperationStore
    bulk_slots: MemoryTenantSlots
    flow_controls: MemoryFlowControls
    flow_slots: MemoryTenantSlots


def memory_stores(
    clock: Clock,
    shard_count: int = 1,
    *,
    queue: ReadyQueue | None = None,
    timers: Callable[[int], MemoryTimerStore] = MemoryTimerStore,
    jobs: Callable[[MemoryTimerStore], MemoryJobStore] = MemoryJobStore,
    ledger: Callable[[Snapshot], MemoryLedger] = MemoryLedger,
    snapshot: Snapshot = copy.deepcopy,
) -> MemoryStores:
    """Every store in memory, wired as they share tables in DynamoDB: the job store writes its timers into the timer
    store, whose sweeps release its tenants' quota. `queue` defaults to a `MemoryQueue` on `clock`; `timers` and
    `jobs` make the two wired stores and `ledger` the ledger (a subclass of any, such as a simulator's broken variant);
    `snapshot` is how the ledger copies the items it hands out."""
    timer_store = timers(shard_count)
    return MemoryStores(
        jobs=jobs(timer_store),
        timers=timer_store,
        ledger=ledger(snapshot),
        queue=queue if queue is not None else MemoryQueue(clock),
        backfills=MemoryBackfillStore(),
        tenant_budgets=MemoryTenantBudgets(),
        tenant_slots=MemoryTenantSlots(),
        events=MemoryEventPublisher(),
        request_windows=MemoryRequestWindows(),
        operations=MemoryOperationStore(),
        bulk_slots=MemoryTenantSlots(),
        flow_controls=MemoryFlowControls(),
        flow_slots=MemoryTenantSlots(),
    )


def fairness_of(settings: Settings) -> FairnessConfig | None:
    """The tenants' dispatch budgets (None: off, a rate of 0)."""
    if settings.tenant_dispatch_rate <= 0:
        return None
    rate, burst = settings.tenant_dispatch_rate, settings.tenant_dispatch_burst
    return FairnessConfig(
        Budget(rate, burst),
        {
            tenant: Budget(b.rate or rate, b.burst or burst)
            for tenant, b in settings.tenant_budgets.items()
            if b.rate is not None or b.burst is not None
        },
    )


def request_limits_of(settings: Settings) -> RequestLimitConfig | None:
    """The tenants' API request limits (None: off, a rate of 0 and no tenant of its own)."""
    per_tenant = {tenant: b.requests for tenant, b in settings.tenant_budgets.items() if b.requests is not None}
    if settings.tenant_request_rate <= 0 and not any(per_tenant.values()):
        return None
    rates = PerTenant(settings.tenant_request_rate, per_tenant)
    return RequestLimitConfig(rates, settings.tenant_request_window_seconds)


def packing_of(settings: Settings) -> PackingConfig:
    """How occurrences share ready-queue messages (every queue adapter packs by it)."""
    return PackingConfig(settings.occurrences_per_message)


def concurrency_of(settings: Settings) -> ConcurrencyConfig | None:
    """The tenants' execution slots (None: off, no limit anywhere)."""
    budgets = settings.tenant_budgets
    if settings.tenant_max_concurrency <= 0 and not any(b.concurrency for b in budgets.values()):
        return None
    overrides = {tenant: b.concurrency for tenant, b in budgets.items() if b.concurrency is not None}
    return ConcurrencyConfig(settings.tenant_max_concurrency, overrides)


@dataclass(frozen=True)
class Configs:
    """The core's configuration, derived from Settings (`Configs.of`)."""

    dispatch: DispatchConfig
    sweep: SweepConfig
    execute: ExecuteConfig
    backfill: BackfillConfig
    hold: HoldConfig
    packing: PackingConfig
    fairness: FairnessConfig | None
    concurrency: ConcurrencyConfig | None
    max_active_jobs: int
    #: How far before its window the forecast reads buckets (the look-ahead may already have sent from them).
    forecast_lookback: timedelta

    @classmethod
    def of(cls, settings: Settings) -> Configs:
        s = settings
        lookahead = timedelta(seconds=s.lookahead_seconds)
        misfire_grace = timedelta(seconds=s.misfire_grace_seconds)
        # A minute's buckets swept at once wait for their landings at the same time: land every page.
        at_once = min(s.sweep_concurrency, s.shard_count) > 1
        return cls(
            dispatch=DispatchConfig(
                lookahead,
                misfire_grace,
                timedelta(seconds=s.catchup_window_seconds),
                landing_min_messages=1 if at_once else DispatchConfig.landing_min_messages,
            ),
            sweep=SweepConfig(
                shard_count=s.shard_count,
                lookahead=lookahead,
                bucket_lease=timedelta(seconds=s.bucket_lease_seconds),
                dispatch_budget=s.dispatch_budget,
                safety=timedelta(seconds=s.sweep_safety_seconds),
            ),
            execute=ExecuteConfig(
                lease=timedelta(seconds=s.lease_seconds),
                events_by_default=s.completion_events_default,
                misfire_grace=misfire_grace,
            ),
            backfill=BackfillConfig(max_occurrences=s.backfill_max_occurrences, wave_size=s.backfill_wave_size),
            hold=HoldConfig(),
            packing=packing_of(s),
            fairness=fairness_of(s),
            concurrency=concurrency_of(s),
            max_active_jobs=s.max_active_jobs_per_tenant,
            # the look-ahead, a bucket minute and the seal margin
            forecast_lookback=timedelta(seconds=s.lookahead_seconds + 60 + 30),
        )


def _any_target(tenant: str, spec: JobSpec) -> None:
    return None


@dataclass(frozen=True)
class Container:
    """The core's services over one set of stores (see `compose`); a variant of it is a `dataclasses.replace`."""

    settings: Settings
    configs: Configs
    stores: Stores
    clock: Clock
    metrics: Metrics
    ids: Ids
    dispatcher: Dispatcher
    #: Every wait the core makes (a worker's for a fire time under `early_wait_max` away, a sweep's landing).
    sleep: Callable[[float], None]
    heartbeats: Heartbeats | None = None
    outbox: Outbox | None = None
    #: Per-tenant execution budgets (None: off).
    gate: ConcurrencyGate | None = None
    #: Submit-time checks of a job's target (the deployment's SSRF guard and target policy).
    check_target: Callable[[str, JobSpec], None] = field(default=_any_target)
    #: Runs a sweep's buckets of one minute (at once in threads when deployed; in turn by default).
    pool: TaskPool = field(default_factory=InOrder)
    #: Seals secret header values at rest (None: stored as given; `scheduler.handlers.wiring` always sets one).
    sealer: SecretSealer | None = None
    #: Flow-control keys (None: off, no store for them).
    flow: FlowKeys | None = None

    def request_gate(self) -> RequestGate | None:
        """The tenants' API request limits (None: off, or no store for the counts)."""
        limits = request_limits_of(self.settings)
        if limits is None or self.stores.request_windows is None:
            return None
        return RequestGate(self.stores.request_windows, self.clock, limits, self.metrics)

    def job_service(self) -> JobService:
        return JobService(
            self.stores.jobs,
            self.stores.ledger,
            self.dispatcher,
            self.clock,
            max_active_jobs=self.configs.max_active_jobs,
            check_target=self.check_target,
            ids=self.ids,
            sealer=self.sealer,
            flow=self.flow,
        )

    def job_reads(self) -> JobReads:
        return JobReads(self.stores.jobs, self.stores.ledger, self.clock)

    def key_rotation(self) -> KeyRotation:
        return KeyRotation(self.job_service(), self.clock)

    def resolution(self) -> Resolution:
        """An operator's resolve; its outcome's completion event is published at once, as the worker's are."""
        return Resolution(
            self.stores.jobs, self.stores.ledger, self.dispatcher.queue, self.clock, self.outbox, self.flow
        )

    def backfill_service(self, config: BackfillConfig | None = None) -> BackfillService:
        assert self.stores.backfills is not None, "no backfill store"
        return BackfillService(
            self.stores.jobs, self.stores.backfills, self.clock, config or self.configs.backfill, ids=self.ids
        )

    def backfill_runner(self, config: BackfillConfig | None = None) -> BackfillRunner | None:
        """The sweeper's backfill waves (None without a backfill store)."""
        if self.stores.backfills is None:
            return None
        config = config or self.configs.backfill
        return BackfillRunner(
            self.stores.backfills, self.stores.jobs, self.dispatcher, self.clock, config, self.metrics
        )

    def bulk_service(self) -> BulkService:
        assert self.stores.operations is not None, "no operation store"
        return BulkService(
            self.job_service(),
            self.stores.operations,
            self.clock,
            requests=self.request_gate(),
            slots=self.stores.bulk_slots,
            max_running=self.settings.bulk_max_running,
        )

    def forecast_service(self) -> ForecastService:
        return ForecastService(self.stores.timers, self.clock, self.configs.forecast_lookback, self.metrics)

    def sweeper(
        self,
        owner: str,
        *,
        config: SweepConfig | None = None,
        backfills: BackfillRunner | None = None,
        pool: TaskPool | None = None,
    ) -> Sweeper:
        """A sweeper invocation's sweeper; `backfills` and `pool` default to the container's."""
        return Sweeper(
            self.stores.timers,
            self.dispatcher,
            self.clock,
            config or self.configs.sweep,
            self.metrics,
            owner,
            outbox=self.outbox,
            backfills=backfills or self.backfill_runner(),
            pool=pool or self.pool,
        )

    def executor(
        self,
        worker_id: str,
        targets: Mapping[str, TargetInvoker],
        *,
        config: ExecuteConfig | None = None,
        clock: Clock | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> Executor:
        """An executor of `targets` (by target type); `clock` and `sleep` default to the container's."""
        return Executor(
            self.stores.jobs,
            self.stores.ledger,
            self.stores.queue,
            targets,
            clock or self.clock,
            config or self.configs.execute,
            self.metrics,
            worker_id,
            sleep=sleep or self.sleep,
            outbox=self.outbox,
            gate=self.gate,
            flow=self.flow,
            ids=self.ids,
            heartbeats=self.heartbeats,
        )

    def message_runner(
        self,
        executor: Executor,
        *,
        pool: TaskPool | None = None,
        bind: Callable[[Dispatch], None] | None = None,
    ) -> MessageRunner:
        """Runs the occurrences of one ready-queue message through `executor` (in turn unless `pool` is given;
        `bind` is called in each occurrence's thread before it runs)."""
        return MessageRunner(executor, self.stores.queue, executor.clock, self.metrics, pool or InOrder(), bind)

    def held_batch(self, visibility: BatchVisibility, keys: Mapping[str, str | None]) -> HeldBatch:
        """A received batch, held for the hold time while the worker lives (renewed by the heartbeats)."""
        return HeldBatch(visibility, keys, self.configs.hold, self.metrics, self.heartbeats)


def compose(
    settings: Settings,
    stores: Stores,
    clock: Clock,
    ids: Ids,
    metrics: Metrics,
    *,
    configs: Configs | None = None,
    sleep: Callable[[float], None] = time.sleep,
    heartbeats: Heartbeats | None = None,
    check_target: Callable[[str, JobSpec], None] = _any_target,
    pool: TaskPool | None = None,
    sealer: SecretSealer | None = None,
) -> Container:
    """The core's services over `stores`, configured by `settings` (or by `configs`, derived from them).

    `sleep` is every wait the core makes (a worker waiting out a fire time under a second away, a sweep landing a
    page on time: set `configs.dispatch.landing_window` to None to send at once); `heartbeats` extend leases and
    renew batch holds (needed unless `configs.execute` and `configs.hold` never beat); `pool` runs a sweep's buckets
    of one minute (in turn unless given)."""
    configs = configs or Configs.of(settings)
    admission = None
    if configs.fairness is not None and stores.tenant_budgets is not None:
        admission = TenantAdmission(stores.tenant_budgets, clock, configs.fairness, metrics)
    flow = None
    if stores.flow_controls is not None and stores.flow_slots is not None:
        flow = FlowKeys(stores.flow_controls, stores.flow_slots, clock, metrics)
    dispatcher = Dispatcher(
        stores.jobs,
        stores.timers,
        stores.queue,
        clock,
        configs.dispatch,
        metrics,
        admission=admission,
        flow=flow,
        sleep=sleep,
    )
    outbox = None
    if settings.completion_events and stores.events is not None:
        outbox = Outbox(stores.ledger, stores.events, metrics, clock)
    gate = None
    if configs.concurrency is not None and stores.tenant_slots is not None:
        gate = ConcurrencyGate(stores.tenant_slots, configs.concurrency, metrics)
    return Container(
        settings,
        configs,
        stores,
        clock,
        metrics,
        ids,
        dispatcher,
        sleep,
        heartbeats,
        outbox,
        gate,
        check_target,
        pool or InOrder(),
        sealer,
        flow,
    )
