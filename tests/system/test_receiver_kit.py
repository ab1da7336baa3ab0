"""The example receiver (examples/receiver, built only from the receiver kit) on the local stack: a job whose
first answer is lost is delivered again and charges once; a forged, altered or replayed call gets 401; the
superseded attempt's call, delivered late, gets 409."""

from __future__ import annotations

import importlib.util
import io
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server

import pytest
from harness import LocalStack, wait_for_run

from scheduler.core.model.timefmt import rfc3339
from tests.sdk.http_server import serving

pytestmark = pytest.mark.system

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "receiver" / "charge_receiver.py"
#: The receiver's clock tolerance, short so that the test can replay a call after it.
TOLERANCE_SECONDS = 10


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("charge_receiver", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Captured:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int


class LossyNetwork:
    """Between the worker and the receiver: records every call as sent, and loses the receiver's first answer
    (the worker sees a 503, as from a proxy whose connection to the receiver broke after the request went in)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.calls: list[Captured] = []

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        headers = {k[5:].replace("_", "-").lower(): v for k, v in environ.items() if k.startswith("HTTP_")}
        headers["content-type"] = environ.get("CONTENT_TYPE", "")
        query = environ.get("QUERY_STRING")
        captured = Captured(environ["PATH_INFO"] + (f"?{query}" if query else ""), headers, body, 0)
        environ["wsgi.input"] = io.BytesIO(body)
        answer: dict[str, Any] = {}

        def keep(status: str, response_headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            answer["status"], answer["headers"] = status, response_headers
            return lambda data: None

        chunks = b"".join(self.app(environ, keep))
        captured.status = int(answer["status"][:3])
        self.calls.append(captured)
        if len(self.calls) == 1:
            start_response("503 Service Unavailable", [("Retry-After", "1"), ("Content-Length", "0")])
            return [b""]
        start_response(answer["status"], answer["headers"])
        return [chunks]


@pytest.fixture
def receiver_url(stack: LocalStack) -> Iterator[tuple[str, list[dict[str, Any]], LossyNetwork]]:
    example = load_example()
    charges: list[dict[str, Any]] = []
    network = LossyNetwork(example.build(stack.base, "t-alice", charges, tolerance_seconds=TOLERANCE_SECONDS))
    server = make_server(
        "127.0.0.1", 0, network, server_class=example.ThreadingServer, handler_class=example.QuietHandler
    )
    with serving(server) as url:
        yield url, charges, network


def send(url: str, call: Captured, **changed_headers: str) -> tuple[int, dict[str, Any] | None]:
    headers = {k: v for k, v in call.headers.items() if k != "host"} | changed_headers
    request = urllib.request.Request(url + call.path, data=call.body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_the_example_receiver_charges_once_and_refuses_forged_replayed_and_stale_calls(
    stack: LocalStack, receiver_url: tuple[str, list[dict[str, Any]], LossyNetwork]
) -> None:
    url, charges, network = receiver_url
    # Given a job due in 2 s whose first answer the network loses
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    job = {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "http", "url": f"{url}/hooks/charge?card=42"},
        "payload": {"amount": 5},
        "retry": {"max_attempts": 3, "initial_backoff_seconds": 1},
    }
    status, created, _ = stack.call("POST", "/v1/jobs", job)
    assert status == 201, created

    # When the worker retries after the lost answer
    run = wait_for_run(stack, created["job_id"], "SUCCEEDED", timeout=30)

    # Then the receiver got both attempts and charged once; the retry was answered with the first result
    first, second = network.calls[:2]
    assert run["attempts"] == 2
    assert [c.status for c in network.calls] == [200, 200]
    assert int(second.headers["x-scheduler-fencing-token"]) > int(first.headers["x-scheduler-fencing-token"])
    assert charges == [{"occurrence_key": f"{created['job_id']}:{rfc3339(at)}", "payload": {"amount": 5}}]

    # The superseded attempt's call, delivered late: its fencing token is lower than one seen -> 409
    status, problem = send(url, first)
    assert status == 409 and problem is not None and problem["title"] == "StaleFencingToken"

    # A forced redelivery of the same signed call: the first answer again, no second charge
    status, answer = send(url, second)
    assert (status, answer) == (200, {"charge": 1, "occurrence_key": first.headers["idempotency-key"]})

    # A forged signature, and a genuine signature on an altered occurrence key -> 401
    status, problem = send(url, second, **{"x-scheduler-signature": f"t={int(time.time())},v2=local1:{'0' * 64}"})
    assert status == 401 and problem is not None and "does not match" in problem["detail"]
    status, problem = send(url, second, **{"idempotency-key": "another-occurrence"})
    assert status == 401

    # A replay of the genuine call once the tolerance has passed -> 401, not a duplicate answer
    signed_at = int(second.headers["x-scheduler-signature"].split(",")[0].removeprefix("t="))
    time.sleep(max(0.0, signed_at + TOLERANCE_SECONDS + 1.5 - time.time()))
    status, problem = send(url, second)
    assert status == 401 and problem is not None and problem["title"] == "StaleRequest"
    assert len(charges) == 1
