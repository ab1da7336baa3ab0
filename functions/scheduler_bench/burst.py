"""Scenario 3: a burst of jobs due in the same second, through the local stack's real processes.

The jobs are created ahead through the JobService on fresh tables (in this process, on real time), all due at
one instant T (or at T plus their deterministic jitter); then `python -m scheduler_local` - what scripts/dev
runs: the api, the sweeper every second and the worker pollers as separate processes - is started on the same
tables. Its sweeper sees the due buckets within its look-ahead and hands the messages to SQS with their delays;
the workers call a receiver in this process. Measured: time to dispatch all (polled: the ready queue's depth and the
sweeps' own counts, since a message may carry several occurrences),
start lateness at the receiver (arrival - fire_at, fire_at including jitter), and duplicates.

Locally the workers are a few poller processes (scaled with the backlog, `scheduler_local.scaling`) on a shared
machine in front of ministack and DynamoDB Local: lateness here is the local stack's throughput, not AWS's. The
same run against real AWS needs the endpoints of a real account. Each herd size and jitter is followed, in the same
run, by the peer (`scheduler_bench.peer`: APScheduler 3 on SQLite, one and two processes) on the same receiver.
"""

from __future__ import annotations

import json
import math
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.adapters.clock import SystemClock
from scheduler.core.model.job import JobSpec
from scheduler.core.model.keys import fire_at
from scheduler.core.model.timefmt import rfc3339
from scheduler.settings import Settings
from scheduler_bench.cpu_profile import CpuWindow, per_fire_cpu
from scheduler_bench.environment import ROOT, create_resources, delete_resources
from scheduler_bench.receiver import Receiver
from scheduler_bench.services import build, client, settings_for
from scheduler_local.process import StackProcess

SUBMIT_THREADS = 8
TENANTS = 32
MIN_DISPATCH_RATE = 20.0
STACK_START_SECONDS = 15.0
#: The bench's stacks look ahead as far as SQS delays allow (780 s, the setting's maximum), so that a herd of
#: 5,000 created on a slow machine is still handed over ahead of its fire time.
LOOKAHEAD_SECONDS = 780


@dataclass(frozen=True)
class BurstConfig:
    """The herd sizes and jitter settings to run, the local stack's worker pollers (minimum and ceiling), its
    state folder, and the peer's process counts (empty: no peer)."""

    sizes: tuple[int, ...] = (200, 1_000, 5_000)
    jitters: tuple[int, ...] = (0, 10)
    workers: int = 2
    max_workers: int = 4
    state_dir: Path = ROOT / "bench" / "tmp"
    peer_processes: tuple[int, ...] = (1, 2)
    submit_jobs: int = 400
    #: The local sweeper's buckets swept at once (SCHEDULER_SWEEP_CONCURRENCY), one run each: 1,8 is before/after.
    sweep_concurrency: tuple[int, ...] = (8,)
    #: A near-term herd of this many posted through the API shortly before it falls due (scheduler_bench.near_term),
    #: after the swept herds; 0: none.
    near_term_jobs: int = 0


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(p / 100 * len(ordered))))
    return ordered[rank - 1]


class BurstStack(StackProcess):
    """The local stack on this run's tables and the current endpoints, with `workers` worker processes."""

    def __init__(
        self, state_dir: Path, prefix: str, workers: int, max_workers: int, sweep_concurrency: int = 8
    ) -> None:
        env = {
            "SCHEDULER_LOCAL_PREFIX": prefix,
            "SCHEDULER_LOCAL_WORKERS": str(workers),
            "SCHEDULER_LOCAL_MAX_WORKERS": str(max_workers),
            "SCHEDULER_LOOKAHEAD_SECONDS": str(LOOKAHEAD_SECONDS),
            "SCHEDULER_SWEEP_CONCURRENCY": str(sweep_concurrency),
        }
        super().__init__(state_dir, env)

    def worker_peak(self) -> int:
        """The most worker pollers the supervisor ran at once (from its "worker pollers scaled" lines)."""
        peak = 0
        for line in self.log.read_text(errors="replace").splitlines() if self.log.exists() else []:
            if '"worker pollers scaled"' in line:
                try:
                    peak = max(peak, int(json.loads(line)["to"]))
                except (ValueError, KeyError):
                    continue
        return peak

    def sweeps(self) -> list[dict[str, Any]]:
        """The sweeper's "sweep finished" log records (JSON lines)."""
        records = []
        path = self.state_dir / "logs" / "sweeper.log"
        for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
            if '"sweep finished"' not in line:
                continue
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records


