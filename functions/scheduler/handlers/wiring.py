"""The composition root: builds the core's services from Settings, once per Lambda container."""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from botocore.config import Config

from scheduler.adapters.aws_targets import build_aws_targets
from scheduler.adapters.codec import message_key
from scheduler.adapters.dynamodb import (
    DynamoBackfillStore,
    DynamoJobStore,
    DynamoLedger,
    DynamoTenantBudgets,
    DynamoTenantSlots,
    DynamoTimerStore,
)
from scheduler.adapters.eventbridge import EventBridgePublisher
from scheduler.adapters.file_pollers import FilePollerControl
from scheduler.adapters.heartbeat import ThreadHeartbeats
from scheduler.adapters.http_target import AddressGuard, HttpTargetInvoker, check_headers
from scheduler.adapters.lambda_pollers import LambdaPollerControl
from scheduler.adapters.sqs import SqsBatchVisibility, SqsReadyQueue
from scheduler.adapters.threads import ThreadTaskPool
from scheduler.core.backfill import BackfillConfig, BackfillRunner, BackfillService
from scheduler.core.concurrency import ConcurrencyConfig, ConcurrencyGate
from scheduler.core.dispatch import DispatchConfig, Dispatcher
from scheduler.core.errors import InvalidRequest
from scheduler.core.events import Outbox
from scheduler.core.execute import ExecuteConfig, Executor
from scheduler.core.fairness import Budget, FairnessConfig, TenantAdmission
from scheduler.core.forecast import ForecastService
from scheduler.core.jobs import JobService
from scheduler.core.model import HandlerTarget, HttpTarget, JobSpec
from scheduler.core.ports import Clock, Heartbeats, PollerControl, TargetInvoker
from scheduler.core.ports import Metrics as PortMetrics
from scheduler.core.prescale import PrescaleConfig, Prescaler, WorkerCapacity
from scheduler.core.recovery import HeldBatch, HoldConfig
from scheduler.core.sweep import SweepConfig, Sweeper
from scheduler.secrets import resolve_secret
from scheduler.settings import Settings
from scheduler.signing import KeyRing
from scheduler.target_policy import PolicedInvoker, TargetPolicy
from scheduler.targets_registry import HandlerTargetInvoker, register_handler_modules, registry

#: Connections per client: enough for a worker batch's records in parallel (scheduler.handlers.worker), each
#: with a heartbeat, and for the sweeper's sends.
_BOTO_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=20, max_pool_connections=32
)


def handler_logger() -> Logger:
    """A handler's Powertools logger, with the core's stdlib loggers (`scheduler.*`) writing through it: JSON with
    their extras (job_id, occurrence_key). Without it the Lambda runtime's own handler prints them as plain
    "[LEVEL] message" lines and drops the extras (found by the deployment into ministack, tests/system/test_deploy.py).
    """
    logger = Logger()
    copy_config_to_registered_loggers(source_logger=logger, include={"scheduler"})
    return logger


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class PowertoolsMetrics:
    """The core's Metrics port on Powertools' EMF metrics (flushed by the handler decorator)."""

    _UNITS = {"Count": MetricUnit.Count, "Seconds": MetricUnit.Seconds}

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        #: A worker's records and a sweep's buckets count from their own threads; Powertools' metric set is a
        #: plain dict of lists.
        self._lock = threading.Lock()

    def count(self, name: str, value: float = 1, unit: str = "Count") -> None:
        with self._lock:
            self.metrics.add_metric(name=name, unit=self._UNITS.get(unit, MetricUnit.Count), value=value)


@dataclass(frozen=True)
class Clients:
    """The AWS clients the services use (endpoints from AWS_ENDPOINT_URL_*); injected by the benchmarks, which
    meter them."""

    dynamodb: Any
    sqs: Any
    #: EventBridge, for completion events (None when they are off).
    events: Any | None

    @classmethod
    def default(cls, events: bool) -> Clients:
        def make(service: str) -> Any:
            return boto3.client(service, config=_BOTO_CONFIG)  # type: ignore[call-overload]

        return cls(make("dynamodb"), make("sqs"), make("events") if events else None)


