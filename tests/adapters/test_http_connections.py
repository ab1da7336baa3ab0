"""The http target keeps connections alive per host and checked address: a worker's calls to
one target host reuse a connection (for HTTPS, its TLS session) instead of opening one per call. Each test runs
a real HTTP/1.1 server on 127.0.0.1 and counts the TCP connections it accepted."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.http_target import HttpTargetInvoker, TargetConnections
from scheduler.adapters.memory.doubles import RecordingMetrics
from scheduler.core.model.job import Job, JobSpec, JobState
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.core.runtime.metrics import NullMetrics
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS
from tests.sdk.http_server import Quiet, serving

T0 = datetime(2026, 3, 1, tzinfo=UTC)


class Target(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.connections = 0
        self.requests = 0
        #: How the next responses end: "keep" (keep-alive), "close-header" (Connection: close), "drop" (keep-alive
        #: promised, then the server closes the connection anyway, as an idle timeout would).
        self.mode = "keep"
        self.status = 200
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class Handler(Quiet, BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Target

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with self.server.lock:
            self.server.requests += 1
        body = b'{"ok":true}'
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(body)))
        if self.server.mode == "close-header":
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        if self.server.mode == "drop":
            self.close_connection = True


@pytest.fixture
def target() -> Iterator[Target]:
    server = Target()
    with serving(server):
        yield server


def call(url: str, delivery: str = "at_least_once") -> TargetCall:
    spec = JobSpec.model_validate(
        {"schedule": {"type": "once", "at": "2026-03-01T00:00:00Z"}, "target": {"type": "http", "url": url},
         "delivery": delivery}
    )  # fmt: skip
    job = Job(job_id="j1", tenant="t", spec=spec, version=1, state=JobState.ACTIVE, created_at=T0, updated_at=T0)
    return TargetCall(job, "j1:x", T0, 1, 1, lambda: None, T0)


def invoker(connections: TargetConnections | None = None, metrics: RecordingMetrics | None = None) -> HttpTargetInvoker:
    keys = KeyRing.parse(LOCAL_SIGNING_KEYS)
    return HttpTargetInvoker(
        AddressGuard(True), keys, connections=connections or TargetConnections(), metrics=metrics or NullMetrics()
    )


def test_calls_to_one_host_reuse_one_connection(target: Target) -> None:
    metrics = RecordingMetrics()
    http = invoker(metrics=metrics)
    results = [http.invoke(call(target.url)) for _ in range(5)]
    assert results == ["HTTP 200"] * 5
    assert target.requests == 5 and target.connections == 1
    assert metrics.counts == {"TargetConnectionsOpened": 1}
    # Without Nagle's delay: on a kept-alive connection the request's body would wait for the server's delayed ACK
    # of its head (40 ms a call)
    kept = http.connections.take(("http", "127.0.0.1", target.server_address[1], "127.0.0.1"))
    assert kept is not None and kept.sock is not None
    assert kept.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_a_connection_is_kept_after_a_failed_status_too(target: Target) -> None:
    http = invoker()
    target.status = 503
    with pytest.raises(TargetFailure) as failed:
        http.invoke(call(target.url))
    assert failed.value.kind == "retryable"
    target.status = 200
    assert http.invoke(call(target.url)) == "HTTP 200"
    assert target.connections == 1


def test_an_at_most_once_job_always_calls_on_a_new_connection(target: Target) -> None:
    # (on a reused connection a server that closed it and one that died with the request look alike)
    http = invoker()
    for _ in range(3):
        http.invoke(call(target.url, delivery="at_most_once"))
    assert target.requests == 3 and target.connections == 3


def test_a_connection_the_server_closed_while_idle_is_replaced_and_the_call_succeeds(target: Target) -> None:
    # Given a server that promises keep-alive and then closes each connection after its response
    metrics = RecordingMetrics()
    http = invoker(metrics=metrics)
    target.mode = "drop"
    assert http.invoke(call(target.url)) == "HTTP 200"
    # When the next call finds the pooled connection closed by the server
    assert http.invoke(call(target.url)) == "HTTP 200"
    # Then it went out once more, on a new connection: the target saw each call once
    assert target.requests == 2 and target.connections == 2
    assert metrics.counts == {"TargetConnectionsOpened": 2, "TargetConnectionsStale": 1}


def test_a_response_that_says_connection_close_is_not_kept(target: Target) -> None:
    metrics = RecordingMetrics()
    http = invoker(metrics=metrics)
    target.mode = "close-header"
    http.invoke(call(target.url))
    http.invoke(call(target.url))
    assert target.connections == 2
    assert metrics.counts == {"TargetConnectionsOpened": 2}  # each call opened its own: none was reused


def test_concurrent_calls_each_get_a_connection_and_leave_them_for_the_next(target: Target) -> None:
    # Given a batch's 10 records calling one host at once, twice over
    http = invoker()
    for _ in range(2):
        threads = [threading.Thread(target=http.invoke, args=(call(target.url),)) for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
    # Then every call went out, on at most 10 connections (the second round reused the first's)
    assert target.requests == 20
    assert target.connections <= 10


class FakeConnection:
    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_connection_is_reused_only_for_the_address_just_checked_and_not_when_idle_too_long() -> None:
    now = [0.0]
    pool = TargetConnections(idle_seconds=4.0, per_host=2, monotonic=lambda: now[0])
    first, second, third = FakeConnection(), FakeConnection(), FakeConnection()
    key = ("https", "hooks.example.com", 443, "93.184.216.34")
    pool.give(key, first)  # type: ignore[arg-type]
    # A new answer from DNS (the guard checked another address): no connection to it
    assert pool.take(("https", "hooks.example.com", 443, "93.184.216.35")) is None
    assert pool.take(key) is first
    pool.give(key, first)  # type: ignore[arg-type]
    now[0] = 5.0
    # Idle past the bound: closed, not reused
    assert pool.take(key) is None and first.closed
    # At most `per_host` idle: the oldest is closed
    for connection in (first, second, third):
        connection.closed = False
        pool.give(key, connection)  # type: ignore[arg-type]
    assert first.closed and not second.closed and not third.closed
    assert pool.take(key) is third


def test_a_redirects_location_is_redacted_in_the_failure() -> None:
    # A receiver answering 302 to a pre-signed URL: the failure (a run's last_error, hence its log line and its
    # completion event) names where it pointed, without the URL's secrets
    class Redirect(Quiet, BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(302)
            self.send_header("Location", "https://bucket.example/obj?X-Amz-Signature=S3CR3T&X-Amz-Expires=60")
            self.send_header("Content-Length", "0")
            self.end_headers()

    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Redirect)) as url, pytest.raises(TargetFailure) as refused:
        invoker().invoke(call(f"{url}/hook"))

    assert refused.value.kind == "permanent"
    assert "HTTP 302 to https://bucket.example/obj?X-Amz-Signature=<redacted>&X-Amz-Expires=<redacted>" in (
        refused.value.message
    )
    assert "S3CR3T" not in refused.value.message
