"""An http target's `timeout_seconds` bounds the whole call - resolving, connecting, the TLS handshake, sending, the
status line, the headers and the body - not each socket read: a receiver that drips a byte a second cannot hold the
call (and the worker) past it. Each test runs a real server on 127.0.0.1 that misbehaves in one phase."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.http_target import HttpTargetInvoker, TargetConnections
from scheduler.core.model.job import Job, JobSpec, JobState
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS

T0 = datetime(2026, 3, 1, tzinfo=UTC)
TIMEOUT = 2
#: How long past its timeout a cut call may take to return (thread wake-up, closing the socket).
MARGIN = 0.8

Behaviour = Callable[[socket.socket, threading.Event], None]


def read_request(conn: socket.socket) -> None:
    """Read one request's head and its Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return
        rest += chunk


def drip(conn: socket.socket, stop: threading.Event, data: bytes) -> None:
    """Send `data` a byte a second, until the client goes or the test ends (about 10 s: a call that is not cut
    at its 2 s timeout fails the test instead of hanging it)."""
    for byte in data:
        if stop.wait(1.0):
            return
        try:
            conn.sendall(bytes([byte]))
        except OSError:
            return


def drips_the_body(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n")
    drip(conn, stop, b"x" * 10)


def drips_the_headers(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    conn.sendall(b"HTTP/1.1 200 OK\r\n")
    drip(conn, stop, b"X: " + b"y" * 8)


def never_answers(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    stop.wait(30)


def drips_the_status_line(conn: socket.socket, stop: threading.Event) -> None:
    read_request(conn)
    drip(conn, stop, b"HTTP/1.1 200")


def drips_the_tls_handshake(conn: socket.socket, stop: threading.Event) -> None:
    conn.recv(65536)  # the ClientHello
    # A handshake record's header announcing 16 KiB, then its bytes one a second.
    conn.sendall(b"\x16\x03\x03\x40\x00")
    drip(conn, stop, b"\x02" * 10)


def answers_at_once(conn: socket.socket, stop: threading.Event) -> None:
    while not stop.is_set():
        read_request(conn)
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        except OSError:
            return


class Receiver:
    """A TCP server on 127.0.0.1 that handles each connection with `behaviour`, on its own thread."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.stop = threading.Event()
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the client went
            self.behaviour(conn, self.stop)

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.fixture
def receiver() -> Iterator[Callable[[Behaviour], Receiver]]:
    started: list[Receiver] = []

    def start(behaviour: Behaviour) -> Receiver:
        started.append(Receiver(behaviour))
        return started[-1]

    yield start
    for server in started:
        server.close()


def call(url: str, timeout: int = TIMEOUT, delivery: str = "at_least_once") -> TargetCall:
    spec = JobSpec.model_validate(
        {"schedule": {"type": "once", "at": "2026-03-01T00:00:00Z"}, "delivery": delivery,
         "target": {"type": "http", "url": url, "timeout_seconds": timeout}}
    )  # fmt: skip
    job = Job(job_id="j1", tenant="t", spec=spec, version=1, state=JobState.ACTIVE, created_at=T0, updated_at=T0)
    return TargetCall(job, "j1:x", T0, 1, 1, lambda: None, T0)


def invoker(guard: AddressGuard | None = None, connections: TargetConnections | None = None) -> HttpTargetInvoker:
    keys = KeyRing.parse(LOCAL_SIGNING_KEYS)
    return HttpTargetInvoker(guard or AddressGuard(True), keys, connections=connections or TargetConnections())


def timed_failure(invoke: Callable[[], object]) -> tuple[TargetFailure, float]:
    started = time.monotonic()
    with pytest.raises(TargetFailure) as failed:
        invoke()
    return failed.value, time.monotonic() - started


@pytest.mark.parametrize(
    "behaviour",
    [drips_the_body, drips_the_headers, drips_the_status_line, never_answers],
    ids=["body", "headers", "status-line", "silent"],
)
def test_a_receiver_that_answers_too_slowly_is_cut_at_the_timeout(receiver, behaviour: Behaviour) -> None:
    # Given a receiver that takes the request, then answers a byte a second (or not at all)
    server = receiver(behaviour)
    # When the scheduler calls it with a 2 s timeout
    failure, took = timed_failure(lambda: invoker().invoke(call(f"http://127.0.0.1:{server.port}/hook")))
    # Then the call ends at its timeout, as a timeout after the request was sent: the effect may have happened
    assert TIMEOUT - 0.1 <= took <= TIMEOUT + MARGIN, took
    assert failure.kind == "ambiguous"
    assert "timeout" in failure.message.lower()


def test_a_dripped_tls_handshake_is_cut_before_anything_is_sent(receiver) -> None:
    # (CPython's ssl module already bounds a whole handshake by the socket's timeout; this keeps the handshake inside
    # the call's deadline, and the classification: nothing was sent.)
    server = receiver(drips_the_tls_handshake)
    failure, took = timed_failure(lambda: invoker().invoke(call(f"https://127.0.0.1:{server.port}/hook")))
    assert TIMEOUT - 0.1 <= took <= TIMEOUT + MARGIN, took
    assert failure.kind == "retryable"  # the request never left: nothing happened
    assert "timeout" in failure.message.lower()


def test_a_slow_resolver_counts_against_the_timeout() -> None:
    def stuck_resolver(host: str, port: int) -> list[str]:
        time.sleep(TIMEOUT + 3)
        return ["127.0.0.1"]

    guard = AddressGuard(True, resolver=stuck_resolver)
    failure, took = timed_failure(lambda: invoker(guard).invoke(call("http://receiver.example/hook")))
    assert TIMEOUT - 0.1 <= took <= TIMEOUT + MARGIN, took
    assert failure.kind == "retryable"
    assert "resolving host 'receiver.example'" in failure.message


def test_a_finished_calls_deadline_leaves_its_kept_connection_alone(receiver) -> None:
    # Given a call with a 1 s timeout that succeeded at once and left its connection to be reused
    server = receiver(answers_at_once)
    http = invoker(connections=TargetConnections(idle_seconds=30))
    url = f"http://127.0.0.1:{server.port}/hook"
    assert http.invoke(call(url, timeout=1)) == "HTTP 200"
    # When its deadline passes while the connection waits in the pool
    time.sleep(1.3)
    # Then the next call reuses that connection: the deadline did not shut it
    assert http.invoke(call(url, timeout=1)) == "HTTP 200"
    assert server.connections == 1
