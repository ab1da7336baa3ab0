"""The real services, wired by `scheduler.handlers.wiring.build` itself, but with metered clients and a
clock the benchmark controls; and the worker driven as the Lambda event source mapping drives it."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import boto3
from botocore.config import Config

from scheduler import schema
from scheduler.adapters.dispatch_message import dispatches_from_body
from scheduler.adapters.http_target import HttpTargetInvoker
from scheduler.adapters.sqs import SqsBatchVisibility, SqsMessage, SqsReadyQueue
from scheduler.adapters.threads import SharedTaskPool
from scheduler.composition import Configs
from scheduler.core.execution.executor import Executor, Outcome
from scheduler.core.execution.packing import MessageRunner
from scheduler.core.execution.recovery import HeldBatch
from scheduler.core.jobs.service import JobService
from scheduler.core.ports import BatchVisibility, Clock, Dispatch, JobStore, Ledger, MessageControl, Metrics, TimerStore
from scheduler.core.runtime.metrics import NullMetrics
from scheduler.core.sweep.dispatch import Dispatcher
from scheduler.core.sweep.sweeper import Sweeper
from scheduler.handlers import wiring
from scheduler.provision import Resources
from scheduler.security.signing import KeyRing
from scheduler.settings import Settings
from scheduler_bench.metering import Meter

#: As in the wiring (scheduler.handlers.wiring._BOTO_CONFIG), with a larger pool for the threaded loaders.
BOTO_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=60, max_pool_connections=32
)


def client(service: str, meter: Meter | None = None) -> Any:
    """A boto3 client for `service` (endpoint from AWS_ENDPOINT_URL_*), metered when `meter` is given."""
    made: Any = boto3.client(service, config=BOTO_CONFIG)  # type: ignore[call-overload]
    return meter.attach(made) if meter is not None else made


def settings_for(resources: Resources, signing_secret: str, max_active_jobs: int) -> Settings:
    """Settings as the local stack gives its functions (`Resources.env()`), for this run's resources: the
    defaults of everything else (shards, look-ahead, leases), private targets allowed (the receiver is local)."""
    return Settings(
        jobs_table=resources.jobs_table,
        executions_table=resources.executions_table,
        ready_queue_url=resources.ready_queue_url,
        dlq_url=resources.dlq_url,
        event_bus_name=resources.event_bus_name,
        allow_private_targets=True,
        local_mode=True,
        signing_secret=signing_secret,
        max_active_jobs_per_tenant=max_active_jobs,
    )


class VirtualClock:
    """The core's Clock port on a time the benchmark sets, so a day of sweeps runs in seconds. Within `flowing()`
    (one sweeper invocation) it runs at the real clock's pace from where it stands, for every thread alike - as
    time does for a sweep's buckets swept at once - and stays where the invocation left it."""

    def __init__(self, start: datetime) -> None:
        self._now = start
        self._flowing_since: float | None = None

    def now(self) -> datetime:
        since = self._flowing_since
        if since is None:
            return self._now
        return self._now + timedelta(seconds=time.monotonic() - since)

    @contextmanager
    def flowing(self) -> Iterator[None]:
        began = time.monotonic()
        self._flowing_since = began
        try:
            yield
        finally:
            self._flowing_since = None
            self._now += timedelta(seconds=time.monotonic() - began)

    def set(self, when: datetime) -> None:
        self._now = when

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)


class WorkerClock(VirtualClock):
    """The worker's clock: the virtual instant a batch was handed over, plus what each record's thread has waited
    since. `sleep` really sleeps, so the wait is in the invocation's measured (billed) duration, as the worker
    waiting out a sub-second remainder inside Lambda is billed; each thread of a batch sees its own wait."""

    def __init__(self, start: datetime) -> None:
        super().__init__(start)
        self._waited = threading.local()
        #: Per batch, the longest wait of its records: the invocation's billed waiting (its records wait at once).
        self.batch_waits: list[float] = []

    def now(self) -> datetime:
        return self._now + timedelta(seconds=getattr(self._waited, "seconds", 0.0))

    def begin_record(self) -> None:
        """A record's thread starts at the batch's instant."""
        self._waited.seconds = 0.0

    def waited(self) -> float:
        """What this record's thread has waited since `begin_record`."""
        return float(getattr(self._waited, "seconds", 0.0))

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        self._waited.seconds = self.waited() + seconds