@dataclass
class Container:
    settings: Settings
    clock: Clock
    metrics: PortMetrics
    jobs: DynamoJobStore
    timers: DynamoTimerStore
    ledger: DynamoLedger
    queue: SqsReadyQueue
    dispatcher: Dispatcher
    outbox: Outbox | None = None
    backfills: DynamoBackfillStore | None = None
    #: Per-tenant execution budgets (None: off).
    gate: ConcurrencyGate | None = None
    #: The worker mappings' pollers (pre-scaling); None: built on first use from the settings.
    poller_control: PollerControl | None = None
    #: Lease heartbeats and batch-hold renewals in the background.
    heartbeats: Heartbeats = field(default_factory=ThreadHeartbeats)

    @property
    def message_key(self) -> bytes:
        """The key that authenticates dispatch messages (the queue's, which signs every body it sends)."""
        return self.queue.message_key

    @functools.cached_property
    def key_ring(self) -> KeyRing:
        """The signature v2 root keys (resolved once per container)."""
        return KeyRing.parse(resolve_secret(self.settings, "signing_keys"))

    @functools.cached_property
    def target_policy(self) -> TargetPolicy:
        return TargetPolicy.of(self.settings)

    @property
    def backfill_config(self) -> BackfillConfig:
        return BackfillConfig(
            max_occurrences=self.settings.backfill_max_occurrences, wave_size=self.settings.backfill_wave_size
        )

    def backfill_service(self) -> BackfillService:
        assert self.backfills is not None
        return BackfillService(self.jobs, self.backfills, self.clock, self.backfill_config)

    @property
    def guard(self) -> AddressGuard:
        return AddressGuard(self.settings.allow_private_targets)

    def job_service(self) -> JobService:
        return JobService(
            self.jobs,
            self.ledger,
            self.dispatcher,
            self.clock,
            max_active_jobs=self.settings.max_active_jobs_per_tenant,
            check_target=self.check_target,
            outbox=self.outbox,
        )

    def check_target(self, tenant: str, spec: JobSpec) -> None:
        """Submit-time checks of a target: the SSRF guard, the target policy (the scheduler's own resources, the
        tenant's allow-list), and that a handler target names a registered handler."""
        self.guard.check_spec(spec)
        check_headers(spec)
        limit = self.settings.max_target_timeout_seconds
        if isinstance(spec.target, HttpTarget) and spec.target.timeout_seconds > limit:
            raise InvalidRequest(
                f"timeout_seconds may be at most {limit} (the worker must outlive the call to record its outcome)",
                field="target.timeout_seconds",
            )
        self.target_policy.check_spec(tenant, spec)
        register_handler_modules(self.settings.handler_modules)
        if isinstance(spec.target, HandlerTarget) and registry.lookup(spec.target.name) is None:
            known = ", ".join(sorted(registry.names())) or "none"
            raise InvalidRequest(
                f"no handler named '{spec.target.name}' is registered in the worker (registered: {known})",
                field="target.name",
            )

    def forecast_service(self) -> ForecastService:
        """The forecast reads the window's buckets and those the look-ahead may already have sent from (the
        look-ahead, a bucket minute and the seal margin before the window)."""
        lookback = timedelta(seconds=self.settings.lookahead_seconds + 60 + 30)
        return ForecastService(self.timers, self.clock, lookback, self.metrics)

    def prescaler(self) -> Prescaler:
        """The pre-scaler of the worker mappings named in the settings (Lambda's API unless a control was given)."""
        s = self.settings
        if self.poller_control is None and s.prescale_state_file:
            self.poller_control = FilePollerControl(Path(s.prescale_state_file))
        if self.poller_control is None:
            client = boto3.client("lambda", config=_BOTO_CONFIG)
            self.poller_control = LambdaPollerControl(client, s.prescale_mappings, s.prescale_maximum_pollers)
        capacity = WorkerCapacity(
            s.prescale_seconds_per_occurrence,
            target_start_seconds=s.prescale_target_start_seconds,
            ceiling_pollers=s.prescale_ceiling_pollers,
        )
        config = PrescaleConfig(capacity, lead=timedelta(seconds=s.prescale_lead_seconds))
        return Prescaler(self.poller_control, config, self.metrics)

    def sweeper(self, owner: str) -> Sweeper:
        s = self.settings
        config = SweepConfig(
            shard_count=s.shard_count,
            lookahead=timedelta(seconds=s.lookahead_seconds),
            bucket_lease=timedelta(seconds=s.bucket_lease_seconds),
            dispatch_budget=s.dispatch_budget,
            safety=timedelta(seconds=s.sweep_safety_seconds),
        )
        runner = None
        if self.backfills is not None:
            runner = BackfillRunner(
                self.backfills, self.jobs, self.dispatcher, self.clock, self.backfill_config, self.metrics
            )
        pool = ThreadTaskPool(min(s.sweep_concurrency, s.shard_count), name="bucket")
        return Sweeper(
            self.timers,
            self.dispatcher,
            self.clock,
            config,
            self.metrics,
            owner,
            outbox=self.outbox,
            backfills=runner,
            pool=pool,
        )

    @property
    def hold_config(self) -> HoldConfig:
        return HoldConfig()

    def held_batch(self, messages: Mapping[str, tuple[str, str]], keys: Mapping[str, str | None]) -> HeldBatch:
        """A received batch (message id -> (queue URL, receipt handle)), held for the hold time while the worker
        lives (renewed in the background)."""
        visibility = SqsBatchVisibility(self.queue.client, messages)
        return HeldBatch(visibility, keys, self.hold_config, self.metrics, self.heartbeats)

    def executor(self, worker_id: str) -> Executor:
        """The executor of this container (built once: it resolves the signing secret)."""
        cached: Executor | None = getattr(self, "_executor", None)
        if cached is None:
            cached = self.new_executor(worker_id)
            self._executor = cached
        return cached

    def new_executor(
        self,
        worker_id: str,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        targets: Mapping[str, TargetInvoker] | None = None,
    ) -> Executor:
        """An executor; `clock`, `sleep` and `targets` default to the real ones (every target type)."""
        if targets is None:
            s = self.settings
            register_handler_modules(s.handler_modules)
            v1_secret = resolve_secret(s, "signing_secret") if s.signature_v1 else None
            targets = {
                "http": HttpTargetInvoker(self.guard, self.key_ring, v1_secret, s.max_target_timeout_seconds),
                **{
                    kind: PolicedInvoker(self.target_policy, invoker)
                    for kind, invoker in {
                        **build_aws_targets(_BOTO_CONFIG, s.target_role_arn, s.max_target_timeout_seconds),
                        "handler": HandlerTargetInvoker(),
                    }.items()
                },
            }
        config = ExecuteConfig(
            lease=timedelta(seconds=self.settings.lease_seconds),
            events_by_default=self.settings.completion_events_default,
            misfire_grace=timedelta(seconds=self.settings.misfire_grace_seconds),
        )
        return Executor(
            self.jobs,
            self.ledger,
            self.queue,
            targets,
            clock or self.clock,
            config,
            self.metrics,
            worker_id,
            sleep=sleep,
            outbox=self.outbox,
            gate=self.gate,
            heartbeats=self.heartbeats,
        )


