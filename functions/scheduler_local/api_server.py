"""The api handler served over real HTTP: each request becomes an API Gateway REST proxy event.

There is no IAM locally. `Authorization: Bearer <token>` is looked up in SCHEDULER_DEV_TOKENS
(`token=tenant,...`) and the tenant is placed where API Gateway puts the IAM principal
(`requestContext.identity.userArn`), so the handler reads the tenant through the same code path as on AWS.

It never wedges: connections are served by a bounded pool (one beyond it gets a 503 at
once), every socket read and write has a timeout (a client that sends a short body or idles is dropped), a
request waits a bounded time for the handler (one Lambda container at a time, as on AWS) and gets a 503 with
`Retry-After` when it is busy, and `/v1/health` is answered here, depending on nothing. The AWS clients behind
the handler carry connect and read timeouts (`scheduler.handlers.wiring`).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from scheduler.handlers.console_files import CONSOLE_PREFIX, console_file, console_headers
from scheduler.handlers.local_invocation import LocalContext, to_event

PUBLIC_PATHS = {"/v1/health"}
HEALTH = "/v1/health"
#: Connections served at once; one more is answered 503 at once (never queued without bound).
MAX_CONNECTIONS = 32
#: Seconds a socket read or write may block (a slow or idle client is dropped, its thread freed).
SOCKET_TIMEOUT = 15.0
#: Seconds a request waits for the handler (busy with another request) before a 503.
HANDLER_WAIT = 20.0
#: The largest request body read (API Gateway's limit is 10 MB; job bodies are far smaller).
MAX_BODY = 1_048_576


def parse_tokens(spec: str) -> dict[str, str]:
    """`token=tenant,token2=tenant2` -> {token: tenant}."""
    tokens: dict[str, str] = {}
    for pair in spec.split(","):
        token, sep, tenant = pair.strip().partition("=")
        if sep and token and tenant:
            tokens[token.strip()] = tenant.strip()
    return tokens


def make_handler(invoke: Any, tokens: dict[str, str]) -> type[BaseHTTPRequestHandler]:
    # One Lambda container handles one request at a time; so does this adapter (the resolver is not reentrant).
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = SOCKET_TIMEOUT
        # A response is written as headers then body: with Nagle's algorithm on, the body waits for the client's
        # delayed ACK of the headers (40 ms on Linux) on every keep-alive request - 5x the handler's own time.
        disable_nagle_algorithm = True

        def log_message(self, fmt: str, *args: Any) -> None:
            sys.stderr.write("api: " + (fmt % args) + "\n")

        def _problem(self, status: int, title: str, detail: str, extra_headers: dict[str, str] | None = None) -> None:
            body = json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/problem+json")
            self.send_header("Content-Length", str(len(body)))
            for key, value in (extra_headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _serve(self) -> None:
            path = urlsplit(self.path).path
            if path == HEALTH and self.command in ("GET", "HEAD"):
                self._health()
                return
            if path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/"):
                self._console(path)
                return
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY:
                self.close_connection = True
                status, title = (400, "Bad Request") if length < 0 else (413, "Payload Too Large")
                self._problem(status, title, f"send a Content-Length of 0 to {MAX_BODY} bytes")
                return
            body = self.rfile.read(length) if length else b""
            tenant = None
            if path not in PUBLIC_PATHS:
                auth = self.headers.get("Authorization") or ""
                scheme, _, token = auth.partition(" ")
                if scheme.lower() != "bearer" or not token.strip():
                    self._problem(
                        401,
                        "Unauthorized",
                        "send 'Authorization: Bearer <token>' (see SCHEDULER_DEV_TOKENS)",
                        {"WWW-Authenticate": "Bearer"},
                    )
                    return
                tenant = tokens.get(token.strip())
                if tenant is None:
                    self._problem(401, "Unauthorized", "unknown bearer token", {"WWW-Authenticate": "Bearer"})
                    return
            headers = {k: v for k, v in self.headers.items() if k.lower() != "authorization"}
            event = to_event(self.command, self.path, headers, body, tenant, self.client_address[0])
            if not lock.acquire(timeout=HANDLER_WAIT):
                self._problem(503, "Service Unavailable", "the API is busy; retry shortly", {"Retry-After": "2"})
                return
            try:
                response = invoke(event, LocalContext("punctual-api", 29))
            finally:
                lock.release()
            payload = response.get("body") or ""
            data = base64.b64decode(payload) if response.get("isBase64Encoded") else payload.encode()
            self.send_response(int(response["statusCode"]))
            sent = set()
            for key, values in (response.get("multiValueHeaders") or {}).items():
                for value in values:
                    self.send_header(key, value)
                sent.add(key.lower())
            for key, value in (response.get("headers") or {}).items():
                if key.lower() not in sent:
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _console(self, path: str) -> None:
            if path == CONSOLE_PREFIX:  # relative URLs in the page resolve against /console/, not /
                self.send_response(308)
                self.send_header("Location", CONSOLE_PREFIX + "/")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if self.command not in ("GET", "HEAD"):
                allow = {"Allow": "GET, HEAD"}
                self._problem(405, "Method Not Allowed", "the console's files are read with GET", allow)
                return
            found = console_file(path)
            if found is None:
                self._problem(404, "Not Found", f"no console file at {path}; open {CONSOLE_PREFIX}/")
                return
            data, content_type = found
            self.send_response(200)
            for name, value in console_headers(content_type).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command == "GET":
                self.wfile.write(data)

        def _health(self) -> None:
            data = b"" if self.command == "HEAD" else json.dumps({"status": "ok"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        # Every method reaches the handler, which answers an undeclared one 405 problem+json (not 501).
        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = do_HEAD = do_OPTIONS = _serve  # noqa: N815
        do_TRACE = do_CONNECT = _serve  # noqa: N815

        def __getattr__(self, name: str) -> Any:
            if name.startswith("do_"):  # any other method (QUERY, PROPFIND...) too: 405 from the handler, not 501
                return self._serve
            raise AttributeError(name)

    return Handler


class BoundedServer(ThreadingHTTPServer):
    """A threading HTTP server whose threads come from a bounded pool; a connection beyond it gets a 503."""

    daemon_threads = True
    #: Connections waiting to be accepted (socketserver's default, 5, drops the connects of a burst of clients
    #: beyond it, and each dropped one retries a second later).
    request_queue_size = 256

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BaseHTTPRequestHandler],
        workers: int,
        bind_and_activate: bool = True,
    ) -> None:
        super().__init__(address, handler, bind_and_activate)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="api")
        self.slots = threading.BoundedSemaphore(workers)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self._refuse(request)
            return
        self.pool.submit(self._serve_one, request, client_address)

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.process_request_thread(request, client_address)
        finally:
            self.slots.release()

    def _refuse(self, request: Any) -> None:
        body = json.dumps(
            {"type": "about:blank", "title": "Service Unavailable", "status": 503, "detail": "too many connections"}
        ).encode()
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/problem+json\r\nRetry-After: 2\r\n"
            f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        try:
            request.settimeout(2)
            request.sendall(head + body)
        except OSError:
            pass
        finally:
            self.shutdown_request(request)


def main() -> None:
    port = int(os.environ.get("SCHEDULER_API_PORT", "8080"))
    tokens = parse_tokens(os.environ.get("SCHEDULER_DEV_TOKENS") or "dev-token=dev")
    from scheduler.handlers.api import lambda_handler

    server = BoundedServer(
        ("127.0.0.1", port), make_handler(lambda_handler, tokens), MAX_CONNECTIONS, bind_and_activate=False
    )
    # Several api processes share the port (SCHEDULER_LOCAL_API_PROCESSES): the kernel spreads the connections
    # over them, as API Gateway spreads requests over Lambda containers, each handling one request at a time.
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    server.server_bind()
    server.server_activate()
    print(f"api listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