class WaitTally:
    """The sweeper's sleep: really sleeps (its landing waits are billed wall time) and adds up what it slept, summed
    over the buckets swept at once (each bucket's chain waits in its own thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds = 0.0

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)
        with self._lock:
            self.seconds += seconds

    def reset(self) -> None:
        with self._lock:
            self.seconds = 0.0


@dataclass
class Services:
    """The composition root's services for one set of tables and queues."""

    settings: Settings
    clock: Clock
    worker_clock: WorkerClock
    jobs: JobStore
    timers: TimerStore
    ledger: Ledger
    queue: SqsReadyQueue
    dispatcher: Dispatcher
    job_service: JobService
    sweeper: Sweeper
    executor: Executor
    sqs: Any
    dynamodb: Any
    #: The handler's batch hold (bounded recovery: one ChangeMessageVisibilityBatch per batch, renewed by a thread).
    held_batch: Callable[[BatchVisibility, Mapping[str, str | None]], HeldBatch]
    #: What the sweeper's sends waited to land on time (scheduler.core.sweep.dispatch), over all its buckets: the sleep
    #: its dispatcher was built with.
    sweeper_waits: WaitTally
    kept: list[str] = field(default_factory=list)


def build(
    settings: Settings,
    dynamodb: Any,
    sqs: Any,
    events: Any,
    clock: Clock,
    signing_secret: str,
    metrics: Metrics | None = None,
    configs: Configs | None = None,
) -> Services:
    """The handlers' own wiring (`scheduler.handlers.wiring.build`: dispatch and execution budgets, completion
    events and all), on injected clients and clocks, with the `http` target signing with `signing_secret`.

    The worker has its own clock: in virtual time a batch is handled when its messages land, as the SQS delay
    delivers them, while the sweeper's clock goes on minute by minute. `metrics` counts what the functions count
    (the cost scenario prices their EMF documents); `configs` replaces `Configs.of(settings)` (a cost variant).
    """
    waits = WaitTally()
    metrics = metrics or NullMetrics()
    container = wiring.build(
        settings,
        metrics,
        clients=wiring.Clients(dynamodb, sqs, events),
        clock=clock,
        sleep=waits.sleep,
        configs=configs,
    )
    worker_clock = WorkerClock(clock.now())
    executor = container.new_executor(
        f"bench-worker/{uuid.uuid4().hex[:8]}",
        clock=worker_clock,
        sleep=worker_clock.sleep,
        targets={
            "http": HttpTargetInvoker(
                container.guard,
                KeyRing.parse(settings.signing_keys),
                signing_secret,
                metrics=metrics,
                sealer=container.core.sealer,
            )
        },
    )
    core = container.core
    return Services(
        settings,
        clock,
        worker_clock,
        core.stores.jobs,
        core.stores.timers,
        core.stores.ledger,
        container.queue,
        core.dispatcher,
        core.job_service(),
        core.sweeper(f"bench-sweeper/{uuid.uuid4().hex[:8]}"),
        executor,
        sqs,
        dynamodb,
        core.held_batch,
        waits,
    )


def sweep(services: Services, meter: Meter) -> int:
    """One sweeper invocation at the sweeper clock's time; returns the occurrences it dispatched."""
    with meter.invocation("sweeper"), flowing(services.clock):
        report = services.sweeper.sweep(services.clock.now() + timedelta(seconds=60))
    meter.invocations["sweeper"][-1].records = report.dispatched
    return report.dispatched


def flowing(clock: Clock) -> AbstractContextManager[None]:
    """The virtual clock's `flowing()` during a sweeper invocation (its landing waits are real: SQS's clock does
    not stop); a real clock flows anyway."""
    return clock.flowing() if isinstance(clock, VirtualClock) else nullcontext()