def _queue_depth(sqs: Any, url: str) -> int:
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesDelayed",
        "ApproximateNumberOfMessagesNotVisible",
    ]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    return sum(int(attributes.get(n, 0)) for n in names)


def _calibrate(services: Any, spec_at: Callable[[datetime], tuple[JobSpec, dict[str, Any]]], count: int) -> float:
    """Seconds one JobService.create takes here, sequentially (far-future jobs that never fire)."""
    spec, body = spec_at(datetime.now(UTC) + timedelta(days=365))
    began = time.perf_counter()
    for _ in range(count):
        services.job_service.create("calibration", spec, None, body)
    return (time.perf_counter() - began) / count


def run_one(
    config: BurstConfig,
    jobs: int,
    jitter: int,
    receiver: Receiver,
    log: Callable[[str], None],
    sweep_concurrency: int = 8,
) -> dict[str, Any]:
    """One burst of `jobs` jobs due at one instant, with `jitter` seconds of jitter, on the local stack whose
    sweeper sweeps `sweep_concurrency` buckets at once."""
    prefix = f"bb{uuid.uuid4().hex[:10]}"
    plain_ddb, plain_sqs, plain_events = client("dynamodb"), client("sqs"), client("events")
    resources = create_resources(prefix, plain_ddb, plain_sqs, plain_events)
    stack = BurstStack(config.state_dir / prefix, prefix, config.workers, config.max_workers, sweep_concurrency)
    try:
        settings = settings_for(resources, Settings().signing_secret, 10_000_000)
        services = build(settings, plain_ddb, plain_sqs, plain_events, SystemClock(), settings.signing_secret)

        def spec_at(at: datetime) -> tuple[JobSpec, dict[str, Any]]:
            body = {
                "schedule": {"type": "once", "at": rfc3339(at)},
                "target": {"type": "http", "url": receiver.url},
                "payload": {"bench": "burst"},
                "jitter_seconds": jitter,
            }
            return JobSpec.model_validate(body), body

        # The jobs first (nothing else running), then the stack; T after a lead that leaves room to create them
        # (8 threads on this machine: about twice the sequential rate), start the stack, and let its sweeper
        # dispatch them all before T at the slowest rate seen locally (about 20 a second, under load).
        per_job = _calibrate(services, spec_at, 20)
        submit_estimate = 1.2 * jobs * per_job / 2
        lead = submit_estimate + STACK_START_SECONDS + jobs / MIN_DISPATCH_RATE + 5
        lead = min(lead, LOOKAHEAD_SECONDS - 30)  # the first sweep must see T's bucket
        due = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0) + timedelta(seconds=1)
        spec, body = spec_at(due)
        log(f"burst: creating {jobs} jobs due at {rfc3339(due)} (jitter {jitter}s; in {lead:.0f}s)")
        began = time.time()
        with ThreadPoolExecutor(SUBMIT_THREADS) as pool:
            job_ids = list(
                pool.map(
                    lambda i: services.job_service.create(f"burst{i % TENANTS}", spec, None, body).job.job_id,
                    range(jobs),
                )
            )
        submit_seconds = time.time() - began
        expected = {job_id: fire_at(job_id, due, jitter) for job_id in job_ids}
        log("burst: starting the local stack (api, sweeper, workers) on these tables")
        stack_began = time.time()
        stack.start()
        stack_started = time.time()

        cpu = CpuWindow().start()
        first_seen = all_seen = None
        # Bounded: on a slow or busy machine the run ends (and reports what it saw) rather than waiting on.
        deadline = due.timestamp() + jitter + max(120.0, jobs * 0.05)
        while time.time() < deadline:
            # The queue's depth counts messages, and a message may carry several occurrences: the sweeps' own count
            # (each finished sweep's log record) says how many were sent, at the latest when the sweep ends.
            depth = _queue_depth(plain_sqs, resources.ready_queue_url)
            received = len({c.key for c in receiver.calls if c.job_id in expected})
            swept = sum(int(s.get("dispatched", 0)) for s in stack.sweeps())
            dispatched = max(depth + received, swept)
            now = time.time()
            if first_seen is None and dispatched > 0:
                first_seen = now
            if all_seen is None and dispatched >= jobs:
                all_seen = now
                break
            time.sleep(0.25)
        keys = {f"{j}:{rfc3339(due)}" for j in job_ids}
        log("burst: waiting for every occurrence to reach the receiver")
        # The drain: from the first fire time to the last arrival, what the machine spent on the fires themselves
        # (the whole-run window above also holds the submission's sweep, the dispatch and the idle wait).
        time.sleep(max(0.0, due.timestamp() - time.time()))
        drain = CpuWindow().start()
        arrived = receiver.wait_for(keys, timeout=max(1.0, deadline - time.time()))
        drain_profile = drain.stop()
        time.sleep(1.5)  # a little longer, to catch a late duplicate
        profile = cpu.stop()
        stack.stop()
        sweeps = stack.sweeps()

        lateness = receiver.lateness(expected)
        states = _ledger_states(plain_ddb, resources.executions_table)
        dispatching = [s for s in sweeps if s.get("dispatched", 0) > 0]
        result: dict[str, Any] = {
            "system": f"punctual (local stack, {config.workers}-{config.max_workers} pollers)",
            "jobs": jobs,
            "jitter_seconds": jitter,
            "workers": config.workers,
            "worker_peak": max(config.workers, stack.worker_peak()),
            "sweep_concurrency": sweep_concurrency,
            "due_at": rfc3339(due),
            "lead_seconds": lead,
            "create_seconds_per_job_sequential": per_job,
            "submit_seconds": submit_seconds,
            "submit_finished_before_due_seconds": due.timestamp() - (began + submit_seconds),
            "stack_start_seconds": stack_started - stack_began,
            "dispatch": {
                "first_message_at_minus_due": (first_seen - due.timestamp()) if first_seen else None,
                "all_dispatched_at_minus_due": (all_seen - due.timestamp()) if all_seen else None,
                "seconds_to_dispatch_all": (all_seen - first_seen) if all_seen and first_seen else None,
                "sweeps_that_dispatched": len(dispatching),
                "dispatched_by_sweeps": sum(int(s.get("dispatched", 0)) for s in dispatching),
                "sweeps_stopped_early": sum(1 for s in dispatching if s.get("stopped_early")),
            },
            "arrived": arrived,
            "lateness_seconds": summary(lateness),
            "early_starts": sum(1 for x in lateness if x < 0),
            "receiver": receiver.summary(keys),
            "ledger_states": states,
            "lateness_samples": sorted(round(x, 4) for x in lateness),
            "cpu_profile": profile,
            "drain_cpu": per_fire_cpu(drain_profile, arrived),
        }
        log(
            f"burst: jitter {jitter}s: {len(lateness)}/{jobs} arrived; lateness p50 "
            f"{result['lateness_seconds'].get('p50', float('nan')):.2f}s p99 "
            f"{result['lateness_seconds'].get('p99', float('nan')):.2f}s"
        )
        shutil.rmtree(stack.state_dir, ignore_errors=True)  # its logs are kept only when the run failed
        return result
    finally:
        stack.stop()
        delete_resources(resources, plain_ddb, plain_sqs, plain_events)


