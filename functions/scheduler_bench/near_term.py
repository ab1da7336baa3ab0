"""The near-term herd: one-shot jobs posted through the local API shortly before they all fall due.

Inside the look-ahead the API does not leave a new job to the sweeper: it writes the timer, finds the bucket may
already be swept, and hands the occurrence to the ready queue itself (docs/design.md §3.2), one message per job. The
swept herd (`scheduler_bench.burst`) is created before the stack starts and reaches the queue in the sweep's
packed messages. This runs the same size through the API, as a client would post it - 8 connections, one job a
request, one tenant, its requests limited as any tenant's (a 429 is waited out as its Retry-After says) - all due
`lead_seconds` after the first post, on the same kind of local stack, and measures the same things: start lateness
at the receiver, duplicates, missing, the ledger's states, and the machine's CPU through the drain.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from scheduler.core.model.timefmt import rfc3339
from scheduler_bench.cpu_profile import CpuWindow, per_fire_cpu
from scheduler_bench.environment import create_resources, delete_resources
from scheduler_bench.receiver import Receiver
from scheduler_bench.services import client
from scheduler_bench.submit import CLIENTS, Client

if TYPE_CHECKING:
    from scheduler_bench.burst import BurstConfig

#: How long after the first post the herd falls due, as in the issue's report (inside the 300 s look-ahead).
LEAD_SECONDS = 75.0
#: A post the API refused for the tenant's request rate is tried again this many times at most.
RETRIES = 50


def _post(api: Client, body: dict[str, Any]) -> str:
    """POST /v1/jobs; the new job's id. A 429 waits its Retry-After and tries again; anything else but 201 fails."""
    for _ in range(RETRIES):
        api.connection.request(
            "POST",
            "/v1/jobs",
            body=json.dumps(body),
            headers={"Authorization": "Bearer dev-token", "Content-Type": "application/json"},
        )
        response = api.connection.getresponse()
        answer = json.loads(response.read() or b"{}")
        if response.status == 201:
            return str(answer["job_id"])
        if response.status != 429:
            raise RuntimeError(f"POST /v1/jobs answered {response.status}: {answer}")
        time.sleep(float(response.getheader("Retry-After") or 1))
    raise RuntimeError(f"POST /v1/jobs was refused {RETRIES} times for the tenant's request rate")


def run_one(config: BurstConfig, jobs: int, receiver: Receiver, log: Callable[[str], None]) -> dict[str, Any]:
    """`jobs` one-shot jobs posted through the API of a running local stack, all due LEAD_SECONDS after the first."""
    from scheduler_bench.burst import BurstStack, _ledger_states, summary

    prefix = f"bn{uuid.uuid4().hex[:10]}"
    plain_ddb, plain_sqs, plain_events = client("dynamodb"), client("sqs"), client("events")
    resources = create_resources(prefix, plain_ddb, plain_sqs, plain_events)
    stack = BurstStack(config.state_dir / prefix, prefix, config.workers, config.max_workers)
    try:
        stack.start()
        began = time.time()
        due = datetime.fromtimestamp(began + LEAD_SECONDS, UTC).replace(microsecond=0) + timedelta(seconds=1)
        body = {
            "name": "near-term-herd",
            "schedule": {"type": "once", "at": rfc3339(due)},
            "target": {"type": "http", "url": receiver.url},
            "payload": {"bench": "near-term"},
        }
        log(f"near-term herd: posting {jobs} jobs through the API, due at {rfc3339(due)}")
        clients = [Client(stack.base) for _ in range(CLIENTS)]
        job_ids: list[str] = []
        lock = threading.Lock()

        def work(worker: int) -> None:
            for _ in range(worker, jobs, CLIENTS):
                job_id = _post(clients[worker], body)
                with lock:
                    job_ids.append(job_id)

        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(work, range(CLIENTS)))
        posted = time.time() - began
        expected = dict.fromkeys(job_ids, due)
        keys = {f"{job_id}:{rfc3339(due)}" for job_id in job_ids}
        time.sleep(max(0.0, due.timestamp() - time.time()))
        drain = CpuWindow().start()
        arrived = receiver.wait_for(keys, timeout=max(120.0, jobs * 0.05))
        drain_profile = drain.stop()
        time.sleep(1.5)  # a little longer, to catch a late duplicate
        stack.stop()
        lateness = receiver.lateness(expected)
        result: dict[str, Any] = {
            "system": f"punctual near-term (local stack, {config.workers}-{config.max_workers} pollers)",
            "kind": "near-term",
            "jobs": jobs,
            "jitter_seconds": 0,
            "workers": config.workers,
            "worker_peak": max(config.workers, stack.worker_peak()),
            "due_at": rfc3339(due),
            "lead_seconds": due.timestamp() - began,
            "post_seconds": posted,
            "posted_before_due_seconds": due.timestamp() - (began + posted),
            "arrived": arrived,
            "lateness_seconds": summary(lateness),
            "early_starts": sum(1 for x in lateness if x < 0),
            "receiver": receiver.summary(keys),
            "ledger_states": _ledger_states(plain_ddb, resources.executions_table),
            "lateness_samples": sorted(round(x, 4) for x in lateness),
            "drain_cpu": per_fire_cpu(drain_profile, arrived),
        }
        log(
            f"near-term herd: posted in {posted:.1f}s; {len(lateness)}/{jobs} arrived; lateness p50 "
            f"{result['lateness_seconds'].get('p50', float('nan')):.2f}s p99 "
            f"{result['lateness_seconds'].get('p99', float('nan')):.2f}s"
        )
        shutil.rmtree(stack.state_dir, ignore_errors=True)
        return result
    finally:
        stack.stop()
        delete_resources(resources, plain_ddb, plain_sqs, plain_events)
