"""Handler tests: each Lambda handler is called with real-shaped events against fresh DynamoDB Local tables and
moto queues, configured through the same SCHEDULER_* environment the CDK stack sets.

Test modules cannot import each other under `--import-mode=importlib`, so shared helpers are fixtures.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scheduler.handlers import api, sweeper, wiring, worker
from scheduler.handlers.local_invocation import LocalContext, to_event
from scheduler.provision import Resources
from tests.sdk.http_server import Quiet, serving

TENANT_A = "arn:aws:iam::111111111111:user/alice"
TENANT_B = "arn:aws:iam::222222222222:user/bob"


@pytest.fixture
def hook() -> Iterator[tuple[str, list[str]]]:
    """A webhook on 127.0.0.1 that answers 200 and records each call's Idempotency-Key."""
    calls: list[str] = []

    class Handler(Quiet, BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            calls.append(self.headers["Idempotency-Key"])
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as url:
        yield f"{url}/hook", calls


@pytest.fixture
def env(resources: Resources, monkeypatch: pytest.MonkeyPatch) -> Iterator[Resources]:
    """The functions' environment for this test's tables and queues, and a fresh container (as in a new Lambda
    execution environment)."""
    for name, value in resources.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SCHEDULER_ALLOW_PRIVATE_TARGETS", "true")
    for name in ("SCHEDULER_SIGNING_SECRET", "SCHEDULER_SIGNING_SECRET_ARN", "SCHEDULER_SHARD_COUNT"):
        monkeypatch.delenv(name, raising=False)
    # The stack sets POWERTOOLS_METRICS_NAMESPACE; the handlers' Metrics objects read it at import time.
    for module in (api, worker, sweeper):
        monkeypatch.setattr(module.metrics.provider, "namespace", "PunctualTest")
    wiring.container.cache_clear()
    yield resources
    wiring.container.cache_clear()


@dataclass
class ApiResponse:
    status: int
    headers: dict[str, str]
    text: str
    body: Any = field(default=None)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)


def call_api(
    method: str,
    path: str,
    body: Any = None,
    *,
    tenant: str | None = TENANT_A,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> ApiResponse:
    """Call the api handler with the API Gateway REST proxy event the local server would build."""
    sent_headers = {"Content-Type": "application/json", **(headers or {})}
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    event = to_event(method, path, sent_headers, data, tenant, "127.0.0.1")
    response = api.lambda_handler(event, LocalContext("punctual-api", 29))
    merged: dict[str, str] = {}
    for key, values in (response.get("multiValueHeaders") or {}).items():
        merged[key] = ", ".join(values)
    merged.update(response.get("headers") or {})
    text = response.get("body") or ""
    parsed = json.loads(text) if text else None
    return ApiResponse(int(response["statusCode"]), merged, text, parsed)


@pytest.fixture
def api_call(env: Resources) -> Callable[..., ApiResponse]:
    return call_api


@pytest.fixture
def snapshot(env: Resources, dynamodb_client: Any) -> Callable[[], Any]:
    """Everything stored: both tables, item by item (to prove a rejected request wrote nothing)."""

    def scan(table: str) -> list[Any]:
        items: list[Any] = []
        request: dict[str, Any] = {"TableName": table, "ConsistentRead": True}
        while True:
            page = dynamodb_client.scan(**request)
            items += page.get("Items", [])
            if not page.get("LastEvaluatedKey"):
                break
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return sorted(items, key=lambda i: json.dumps(i, sort_keys=True))

    return lambda: (scan(env.jobs_table), scan(env.executions_table))
