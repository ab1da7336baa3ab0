"""Scenario 2 and the baselines of scenario 4.

Sweep cost against the pending set: pending timers are written straight into far-future buckets with
BatchWriteItem (they are never swept); then `due` real jobs, created through the JobService, fall due and one
metered sweep dispatches them. The time-bucket sweep only touches the due buckets, so its items read and units
per dispatched occurrence stay flat as the pending set grows.

Baseline (a): a scheduler that keeps `next_run_at` on each job and Scans every job for due ones - the same
pending set and the same due jobs in a table of job items - reads the whole set every time.
Baseline (b): one SendMessage per occurrence instead of SendMessageBatch of 10.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.adapters.codec import job_to_item
from scheduler.adapters.dispatch_message import dispatch_to_body
from scheduler.adapters.dynamodb import timer_item
from scheduler.adapters.sqs import SqsReadyQueue, delay_seconds
from scheduler.core.capacity.forecast import ForecastService
from scheduler.core.execution.packing import PackingConfig
from scheduler.core.jobs.service import JobService
from scheduler.core.model.job import Job, JobSpec
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch
from scheduler.core.runtime.metrics import NullMetrics
from scheduler.core.sweep.dispatch import timer_for
from scheduler.settings import Settings
from scheduler_bench.environment import create_naive_table, create_resources, delete_resources
from scheduler_bench.metering import Meter
from scheduler_bench.services import VirtualClock, build, client, flowing, settings_for, sweep, utc_minute
from scheduler_bench.spend import Totals
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY

SIGNING_SECRET = "bench-signing-secret"
FAR_FUTURE = datetime(2099, 1, 1, tzinfo=UTC)
#: Pending timers per far-future minute (spread over the shards, as a real backlog would be).
PENDING_PER_MINUTE = 100
BATCH_WRITE = 25
#: The sweeper's own forecast window (SCHEDULER_FORECAST_MINUTES), for the forecast's cost per job.
FORECAST_MINUTES: int = Settings.model_fields["forecast_minutes"].default


@dataclass(frozen=True)
class SweepScalingConfig:
    """The pending-set sizes to grow through, the jobs due at once, and the loader's threads."""

    pending_sizes: tuple[int, ...]
    due: int = 1000
    loader_threads: int = 4


def _spec(url: str, at: datetime) -> tuple[JobSpec, dict[str, Any]]:
    body = {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "http", "url": url},
        "payload": {"bench": "sweep"},
    }
    return JobSpec.model_validate(body), body


