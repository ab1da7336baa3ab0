"""The deployed composition root: the core's services composed (`scheduler.composition.compose`) over DynamoDB and
SQS from Settings, once per Lambda container, with what only AWS has beside them."""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, cast

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers
from aws_lambda_powertools.metrics import MetricUnit
from botocore.config import Config

from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.aws_targets import build_aws_targets
from scheduler.adapters.clock import SystemClock
from scheduler.adapters.dispatch_message import message_key
from scheduler.adapters.dynamodb import (
    DynamoBackfillStore,
    DynamoFanOutStore,
    DynamoFlowControls,
    DynamoJobStore,
    DynamoLedger,
    DynamoOperationStore,
    DynamoRequestWindows,
    DynamoTenantBudgets,
    DynamoTenantSlots,
    DynamoTimerStore,
    ShardCountRecord,
)
from scheduler.adapters.eventbridge import EventBridgePublisher
from scheduler.adapters.fast_calls import fast_calls
from scheduler.adapters.file_pollers import FilePollerControl
from scheduler.adapters.heartbeat import ThreadHeartbeats
from scheduler.adapters.http_target import HttpTargetInvoker, check_headers
from scheduler.adapters.lambda_pollers import LambdaPollerControl
from scheduler.adapters.sealing import KmsSealer, LocalSealer
from scheduler.adapters.sqs import SqsBatchVisibility, SqsReadyQueue
from scheduler.adapters.sweep_launchers import LambdaSweepLauncher, ProcessSweepLauncher
from scheduler.adapters.threads import ThreadTaskPool
from scheduler.composition import Configs, Container, Stores, compose, packing_of
from scheduler.core.capacity.fan_out import FanOut, FanOutConfig
from scheduler.core.capacity.prescale import PrescaleConfig, Prescaler, WorkerCapacity
from scheduler.core.errors import InvalidRequest
from scheduler.core.execution.executor import Executor
from scheduler.core.execution.recovery import HeldBatch
from scheduler.core.model.job import HandlerTarget, HttpTarget, JobSpec
from scheduler.core.ports import Clock, PollerControl, SecretSealer, SweepLauncher, TargetInvoker
from scheduler.core.ports import Metrics as PortMetrics
from scheduler.core.runtime.ids import RANDOM_IDS
from scheduler.security.secrets import resolve_secret
from scheduler.security.signing import KeyRing
from scheduler.settings import Settings
from scheduler.targets.policy import PolicedInvoker, TargetPolicy
from scheduler.targets.registry import HandlerTargetInvoker, register_handler_modules, registry

#: Connections per client: enough for a worker batch's records in parallel (scheduler.handlers.worker), each
#: with a heartbeat, and for the sweeper's sends.
_BOTO_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=20, max_pool_connections=32
)

#: The lease's renewals - the ledger's heartbeat, the execution slot's extension, the message's visibility - go
#: through clients of their own that give up fast: a renewal may land up to two heartbeat periods late before the
#: lease ends (docs/reliability.md), and the clients above would wait 20 s on one hung connection before retrying.
#: Here a hung request costs one beat, not the lease (`worst_request_seconds`).
_RENEWAL_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 2}, connect_timeout=1, read_timeout=2, max_pool_connections=32
)


def worst_request_seconds(config: Config) -> float:
    """The longest one request can take under `config` before it fails: each attempt's connect and read timeouts,
    and botocore's standard backoff before each retry (for a throttled request at most 1 s before the first retry,
    doubling for each next one). (botocore's `max_attempts` counts the retries, `total_max_attempts` the first
    request too.)"""
    options: Any = config  # (its attributes are set from keyword arguments: the stubs do not know them)
    retries = options.retries
    attempts = int(retries["total_max_attempts"] if "total_max_attempts" in retries else retries["max_attempts"] + 1)
    per_attempt = float(options.connect_timeout + options.read_timeout)
    return attempts * per_attempt + float(sum(2**i for i in range(attempts - 1)))


#: What Powertools puts on every line that the log group already says (the function's name, memory and ARN) or
#: that the message tells well enough (the code's location; an exception's line keeps its stack trace): left out,
#: for they were 40 % of an occurrence's line, and CloudWatch Logs bills every byte (docs/cost.md).
REDUNDANT_LOG_KEYS = ("function_name", "function_memory_size", "function_arn", "location")

Handler = TypeVar("Handler", bound=Callable[..., Any])


def lambda_context(logger: Logger, **options: Any) -> Callable[[Handler], Handler]:
    """`@logger.inject_lambda_context(**options)` (cold start and request id on every line), less
    REDUNDANT_LOG_KEYS."""

    def decorate(handler: Handler) -> Handler:
        @functools.wraps(handler)
        def lean(event: Any, context: Any) -> Any:
            logger.remove_keys(list(REDUNDANT_LOG_KEYS))
            return handler(event, context)

        return cast(Handler, logger.inject_lambda_context(lean, **options))

    return decorate


