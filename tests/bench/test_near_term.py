"""The near-term herd's pieces that need no stack: a post the tenant's request rate refuses is waited out and tried
again (and one refused for another reason fails the run), and the herd table names the near-term run apart. The
whole scenario runs in `scripts/bench --burst 1000 --near-term 1000`, never timed here."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scheduler_bench import near_term
from scheduler_bench.report_latency import _burst
from scheduler_bench.submit import Client


@pytest.fixture
def api() -> Iterator[tuple[list[int], str]]:
    """A local API that answers the scripted statuses in turn (429 with Retry-After 0, then 201 with a job id)."""
    script: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            status = script.pop(0) if script else 201
            body = json.dumps({"job_id": "job-1"} if status == 201 else {"detail": "no"}).encode()
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield script, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_post_refused_for_the_request_rate_is_tried_again(api: tuple[list[int], str]) -> None:
    script, base = api
    script += [429, 429]
    assert near_term._post(Client(base), {"schedule": {}}) == "job-1"
    assert script == []


def test_a_post_refused_otherwise_fails_the_run(api: tuple[list[int], str]) -> None:
    script, base = api
    script.append(422)
    with pytest.raises(RuntimeError, match="422"):
        near_term._post(Client(base), {"schedule": {}})


def test_the_herd_table_names_the_near_term_run() -> None:
    late = {"p50": 1.0, "p95": 2.0, "p99": 2.5, "max": 3.0}
    receiver = {"raw_calls": 10, "duplicate_calls": 0, "max_effects_per_key": 1, "missing_keys": 0}
    run = {"kind": "near-term", "jobs": 10, "jitter_seconds": 0, "workers": 2, "worker_peak": 3,
           "lead_seconds": 75.4, "post_seconds": 4.2, "lateness_seconds": late, "early_starts": 0,
           "receiver": receiver, "ledger_states": {"SUCCEEDED": 10}}  # fmt: skip
    text = "\n".join(_burst({"runs": [run], "config": {"workers": 2, "max_workers": 4}}))
    assert "punctual near-term: posted through the API 75 s ahead (in 4 s), pollers 2-3" in text
