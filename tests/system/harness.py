"""Helpers for system tests: the local stack started as `scripts/dev` starts it, and a receiver."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import boto3
import pytest

from scheduler.provision import deprovision
from scheduler_bench.receiver import ReceiverServer
from scheduler_local.emulators import ROOT, free_port
from scheduler_local.process import StackProcess
from tests.sdk.http_server import Quiet


@dataclass
class Call:
    at: float
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A local HTTP target. `respond(call_number, headers) -> (status, headers)` decides each answer."""

    respond: Callable[[int, dict[str, str]], tuple[int, dict[str, str]]] = lambda n, h: (200, {})
    calls: list[Call] = field(default_factory=list)

    def start(self) -> Receiver:
        outer = self

        class Handler(Quiet, BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k.lower(): v for k, v in self.headers.items()}
                outer.calls.append(Call(time.time(), headers, body))
                status, extra = outer.respond(len(outer.calls), headers)
                self.send_response(status)
                for key, value in extra.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ReceiverServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()

    def wait_for(self, count: int, timeout: float) -> list[Call]:
        deadline = time.time() + timeout
        while time.time() < deadline and len(self.calls) < count:
            time.sleep(0.05)
        return list(self.calls)


class LocalStack(StackProcess):
    """The local stack (what scripts/dev runs) in its own state folder and port, with dev tokens for the tests."""

    def __init__(
        self, state_dir: Path, env: dict[str, str], tokens: str = "t-alice=alice,t-bob=bob,t-fuzz=fuzz"
    ) -> None:
        super().__init__(
            state_dir,
            {**env, "SCHEDULER_DEV_TOKENS": tokens, "SCHEDULER_LOCAL_PREFIX": f"sys{os.getpid()}{free_port()}"},
        )

    def start(self, timeout: float = 120) -> LocalStack:
        super().start(timeout)
        return self

    def stop(self) -> None:
        """Stop it, then delete its tables, queues and bus from the suite's emulators, which outlive it (a stack that
        started emulators of its own took them down with it)."""
        super().stop()
        if self.env.get("AWS_ENDPOINT_URL_DYNAMODB"):
            clients = (local_client(service, self.env) for service in ("dynamodb", "sqs", "events"))
            deprovision(self.env["SCHEDULER_LOCAL_PREFIX"], *clients)

    def kill(self, name: str) -> None:
        os.kill(self.pid(name), signal.SIGKILL)

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        token: str | None = "t-alice",
        headers: dict[str, str] | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                text = response.read().decode()
                return response.status, json.loads(text) if text else None, dict(response.headers)
        except urllib.error.HTTPError as exc:
            text = exc.read().decode()
            return exc.code, json.loads(text) if text else None, dict(exc.headers)


def local_client(service: str, endpoints: Mapping[str, str]) -> Any:
    """A boto3 client of `service` on the local emulators that `endpoints` names (the `aws_endpoints` fixture or a
    stack's own values): its `AWS_ENDPOINT_URL_<SERVICE>`, else `AWS_ENDPOINT_URL`, with their credentials and region
    (the local ones where they name none)."""
    return boto3.client(  # type: ignore[call-overload]
        service,
        endpoint_url=endpoints.get(f"AWS_ENDPOINT_URL_{service.upper()}") or endpoints["AWS_ENDPOINT_URL"],
        region_name=endpoints.get("AWS_DEFAULT_REGION", "us-east-1"),
        aws_access_key_id=endpoints.get("AWS_ACCESS_KEY_ID", "local"),
        aws_secret_access_key=endpoints.get("AWS_SECRET_ACCESS_KEY", "local"),
    )


def wait_for_run(stack: LocalStack, job_id: str, state: str, timeout: float = 30) -> dict[str, Any]:
    """The job's newest run once it is in `state`; fails the test if it is not within `timeout` seconds."""
    deadline = time.time() + timeout
    runs: dict[str, Any] = {}
    while time.time() < deadline:
        _, body, _ = stack.call("GET", f"/v1/jobs/{job_id}/runs")
        if body["runs"] and body["runs"][0]["state"] == state:
            return dict(body["runs"][0])
        runs = body
        time.sleep(0.3)
    raise AssertionError(f"no {state} run within {timeout}s: {runs}")


def serve(stack: LocalStack) -> Iterator[LocalStack]:
    """Run `stack` for as long as the fixture that yields from this lives."""
    local = stack.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A local HTTP target for one test."""
    rx = Receiver().start()
    yield rx
    rx.stop()


@dataclass(frozen=True)
class Browser:
    """Debian's chromium and the Python of .local/browser's venv (Playwright), for the console's browser tests."""

    chromium: str
    python: str

    def run(self, script: str, given: Mapping[str, Any], timeout: float) -> subprocess.CompletedProcess[str]:
        """Run the scenario tests/system/<script> with `given` as its one JSON argument."""
        return subprocess.run(
            [self.python, str(Path(__file__).with_name(script)), json.dumps(given)],
            env={**os.environ, "CHROMIUM": self.chromium},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def steps(self, script: str, given: Mapping[str, Any], timeout: float) -> list[str]:
        """Run the scenario, echo what it printed, fail with its reason (and where its failure.png is) unless it
        succeeded, and return the names of the steps it checked, in order."""
        result = self.run(script, given, timeout)
        steps = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        sys.stdout.write(result.stdout)
        shots = given.get("screenshots")
        assert result.returncode == 0, f"{result.stderr[-4000:]}\nsteps: {steps}\n(see {shots}/failure.png)"
        return [str(s["step"]) for s in steps]


@pytest.fixture(scope="session")
def browser() -> Browser:
    """The console tests' browser, installed first when missing (`ensure_browser` in scripts/lib/bootstrap.sh)."""
    script = 'source scripts/lib/bootstrap.sh && ensure_browser && echo "$CHROMIUM" && echo "$BROWSER_PYTHON"'
    # One install at a time: each xdist worker that runs a console test asks, and two installing into the same
    # .local/browser at once would break each other's venv (and apt-get takes one caller at a time).
    lock = ROOT / ".local" / "browser.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        result = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        pytest.fail(f"could not install the browser test's tools:\n{result.stderr}")
    chromium, python = result.stdout.split()[-2:]
    return Browser(chromium, python)
