"""Scenario 6: dispatch throughput with one and with two sweeper processes (`SCHEDULER_LOCAL_SWEEPERS`).

`jobs` one-shot jobs due within one minute, spread over `shards` shards and `tenants` tenants, are stored through the
real JobService on fresh tables, and the watermark is set to the current minute; then K processes of
`scheduler_local.sweeper_loop` - the sweeper handler on a timer, each in its slot, started by the local stack's own
supervisor code as `scripts/dev` starts them - run on those tables, and nothing else (no api, no workers: the
messages stay in the ready queue, where the queue's counts see them). They share the minute's buckets through their
claims, as fanned-out invocations would: a sweep takes `sweep_concurrency` buckets at a time, so with more shards than
that, the second process claims buckets the first has not reached yet.

Measured per run: from the first message in the ready queue to the last one (the queue's counts, polled every
`poll_seconds`; the sweeps' own log lines say when all were sent), each process's share, and the machine's CPU over
that window by kind of process (`cpu_profile`): what bounds the rate here. Runs alternate between the process counts
(1, 2, 1, 2, ...), each on fresh tables, so that the machine's changing load falls on both alike; the ratio is the
median time with one process over the median with two. The forecast that follows a sweep once a minute is off
(`SCHEDULER_FORECAST_MINUTES=0`): it is not dispatch, and it would fall inside one process's window and not the other's.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.adapters.clock import SystemClock
from scheduler.core.jobs.service import Submission
from scheduler.core.model.job import JobSpec
from scheduler.core.model.timefmt import ONE_MINUTE, minute_of, rfc3339
from scheduler.schema import METRICS_NAMESPACE, SERVICE_NAME
from scheduler.settings import Settings
from scheduler_bench.cpu_profile import CpuWindow
from scheduler_bench.environment import ROOT, create_resources, delete_resources
from scheduler_bench.services import build, client, settings_for
from scheduler_local.__main__ import Supervisor, sweeper_children

#: The sweeps look this far ahead: the jobs' minute (two minutes on when they are stored) is inside it from the start.
LOOKAHEAD_SECONDS = 240
SUBMIT_THREADS = 8


@dataclass(frozen=True)
class SweepersConfig:
    """The herd (jobs due within one minute over `shards` shards), the process counts compared, how many runs each,
    the local sweepers' tick interval, and where their state and logs go."""

    jobs: int = 4_000
    shards: int = 32
    processes: tuple[int, ...] = (1, 2)
    rounds: int = 3
    tenants: int = 32
    interval_seconds: float = 1.0
    state_dir: Path = ROOT / "bench" / "tmp"
    poll_seconds: float = 0.1
    #: A run that has not sent everything by then ends and reports what it saw.
    timeout_seconds: float = 300.0


def _queued(sqs: Any, url: str) -> int:
    """The ready queue's messages: visible, delayed and in flight (nothing receives them here)."""
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    names.append("ApproximateNumberOfMessagesNotVisible")
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(attributes.get(name, 0)) for name in names)


def sweeps_by_process(logs: Path) -> dict[str, dict[str, int]]:
    """Per sweeper process (its log's name), the totals of its sweeps' "sweep finished" lines."""
    totals: dict[str, dict[str, int]] = {}
    for path in sorted(logs.glob("sweeper*.log")):
        counts = {"sweeps": 0, "dispatched": 0, "buckets_done": 0, "buckets_busy": 0}
        for line in path.read_text(errors="replace").splitlines():
            if '"sweep finished"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            counts["sweeps"] += 1
            for name in ("dispatched", "buckets_done", "buckets_busy"):
                counts[name] += int(record.get(name, 0))
        totals[path.stem] = counts
    return totals


def _store(services: Any, config: SweepersConfig, minute: datetime) -> None:
    """`config.jobs` one-shot jobs due at instants spread over `minute`, `tenants` tenants, through the JobService
    (25 at a time, as `POST /v1/jobs/batch` stores them)."""
    step = 60_000 / max(1, config.jobs)

    def body(n: int) -> dict[str, Any]:
        at = minute + timedelta(milliseconds=int(n * step))
        return {
            "schedule": {"type": "once", "at": rfc3339(at)},
            "target": {"type": "http", "url": "http://127.0.0.1:9/x"},
        }

    chunks: list[tuple[str, list[dict[str, Any]]]] = []
    for tenant in range(config.tenants):
        bodies = [body(n) for n in range(tenant, config.jobs, config.tenants)]
        chunks += [(f"sweepers{tenant}", bodies[i : i + 25]) for i in range(0, len(bodies), 25)]

    def create(chunk: tuple[str, list[dict[str, Any]]]) -> None:
        tenant, bodies = chunk
        answers = services.job_service.create_many(
            tenant, [Submission(JobSpec.model_validate(b), None, b) for b in bodies]
        )
        failed = [answer for answer in answers if isinstance(answer, Exception)]
        if failed:
            raise RuntimeError(f"storing the herd failed: {failed[0]}")

    with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
        list(pool.map(create, chunks))