def _pending_items(start: int, stop: int, shard_count: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Pending timers (for the jobs table) and the matching job items (for the Scan baseline's table)."""
    timers, jobs = [], []
    created = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(start, stop):
        at = FAR_FUTURE + timedelta(minutes=i // PENDING_PER_MINUTE, milliseconds=i % PENDING_PER_MINUTE)
        spec, _ = _spec("https://example.com/hook", at)
        job = Job.new(uuid.uuid4().hex, f"tenant{i % 100}", spec, created, at)
        timers.append(timer_item(timer_for(job, at), shard_count))
        jobs.append(job_to_item(job))
    return timers, jobs


def _create_due(jobs: JobService, due_at: datetime, count: int, threads: int) -> list[Job]:
    """`count` one-shot jobs due at `due_at`, created through the JobService (as the API creates them)."""
    spec, body = _spec("http://127.0.0.1:9/never-called", due_at)
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(lambda i: jobs.create(f"due{i % 10}", spec, None, body).job, range(count)))


def _batch_write(dynamodb: Any, table: str, requests: list[dict[str, Any]]) -> None:
    pending = requests
    while pending:
        response = dynamodb.batch_write_item(RequestItems={table: pending})
        pending = response.get("UnprocessedItems", {}).get(table, [])
        if pending:
            time.sleep(0.05)


def _load(dynamodb: Any, table: str, items: Sequence[dict[str, Any]], threads: int, delete: bool = False) -> None:
    """BatchWriteItem in chunks of 25, on a few threads."""
    if delete:
        requests = [{"DeleteRequest": {"Key": {"PK": i["PK"], "SK": i["SK"]}}} for i in items]
    else:
        requests = [{"PutRequest": {"Item": i}} for i in items]
    chunks = [requests[i : i + BATCH_WRITE] for i in range(0, len(requests), BATCH_WRITE)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda chunk: _batch_write(dynamodb, table, chunk), chunks))


def _naive_scan(dynamodb: Any, table: str, now: datetime) -> tuple[int, int]:
    """The naive design's sweep: Scan all jobs for ACTIVE ones with next_run_at <= now. Returns (scanned,
    found). Strongly consistent, like the time-bucket queries it is compared with."""
    request: dict[str, Any] = {
        "TableName": table,
        "FilterExpression": "next_ms <= :now AND #state = :active",
        "ExpressionAttributeNames": {"#state": "state"},
        "ExpressionAttributeValues": {":now": {"N": str(int(now.timestamp() * 1000))}, ":active": {"S": "ACTIVE"}},
        "ConsistentRead": True,
    }
    scanned = found = 0
    while True:
        response = dynamodb.scan(**request)
        scanned += int(response.get("ScannedCount", 0))
        found += int(response.get("Count", 0))
        if not response.get("LastEvaluatedKey"):
            return scanned, found
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def _forecast_cost(
    services: Any, meter: Meter, clock: VirtualClock, due_at: datetime, lookahead_seconds: int
) -> dict[str, Any]:
    """What the forecast (scheduler.core.capacity.forecast) reads: a 60-minute one with the due jobs inside its window,
    the same window empty (its fixed cost: one query per shard and minute, billed at least half a read unit each), and
    the sweeper's own FORECAST_MINUTES window empty (what forecasting every minute costs with nothing due)."""
    lookback = timedelta(seconds=lookahead_seconds + 90)
    forecaster = ForecastService(services.timers, clock, lookback, NullMetrics())

    def measure(at: datetime, minutes: int) -> tuple[Totals, int]:
        clock.set(at)
        meter.reset()
        with meter.phase("forecast"):
            result = forecaster.forecast(minutes)
        return meter.totals({"forecast"}), result.timers_read

    full, timers_read = measure(due_at - timedelta(minutes=10), 60)
    empty, _ = measure(due_at - timedelta(days=1), 60)
    sweeper_empty, _ = measure(due_at - timedelta(days=1), FORECAST_MINUTES)
    per_timer = max(0.0, full.read_units - empty.read_units) / max(1, timers_read)
    reads_per_job = FORECAST_MINUTES + lookback.total_seconds() / 60  # sweeps whose window holds a timer
    return {
        "minutes": 60,
        "timers_read": timers_read,
        "queries": full.dynamodb_calls,
        "read_units": full.read_units,
        "empty_read_units": empty.read_units,
        "read_units_per_timer": per_timer,
        "sweeper_forecast_minutes": FORECAST_MINUTES,
        "sweeper_forecast_empty_read_units": sweeper_empty.read_units,
        "sweeper_forecast_queries": sweeper_empty.dynamodb_calls,
        "read_units_per_job_with_sweeper_forecast": per_timer * reads_per_job,
    }


def _per(totals: Totals, count: int) -> dict[str, Any]:
    scaled = totals.scaled(1 / max(1, count))
    return {k: scaled[k] for k in ("dynamodb_calls", "read_units", "write_units", "items_read", "sqs_billed_requests")}


def run(config: SweepScalingConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """Grow the pending set through `pending_sizes`; at each size, measure one sweep and one Scan."""
    meter = Meter()
    dynamodb, sqs, events = client("dynamodb", meter), client("sqs", meter), client("events", meter)
    plain = client("dynamodb")
    prefix = f"bs{uuid.uuid4().hex[:10]}"
    resources = create_resources(prefix, plain, client("sqs"), client("events"))
    naive_table = create_naive_table(f"{prefix}-naive", plain)
    try:
        settings = settings_for(resources, SIGNING_SECRET, 10_000_000)
        start = utc_minute(datetime.now(UTC))
        clock = VirtualClock(start)
        services = build(settings, dynamodb, sqs, events, clock, SIGNING_SECRET)
        services.timers.init_watermark(start)
        with meter.phase("warmup"), flowing(clock):
            services.sweeper.sweep(clock.now() + timedelta(seconds=60))
        rounds: list[dict[str, Any]] = []
        written = 0
        last_dispatches: list[Dispatch] = []
        for index, size in enumerate(config.pending_sizes):
            log(f"sweep: writing pending timers and jobs {written} -> {size}")
            timers, jobs = _pending_items(written, size, settings.shard_count)
            began = time.perf_counter()
            _load(plain, resources.jobs_table, timers, config.loader_threads)
            _load(plain, naive_table, jobs, config.loader_threads)
            load_seconds = time.perf_counter() - began
            written = size

            due_at = start + timedelta(minutes=30 * (index + 1))
            clock.set(due_at - timedelta(minutes=15))
            log(f"sweep: creating {config.due} jobs due at one instant (pending set {size})")
            with meter.phase("submit"):
                created = _create_due(services.job_service, due_at, config.due, config.loader_threads)
            due_items = [job_to_item(job) for job in created]
            last_dispatches = [Dispatch.of(timer_for(job, due_at)) for job in created]

            forecasting = _forecast_cost(services, meter, clock, due_at, settings.lookahead_seconds)

            # Steady state: every sweep before this one has run; this one takes the due minute's buckets.
            clock.set(due_at - timedelta(minutes=6) + timedelta(seconds=1))
            with meter.phase("warmup"), flowing(clock):
                services.sweeper.sweep(clock.now() + timedelta(seconds=60))
            clock.set(due_at - timedelta(seconds=settings.lookahead_seconds) + timedelta(seconds=1))
            meter.reset()
            began = time.perf_counter()
            dispatched = sweep(services, meter)
            sweep_seconds = time.perf_counter() - began
            swept = meter.totals({"sweeper"})

            _load(plain, naive_table, due_items, config.loader_threads)
            meter.reset()
            began = time.perf_counter()
            with meter.phase("scan"):
                scanned, found = _naive_scan(dynamodb, naive_table, due_at)
            scan_seconds = time.perf_counter() - began
            scanning = meter.totals({"scan"})
            _load(plain, naive_table, due_items, config.loader_threads, delete=True)

            queries = swept.by_operation.get("dynamodb:Query", {})
            rounds.append(
                {
                    "pending": size,
                    "due": config.due,
                    "load_seconds": load_seconds,
                    "items_loaded_per_second": (len(timers) + len(jobs)) / load_seconds if load_seconds else None,
                    "sweep": {
                        "dispatched": dispatched,
                        "seconds": sweep_seconds,
                        "per_dispatched": _per(swept, dispatched),
                        "query_items_read_per_dispatched": queries.get("items_read", 0.0) / max(1, dispatched),
                        "query_read_units_per_dispatched": queries.get("read_units", 0.0) / max(1, dispatched),
                        "totals": {
                            "dynamodb_calls": swept.dynamodb_calls,
                            "read_units": swept.read_units,
                            "write_units": swept.write_units,
                            "items_read": swept.items_read,
                            "sqs_requests": swept.sqs_requests,
                        },
                    },
                    "scan": {
                        "found": found,
                        "scanned": scanned,
                        "seconds": scan_seconds,
                        "read_units": scanning.read_units,
                        "requests": scanning.dynamodb_calls,
                        "items_read_per_found": scanned / max(1, found),
                        "read_units_per_found": scanning.read_units / max(1, found),
                    },
                    "forecast": forecasting,
                    "scan_to_sweep_read_units": (scanning.read_units / max(1, found))
                    / max(1e-9, queries.get("read_units", 0.0) / max(1, dispatched)),
                }
            )
            log(
                f"sweep: pending {size}: sweep read {swept.items_read} items for {dispatched} dispatched; "
                f"scan read {scanned} for {found}"
            )
        batching = _batching(sqs, meter, resources.dlq_url, prefix, last_dispatches, clock.now())
        return {"config": {"pending_sizes": list(config.pending_sizes), "due": config.due}, "rounds": rounds,
                "batching": batching}  # fmt: skip
    finally:
        delete_resources(resources, plain, client("sqs"), client("events"), extra_tables=(naive_table,))


def _batching(
    sqs: Any, meter: Meter, dlq_url: str, prefix: str, dispatches: list[Dispatch], now: datetime
) -> dict[str, Any]:
    """Baseline (b): the same occurrences sent by the adapter as deployed (messages of several occurrences, 10 a
    SendMessageBatch), by the adapter with one occurrence a message (10 a SendMessageBatch), and one SendMessage
    each."""
    url = client("sqs").create_queue(QueueName=f"{prefix}-batching")["QueueUrl"]
    try:
        queue = SqsReadyQueue(url, dlq_url, sqs, message_key=LOCAL_MESSAGE_KEY)
        one_each = SqsReadyQueue(url, dlq_url, sqs, message_key=LOCAL_MESSAGE_KEY, packing=PackingConfig(occurrences=1))

        def one_by_one() -> None:
            for d in dispatches:
                sqs.send_message(
                    QueueUrl=url,
                    MessageBody=dispatch_to_body(d, LOCAL_MESSAGE_KEY),
                    DelaySeconds=delay_seconds(d.fire_at, now),
                    MessageAttributes={
                        "occurrence_key": {"DataType": "String", "StringValue": d.key},
                        "tenant": {"DataType": "String", "StringValue": d.tenant},
                    },
                )

        meter.reset()
        n = max(1, len(dispatches))
        designs: dict[str, dict[str, float]] = {}
        sends: list[tuple[str, Callable[[], None]]] = [
            ("batched", lambda: queue.send(dispatches, now)),
            ("one_each", lambda: one_each.send(dispatches, now)),
            ("single", one_by_one),
        ]
        for design, send in sends:
            began = time.perf_counter()
            with meter.phase(design):
                send()
            seconds = time.perf_counter() - began
            requests = meter.totals({design}).sqs_billed_requests
            designs[design] = {"requests": requests, "requests_per_occurrence": requests / n, "seconds": seconds}
        batched, single = designs["batched"], designs["single"]
        return {
            "messages": len(dispatches),
            **designs,
            "request_ratio": single["requests"] / max(1, batched["requests"]),
            "time_ratio": single["seconds"] / batched["seconds"] if batched["seconds"] else None,
        }
    finally:
        client("sqs").delete_queue(QueueUrl=url)
