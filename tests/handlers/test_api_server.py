"""The local API adapter never wedges: a bounded pool, socket timeouts, a bounded wait for the
handler, and a health check that depends on nothing. On 127.0.0.1 only, with a fake handler."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from scheduler_local import api_server
from scheduler_local.api_server import BoundedServer, make_handler
from tests.sdk.http_server import serving


class BlockingHandler:
    """A Lambda handler that blocks until released (a hung emulator call), recording the methods it saw."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.methods: list[str] = []

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        self.methods.append(event["httpMethod"])
        if event["path"] == "/v1/slow":
            self.entered.set()
            self.release.wait(10)
        return {"statusCode": 405 if event["httpMethod"] == "TRACE" else 200, "headers": {}, "body": "{}"}


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[BlockingHandler, int]]:
    monkeypatch.setattr(api_server, "HANDLER_WAIT", 0.5)
    monkeypatch.setattr(api_server, "SOCKET_TIMEOUT", 1.0)
    handler = BlockingHandler()
    server = BoundedServer(("127.0.0.1", 0), make_handler(handler, {"t": "tenant"}), workers=3)
    with serving(server):
        yield handler, server.server_address[1]
        handler.release.set()


def request(port: int, method: str, path: str) -> tuple[int, dict[str, Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request(method, path, headers={"Authorization": "Bearer t"})
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, json.loads(body) if body else {}


def test_a_hung_handler_leaves_health_answering_and_others_get_a_503_not_a_wait(
    served: tuple[BlockingHandler, int],
) -> None:
    handler, port = served
    slow = threading.Thread(target=request, args=(port, "GET", "/v1/slow"), daemon=True)
    slow.start()
    assert handler.entered.wait(5)

    # While the handler is stuck: health answers, another request is told to retry, neither waits
    assert request(port, "GET", "/v1/health") == (200, {"status": "ok"})
    status, problem = request(port, "GET", "/v1/jobs")
    assert status == 503 and problem["title"] == "Service Unavailable"
    handler.release.set()
    slow.join(5)
    assert request(port, "GET", "/v1/jobs")[0] == 200


def test_connections_beyond_the_pool_are_refused_at_once_and_idle_ones_time_out(
    served: tuple[BlockingHandler, int],
) -> None:
    _, port = served
    idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(3)]  # hold every slot
    try:
        extra = socket.create_connection(("127.0.0.1", port), timeout=5)
        assert extra.recv(100).startswith(b"HTTP/1.1 503")
        extra.close()
    finally:
        for sock in idle:
            sock.close()


def test_an_idle_or_short_body_client_is_dropped_and_frees_its_slot(served: tuple[BlockingHandler, int]) -> None:
    _, port = served
    shorts = []
    for _ in range(3):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\nContent-Length: 100\r\n\r\n{")
        shorts.append(sock)
    for sock in shorts:
        sock.settimeout(5)
        sock.recv(100)  # closed by the server after its socket timeout
        sock.close()
    assert request(port, "GET", "/v1/jobs")[0] == 200


def test_trace_reaches_the_handler_for_its_405(served: tuple[BlockingHandler, int]) -> None:
    handler, port = served
    assert request(port, "TRACE", "/v1/jobs")[0] == 405
    assert "TRACE" in handler.methods