def drain(services: Services, meter: Meter, batch_size: int, arrival_lag: float = 0.05) -> int:
    """Feed the ready queue to the worker as the event source mapping does: batches of `batch_size` messages in the
    order they land (`meter.landing`: send time + whole-second delay, by each message's first occurrence; the fire
    time if unknown), each handed over when its last message has landed; its messages run concurrently, and the
    occurrences of a message that carries several on a pool shared by the batch, as the worker handler runs them
    (`MessageRunner`), each waiting out what is left to its fire time (billed, as inside Lambda); what succeeded is
    deleted.

    One Lambda invocation per batch; the handler's duration is the records' execution, their waits and the batch
    hold (one ChangeMessageVisibilityBatch, as the handler does: bounded recovery); receiving and deleting is the
    event source mapping's work, billed as SQS requests. Returns the occurrences handled.
    """
    handled = 0
    url = services.settings.ready_queue_url
    while True:
        visible: list[dict[str, Any]] = []
        while True:
            with meter.phase("worker"):
                response = services.sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=batch_size,
                    WaitTimeSeconds=0,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )
            got = response.get("Messages", [])
            visible += got
            if not got or len(visible) >= 500:
                break
        if not visible:
            return handled
        entries = [(m, dispatches_from_body(m["Body"], services.queue.message_key)) for m in visible]
        entries.sort(key=lambda e: meter.landing.get(e[1][0].key, e[1][0].fire_at))
        for start in range(0, len(entries), batch_size):
            _run_batch(services, meter, entries[start : start + batch_size], arrival_lag)
        handled += sum(len(dispatches) for _, dispatches in entries)


class _TimedExecutor:
    """The executor, each occurrence starting at the batch's instant on the worker's clock and its wait recorded."""

    def __init__(self, services: Services, waits: list[float]) -> None:
        self.services, self.waits = services, waits

    def execute(self, dispatch: Dispatch, message: MessageControl) -> Outcome:
        clock = self.services.worker_clock
        clock.begin_record()
        try:
            return self.services.executor.execute(dispatch, message)
        finally:
            self.waits.append(clock.waited())


def _run_batch(
    services: Services, meter: Meter, batch: list[tuple[dict[str, Any], list[Dispatch]]], arrival_lag: float
) -> None:
    url = services.settings.ready_queue_url
    landed = max(meter.landing.get(ds[0].key, ds[0].fire_at) for _, ds in batch) + timedelta(seconds=arrival_lag)
    services.worker_clock.set(max(services.worker_clock.now(), landed))
    visibility = SqsBatchVisibility(services.sqs, {m["MessageId"]: (url, m["ReceiptHandle"]) for m, _ in batch})
    waits: list[float] = []
    runner = MessageRunner(
        cast(Executor, _TimedExecutor(services, waits)),
        services.queue,
        services.worker_clock,
        NullMetrics(),
        _OCCURRENCES,
    )

    def run(entry: tuple[dict[str, Any], list[Dispatch]]) -> tuple[dict[str, Any], list[Dispatch], SqsMessage, Outcome]:
        m, dispatches = entry
        receive_count = int((m.get("Attributes") or {}).get("ApproximateReceiveCount", "1"))
        control = SqsMessage(services.sqs, url, m["ReceiptHandle"], receive_count)
        return m, dispatches, control, runner.run(dispatches, control)

    done: list[dict[str, str]] = []
    occurrences = sum(len(dispatches) for _, dispatches in batch)
    with (
        meter.invocation("worker", records=occurrences),
        services.held_batch(visibility, dict.fromkeys(visibility.messages)) as held,
    ):
        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            results = list(pool.map(run, batch))
        services.worker_clock.batch_waits.append(max(waits, default=0.0))
        for m, dispatches, control, outcome in results:
            if outcome.ack:
                done.append({"Id": str(len(done)), "ReceiptHandle": m["ReceiptHandle"]})
            else:
                held.release(m["MessageId"])
                control.extend_visibility(outcome.hide_seconds)
                services.kept.append(f"{dispatches[0].key}: {outcome.reason}")
    if done:
        with meter.phase("worker"):
            services.sqs.delete_message_batch(QueueUrl=url, Entries=done)


#: The worker handler's pool for the occurrences of messages that carry several (scheduler.handlers.worker).
_OCCURRENCES = SharedTaskPool(schema.WORKER_OCCURRENCE_THREADS, name="bench-occurrence")


def utc_minute(when: datetime) -> datetime:
    """The start of `when`'s minute, in UTC (virtual timelines start on a bucket boundary)."""
    return when.astimezone(UTC).replace(second=0, microsecond=0)
