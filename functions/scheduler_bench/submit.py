"""Submit rate: jobs accepted per second through the local stack's HTTP API (`POST /v1/jobs`), one job per request
from 8 concurrent clients (each its own keep-alive connection), and in batches when the API has
`POST /v1/jobs/batch` (25 a request, its limit). One-shot jobs a year ahead, so nothing fires while it is measured."""

from __future__ import annotations

import http.client
import json
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from scheduler.core.model.timefmt import rfc3339
from scheduler_bench.environment import create_resources, delete_resources
from scheduler_bench.services import client

if TYPE_CHECKING:
    from scheduler_bench.burst import BurstConfig

CLIENTS = 8
BATCH = 25
TOKEN = "dev-token"


def _body(at: datetime) -> dict[str, Any]:
    return {
        "name": "submit-rate",
        "schedule": {"type": "once", "at": rfc3339(at)},
        # A loopback literal, as the local stack allows: a host name would have every create resolve it (the target
        # check refuses names that lead to link-local addresses), and this machine's resolver - which has no
        # network - takes 170 ms to say it does not know example.com; the figure would be the resolver's.
        "target": {"type": "http", "url": "http://127.0.0.1:9/hook"},
        "payload": {"bench": "submit"},
    }


class Client:
    """One keep-alive connection to the API."""

    def __init__(self, base: str) -> None:
        url = urlparse(base)
        self.connection = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)

    def post(self, path: str, body: Any) -> tuple[int, int]:
        """(the HTTP status, the jobs it accepted: one for a 200/201, a batch's items answered 200/201)."""
        self.connection.request(
            "POST",
            path,
            body=json.dumps(body),
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        response = self.connection.getresponse()
        answer = json.loads(response.read() or b"{}")
        if response.status not in (200, 201):
            return response.status, 0
        results = answer.get("results")
        accepted = 1 if results is None else sum(1 for r in results if r.get("status") in (200, 201))
        return response.status, accepted


def _rate(base: str, requests: int, path: str, body: Callable[[int], Any], per_request: int) -> dict[str, Any]:
    clients = [Client(base) for _ in range(CLIENTS)]
    answers: list[tuple[int, int]] = []

    def work(worker: int) -> list[tuple[int, int]]:
        return [clients[worker].post(path, body(i)) for i in range(worker, requests, CLIENTS)]

    began = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        for done in pool.map(work, range(CLIENTS)):
            answers += done
    seconds = time.perf_counter() - began
    statuses = [status for status, _ in answers]
    accepted = sum(jobs for _, jobs in answers)
    return {
        "clients": CLIENTS,
        "requests": requests,
        "jobs_per_request": per_request,
        "seconds": seconds,
        "accepted_jobs": accepted,
        "jobs_per_second": accepted / seconds if seconds else None,
        "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
    }


def _batch_path(base: str) -> str | None:
    connection = Client(base).connection
    connection.request("GET", "/v1/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"})
    response = connection.getresponse()
    body = response.read()
    document = json.loads(body or b"{}") if response.status == 200 else {}
    paths = document.get("paths", {})
    return next((path for path in ("/v1/jobs/batch", "/v1/jobs:batch") if path in paths), None)


def _store_rate(resources: Any, jobs: int, at: datetime, per_call: int = 1) -> dict[str, Any]:
    """The ceiling under the API: `JobService.create` (or, `per_call` > 1, `create_many` of that many) called in this
    process from 8 threads on the same tables (no HTTP, no handler): what DynamoDB Local accepts of the create
    transaction on this machine."""
    from scheduler.adapters.clock import SystemClock
    from scheduler.core.jobs.service import Created, Submission
    from scheduler.core.model.job import JobSpec
    from scheduler.settings import Settings
    from scheduler_bench.services import build, settings_for

    plain_ddb, plain_sqs, plain_events = client("dynamodb"), client("sqs"), client("events")
    settings = settings_for(resources, Settings().signing_secret, 10_000_000)
    services = build(settings, plain_ddb, plain_sqs, plain_events, SystemClock(), settings.signing_secret)
    body = _body(at)
    spec = JobSpec.model_validate(body)
    service = services.job_service

    def create(call: int) -> int:
        tenant = f"store{call % CLIENTS}"
        if per_call == 1:
            service.create(tenant, spec, None, body)
            return 1
        answers = service.create_many(tenant, [Submission(spec, None, body)] * per_call)
        return sum(1 for answer in answers if isinstance(answer, Created))

    calls = max(1, jobs // per_call)
    began = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        created = sum(pool.map(create, range(calls)))
    seconds = time.perf_counter() - began
    return {
        "clients": CLIENTS,
        "requests": calls,
        "jobs_per_request": per_call,
        "seconds": seconds,
        "accepted_jobs": created,
        "jobs_per_second": created / seconds if seconds else None,
        "statuses": {"in-process": calls},
    }


def run(config: BurstConfig, log: Callable[[str], None]) -> dict[str, Any]:
    from scheduler_bench.burst import BurstStack

    prefix = f"bs{uuid.uuid4().hex[:10]}"
    plain_ddb, plain_sqs, plain_events = client("dynamodb"), client("sqs"), client("events")
    resources = create_resources(prefix, plain_ddb, plain_sqs, plain_events)
    stack = BurstStack(config.state_dir / prefix, prefix, config.workers, config.max_workers)
    at = datetime.now(UTC) + timedelta(days=365)
    try:
        stack.start()
        one = _rate(stack.base, config.submit_jobs, "/v1/jobs", lambda i: _body(at), 1)
        log(f"submit: one by one, {CLIENTS} clients: {one['jobs_per_second']:.0f} jobs/s ({one['statuses']})")
        out: dict[str, Any] = {"one_by_one": one, "batch": None, "store": None}
        out["store"] = _store_rate(resources, config.submit_jobs, at)
        log(f"submit: JobService.create in-process, {CLIENTS} threads: {out['store']['jobs_per_second']:.0f} jobs/s")
        path = _batch_path(stack.base)
        if path:
            requests = max(1, config.submit_jobs * 5 // BATCH)
            body = {"items": [{"job": _body(at)} for _ in range(BATCH)]}
            batch = _rate(stack.base, requests, path, lambda i: body, BATCH)
            log(f"submit: batches of {BATCH}: {batch['jobs_per_second']:.0f} jobs/s ({batch['statuses']})")
            out["batch"] = batch
            out["store_batch"] = _store_rate(resources, config.submit_jobs * 5, at, per_call=BATCH)
            rate = out["store_batch"]["jobs_per_second"]
            log(f"submit: JobService.create_many of {BATCH} in-process, {CLIENTS} threads: {rate:.0f} jobs/s")
        return out
    finally:
        stack.stop()
        delete_resources(resources, plain_ddb, plain_sqs, plain_events)