def _sweeper_env(resources: Any, config: SweepersConfig) -> dict[str, str]:
    """What the local stack gives its sweepers (`scheduler_local.__main__`), for this run's tables."""
    return {
        **os.environ,
        **resources.env(),
        "SCHEDULER_SHARD_COUNT": str(config.shards),
        "SCHEDULER_LOOKAHEAD_SECONDS": str(LOOKAHEAD_SECONDS),
        "SCHEDULER_SWEEP_INTERVAL_SECONDS": str(config.interval_seconds),
        "SCHEDULER_FORECAST_MINUTES": "0",
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "functions"), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    }


def run_one(config: SweepersConfig, processes: int, log: Callable[[str], None]) -> dict[str, Any]:
    """One herd dispatched by `processes` sweeper processes, on fresh tables."""
    prefix = f"bw{uuid.uuid4().hex[:10]}"
    dynamodb, sqs, events = client("dynamodb"), client("sqs"), client("events")
    resources = create_resources(prefix, dynamodb, sqs, events)
    state_dir = config.state_dir / prefix
    supervisor: Supervisor | None = None
    try:
        base = settings_for(resources, Settings().signing_secret, 10_000_000)
        settings = base.model_copy(update={"shard_count": config.shards, "lookahead_seconds": LOOKAHEAD_SECONDS})
        services = build(settings, dynamodb, sqs, events, SystemClock(), settings.signing_secret)
        minute = minute_of(datetime.now(UTC)) + 2 * ONE_MINUTE
        log(f"sweepers: storing {config.jobs} jobs due in {rfc3339(minute)} over {config.shards} shards")
        began = time.perf_counter()
        _store(services, config, minute)
        store_seconds = time.perf_counter() - began
        services.timers.init_watermark(minute_of(datetime.now(UTC)))

        log(f"sweepers: {processes} sweeper process(es) dispatch them")
        logs = state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        children = sweeper_children(processes, logs)
        supervisor = Supervisor(state_dir, _sweeper_env(resources, config), children)
        spawned = time.time()
        for child in children:
            supervisor.spawn(child)
        first = last = None
        depth = 0
        cpu: CpuWindow | None = None
        profile: dict[str, Any] = {}
        deadline = spawned + config.timeout_seconds
        while time.time() < deadline:
            now_depth = _queued(sqs, resources.ready_queue_url)
            now = time.time()
            if now_depth > depth:
                if first is None:
                    first, cpu = now, CpuWindow().start()
                depth, last = now_depth, now
            sent = sum(p["dispatched"] for p in sweeps_by_process(logs).values())
            if sent >= config.jobs and _queued(sqs, resources.ready_queue_url) == depth:
                break
            time.sleep(config.poll_seconds)
        if cpu is not None:
            profile = cpu.stop()
        shares = sweeps_by_process(logs)
        supervisor.stop()
        supervisor = None
        dispatched = sum(p["dispatched"] for p in shares.values())
        seconds = (last - first) if first is not None and last is not None else None
        result = {
            "processes": processes,
            "jobs": config.jobs,
            "shards": config.shards,
            "store_seconds": store_seconds,
            "first_message_after_start_seconds": (first - spawned) if first is not None else None,
            "seconds_to_dispatch_all": seconds,
            "occurrences_per_second": config.jobs / seconds if seconds else None,
            "messages": depth,
            "dispatched": dispatched,
            "complete": dispatched >= config.jobs,
            "per_process": shares,
            "cpu_profile": profile,
        }
        rate = f"{result['occurrences_per_second']:.0f}/s" if seconds else "-"
        log(f"sweepers: {processes} process(es): {dispatched}/{config.jobs} in {seconds or 0:.2f}s ({rate}), {shares}")
        shutil.rmtree(state_dir, ignore_errors=True)  # the logs are kept only when the run failed
        return result
    finally:
        if supervisor is not None:
            supervisor.stop()
        delete_resources(resources, dynamodb, sqs, events)


def run(config: SweepersConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """`rounds` runs of each process count, alternating; the medians and their ratio (one over the most)."""
    runs = [run_one(config, processes, log) for _ in range(config.rounds) for processes in config.processes]
    medians: dict[str, float | None] = {}
    for processes in config.processes:
        times = [r["seconds_to_dispatch_all"] for r in runs if r["processes"] == processes and r["complete"]]
        medians[str(processes)] = statistics.median(times) if times and all(times) else None
    one, most = medians.get(str(min(config.processes))), medians.get(str(max(config.processes)))
    return {
        "config": {
            "jobs": config.jobs,
            "shards": config.shards,
            "processes": list(config.processes),
            "rounds": config.rounds,
            "tenants": config.tenants,
            "interval_seconds": config.interval_seconds,
            "sweep_concurrency": Settings().sweep_concurrency,
        },
        "runs": runs,
        "median_seconds": medians,
        "speedup": one / most if one and most else None,
    }