def build(
    settings: Settings,
    metrics: Metrics | PortMetrics,
    *,
    clients: Clients | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] | None = None,
) -> Container:
    """Every service, from `settings`: on the default AWS clients, the system clock and real sleeps unless given
    others (the benchmarks meter their clients and run on a virtual clock, whose sleeps must move it)."""
    clients = clients or Clients.default(events=settings.completion_events)
    dynamodb, sqs = clients.dynamodb, clients.sqs
    clock = clock or SystemClock()
    port_metrics: PortMetrics = PowertoolsMetrics(metrics) if isinstance(metrics, Metrics) else metrics
    jobs = DynamoJobStore(settings.jobs_table, settings.shard_count, dynamodb)
    timers = DynamoTimerStore(settings.jobs_table, settings.shard_count, dynamodb)
    ledger = DynamoLedger(settings.executions_table, dynamodb)
    lanes = {"high": settings.ready_queue_high_url, "low": settings.ready_queue_low_url}
    key = message_key(resolve_secret(settings, "message_secret"))
    queue = SqsReadyQueue(settings.ready_queue_url, settings.dlq_url, sqs, lanes=lanes, message_key=key)
    dispatch_config = DispatchConfig(
        lookahead=timedelta(seconds=settings.lookahead_seconds),
        misfire_grace=timedelta(seconds=settings.misfire_grace_seconds),
        catchup_window=timedelta(seconds=settings.catchup_window_seconds),
    )
    admission = None
    if settings.tenant_dispatch_rate > 0:
        fairness = FairnessConfig(
            Budget(settings.tenant_dispatch_rate, settings.tenant_dispatch_burst),
            {
                tenant: Budget(b.rate or settings.tenant_dispatch_rate, b.burst or settings.tenant_dispatch_burst)
                for tenant, b in settings.tenant_budgets.items()
                if b.rate is not None or b.burst is not None
            },
        )
        admission = TenantAdmission(DynamoTenantBudgets(settings.jobs_table, dynamodb), clock, fairness, port_metrics)
    dispatcher = Dispatcher(
        jobs, timers, queue, clock, dispatch_config, port_metrics, admission=admission, sleep=sleep or time.sleep
    )
    outbox = None
    if settings.completion_events:
        outbox = Outbox(ledger, EventBridgePublisher(settings.event_bus_name, clients.events), port_metrics)
    backfills = DynamoBackfillStore(settings.jobs_table, dynamodb)
    gate = None
    if settings.tenant_max_concurrency > 0 or any(b.concurrency for b in settings.tenant_budgets.values()):
        concurrency = ConcurrencyConfig(
            settings.tenant_max_concurrency,
            {t: b.concurrency for t, b in settings.tenant_budgets.items() if b.concurrency is not None},
        )
        gate = ConcurrencyGate(DynamoTenantSlots(settings.jobs_table, dynamodb), concurrency, port_metrics)
    return Container(settings, clock, port_metrics, jobs, timers, ledger, queue, dispatcher, outbox, backfills, gate)


@functools.cache
def container(metrics: Metrics) -> Container:
    """One container per Lambda execution environment (clients are reused across invocations)."""
    return build(Settings(), metrics)


def instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