def handler_logger() -> Logger:
    """A handler's Powertools logger, with the core's stdlib loggers (`scheduler.*`) writing through it: JSON with
    their extras (job_id, occurrence_key). Without it the Lambda runtime's own handler prints them as plain
    "[LEVEL] message" lines and drops the extras (tests/system/test_deploy.py checks it on the deployed stack).
    """
    logger = Logger()
    copy_config_to_registered_loggers(source_logger=logger, include={"scheduler"})
    return logger


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
    #: What the lease's renewals go through (`RenewalClient`s in the functions); None: `dynamodb` and `sqs`.
    renewal_dynamodb: Any | None = None
    renewal_sqs: Any | None = None

    @classmethod
    def default(cls, events: bool) -> Clients:
        return cls(
            aws_client("dynamodb"),
            aws_client("sqs"),
            aws_client("events") if events else None,
            RenewalClient("dynamodb"),
            RenewalClient("sqs"),
        )


class RenewalClient:
    """A client of `service` with `_RENEWAL_CONFIG`, made on first use: only a worker whose target outlasts a
    heartbeat's period renews a lease, so no other function (and no short call) pays for making it."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.config = _RENEWAL_CONFIG
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        with self._lock:  # the heartbeats of a batch's records run on threads of their own
            if self._client is None:
                self._client = boto3.client(self.service, config=self.config)  # type: ignore[call-overload]
            return self._client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def aws_client(service: str) -> Any:
    """A client of `service` with the functions' timeouts and retries (endpoints from AWS_ENDPOINT_URL_*)."""
    return boto3.client(service, config=_BOTO_CONFIG)  # type: ignore[call-overload]


def sealer_of(settings: Settings, message_key: bytes) -> SecretSealer:
    """What seals jobs' secret header values: KMS when the stack names a key, else a key derived from the message
    secret (through the message key: no second read of the secret)."""
    if settings.header_key_id:
        return KmsSealer(settings.header_key_id, aws_client("kms"))
    return LocalSealer(message_key.hex())


@dataclass(frozen=True)
class TargetChecks:
    """Submit-time checks of a target (the core's `check_target`): the SSRF guard, the target policy (the
    scheduler's own resources, the tenant's allow-list), and that a handler target names a registered handler."""

    settings: Settings

    @functools.cached_property
    def policy(self) -> TargetPolicy:
        """The target policy (made once per container; the executor's targets are policed by it too)."""
        return TargetPolicy.of(self.settings)

    @property
    def guard(self) -> AddressGuard:
        return AddressGuard.of(self.settings)

    def __call__(self, tenant: str, spec: JobSpec) -> None:
        self.guard.check_spec(spec)
        check_headers(spec)
        limit = self.settings.max_target_timeout_seconds
        if isinstance(spec.target, HttpTarget) and spec.target.timeout_seconds > limit:
            raise InvalidRequest(
                f"timeout_seconds may be at most {limit} (the worker must outlive the call to record its outcome)",
                field="target.timeout_seconds",
            )
        self.policy.check_spec(tenant, spec)
        register_handler_modules(self.settings.handler_modules)
        if isinstance(spec.target, HandlerTarget) and registry.lookup(spec.target.name) is None:
            known = ", ".join(sorted(registry.names())) or "none"
            raise InvalidRequest(
                f"no handler named '{spec.target.name}' is registered in the worker (registered: {known})",
                field="target.name",
            )


@dataclass
class AwsContainer:
    """The deployed services: the core's, composed over DynamoDB and SQS (`core`, with `checks` as its submit-time
    target checks), and what only a deployment on AWS has: the SQS ready queue itself (its client, its message key),
    the functions' secrets, the targets they call, the worker mappings' pollers."""

    core: Container
    queue: SqsReadyQueue
    checks: TargetChecks
    #: The AWS clients the stores use (the operator's view reads the queues and the jobs table through them too).
    clients: Clients
    #: The worker mappings' pollers (pre-scaling); None: built on first use from the settings.
    poller_control: PollerControl | None = None
    #: How a tick starts its fan-out sweeps; None: built on first use (the sweeper function itself on Lambda, a
    #: process locally).
    sweep_launcher: SweepLauncher | None = None

    @property
    def message_key(self) -> bytes:
        """The key that authenticates dispatch messages (the queue's, which signs every body it sends)."""
        return self.queue.message_key

    @functools.cached_property
    def key_ring(self) -> KeyRing:
        """The signature v2 root keys (resolved once per container)."""
        return KeyRing.parse(resolve_secret(self.core.settings, "signing_keys"))

    @property
    def target_policy(self) -> TargetPolicy:
        return self.checks.policy

    @property
    def guard(self) -> AddressGuard:
        return self.checks.guard

    def prescaler(self) -> Prescaler:
        """The pre-scaler of the worker mappings named in the settings (Lambda's API unless a control was given)."""
        s = self.core.settings
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
        return Prescaler(self.poller_control, config, self.core.metrics)

    def fan_out(self) -> FanOut:
        """The sweeper's fan-out (scheduler.core.capacity.fan_out), its record in the jobs table."""
        s = self.core.settings
        if self.sweep_launcher is None:
            function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME")
            if function_name and not s.local_mode:
                self.sweep_launcher = LambdaSweepLauncher(
                    lambda: boto3.client("lambda", config=_BOTO_CONFIG), function_name
                )
            else:
                self.sweep_launcher = ProcessSweepLauncher()
        config = FanOutConfig(s.fan_out_max_sweeps, s.dispatch_budget, timedelta(seconds=s.lookahead_seconds))
        store = DynamoFanOutStore(s.jobs_table, self.clients.dynamodb)
        return FanOut(store, self.sweep_launcher, self.core.clock, self.core.metrics, config)

    def held_batch(self, messages: Mapping[str, tuple[str, str]], keys: Mapping[str, str | None]) -> HeldBatch:
        """A received batch (message id -> (queue URL, receipt handle)), held for the hold time while the worker
        lives (renewed in the background)."""
        return self.core.held_batch(SqsBatchVisibility(self.queue.client, messages), keys)

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
            s = self.core.settings
            register_handler_modules(s.handler_modules)
            v1_secret = resolve_secret(s, "signing_secret") if s.signature_v1 else None
            targets = {
                "http": HttpTargetInvoker(
                    self.guard,
                    self.key_ring,
                    v1_secret,
                    s.max_target_timeout_seconds,
                    metrics=self.core.metrics,
                    sealer=self.core.sealer,
                ),
                **{
                    kind: PolicedInvoker(self.target_policy, invoker)
                    for kind, invoker in {
                        **build_aws_targets(_BOTO_CONFIG, s.target_role_arn, s.max_target_timeout_seconds),
                        "handler": HandlerTargetInvoker(),
                    }.items()
                },
            }
        return self.core.executor(worker_id, targets, clock=clock, sleep=sleep)