def summary(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "count": len(values),
        "min": min(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values),
        "mean": sum(values) / len(values),
    }


def _ledger_states(dynamodb: Any, table: str) -> dict[str, int]:
    """How many occurrences the ledger holds in each state (a Scan after the run; not metered)."""
    states: dict[str, int] = {}
    request: dict[str, Any] = {
        "TableName": table,
        "ProjectionExpression": "#s",
        "ExpressionAttributeNames": {"#s": "state"},
    }
    while True:
        response = dynamodb.scan(**request)
        for item in response.get("Items", []):
            state = item.get("state", {}).get("S", "?")
            states[state] = states.get(state, 0) + 1
        if not response.get("LastEvaluatedKey"):
            return states
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def run(config: BurstConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """One burst per size and jitter setting, each on its own tables and its own local stack, each followed by the
    peer's runs of the same size and jitter; then the submit rate through the local API."""
    from scheduler_bench import near_term, peer, submit

    receiver = Receiver().start()
    runs: list[dict[str, Any]] = []
    python = peer.ensure_installed(log) if config.peer_processes else None
    try:
        for jobs in config.sizes:
            for jitter in config.jitters:
                for concurrency in config.sweep_concurrency:
                    runs.append(run_one(config, jobs, jitter, receiver, log, concurrency))
                for processes in config.peer_processes:
                    assert python is not None
                    runs.append(peer.run_one(python, jobs, jitter, processes, receiver, config.state_dir, log))
        if config.near_term_jobs:
            runs.append(near_term.run_one(config, config.near_term_jobs, receiver, log))
        submitted = submit.run(config, log) if config.submit_jobs else None
        return {
            "config": {
                "sizes": list(config.sizes),
                "jitters": list(config.jitters),
                "workers": config.workers,
                "max_workers": config.max_workers,
                "peer_processes": list(config.peer_processes),
                "sweep_concurrency": list(config.sweep_concurrency),
                "near_term_jobs": config.near_term_jobs,
            },
            "runs": runs,
            "submit": submitted,
        }
    finally:
        receiver.stop()