def build(
    settings: Settings,
    metrics: Metrics | PortMetrics,
    *,
    clients: Clients | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] | None = None,
    configs: Configs | None = None,
    checks: TargetChecks | None = None,
) -> AwsContainer:
    """Every service, from `settings`, on DynamoDB and SQS: on the default AWS clients, the system clock and real
    sleeps unless given others (the benchmarks meter their clients and run on a virtual clock, whose sleeps must
    move it; `sleep` is the sweeper's, the executor's is `AwsContainer.new_executor`'s). `configs` (default:
    `Configs.of(settings)`) lets the benchmark turn off a mechanism that has no setting; `checks` (default:
    `TargetChecks(settings)`) are the submit-time checks of a target."""
    clients = clients or Clients.default(events=settings.completion_events)
    dynamodb, sqs = clients.dynamodb, clients.sqs
    if settings.fast_aws_calls:
        dynamodb, sqs = fast_calls(dynamodb), fast_calls(sqs)
    lanes = {"high": settings.ready_queue_high_url, "low": settings.ready_queue_low_url}
    key = message_key(resolve_secret(settings, "message_secret"))
    queue = SqsReadyQueue(
        settings.ready_queue_url, settings.dlq_url, sqs, lanes=lanes, message_key=key, packing=packing_of(settings)
    )
    # One record of the shard count for the process: the job store's transactions and the timer store write timers.
    shard_record = ShardCountRecord(dynamodb, settings.jobs_table, settings.shard_count)
    stores = Stores(
        jobs=DynamoJobStore(settings.jobs_table, settings.shard_count, dynamodb, shard_record),
        timers=DynamoTimerStore(settings.jobs_table, settings.shard_count, dynamodb, shard_record=shard_record),
        ledger=DynamoLedger(settings.executions_table, dynamodb, clients.renewal_dynamodb),
        queue=queue,
        backfills=DynamoBackfillStore(settings.jobs_table, dynamodb),
        tenant_budgets=DynamoTenantBudgets(settings.jobs_table, dynamodb),
        tenant_slots=DynamoTenantSlots(settings.jobs_table, dynamodb, clients.renewal_dynamodb),
        request_windows=DynamoRequestWindows(settings.jobs_table, dynamodb),
        operations=DynamoOperationStore(settings.jobs_table, dynamodb),
        bulk_slots=DynamoTenantSlots(settings.jobs_table, dynamodb, kind="BULK"),
        flow_controls=DynamoFlowControls(settings.jobs_table, dynamodb),
        flow_slots=DynamoTenantSlots(settings.jobs_table, dynamodb, clients.renewal_dynamodb, kind="FLOWSLOT"),
        events=EventBridgePublisher(settings.event_bus_name, clients.events) if settings.completion_events else None,
    )
    port_metrics: PortMetrics = PowertoolsMetrics(metrics) if isinstance(metrics, Metrics) else metrics
    checks = checks or TargetChecks(settings)
    core = compose(
        settings,
        stores,
        clock or SystemClock(),
        RANDOM_IDS,
        port_metrics,
        sleep=sleep or time.sleep,
        heartbeats=ThreadHeartbeats(),
        pool=ThreadTaskPool(min(settings.sweep_concurrency, settings.shard_count), name="bucket"),
        configs=configs,
        check_target=checks,
        sealer=sealer_of(settings, key),
    )
    return AwsContainer(core, queue, checks, clients)


@functools.cache
def container(metrics: Metrics) -> AwsContainer:
    """One container per Lambda execution environment (clients are reused across invocations)."""
    return build(Settings(), metrics)


def instance_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"
