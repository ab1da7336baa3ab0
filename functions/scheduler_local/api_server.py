"""The api handler served over real HTTP: each request becomes an API Gateway REST proxy event.

There is no IAM locally. `Authorization: Bearer <token>` is looked up in SCHEDULER_DEV_TOKENS
(`token=tenant,...`) and the tenant is placed where API Gateway puts the IAM principal
(`requestContext.identity.userArn`), so the handler reads the tenant through the same code path as on AWS.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from scheduler_local.lambda_context import LocalContext

PUBLIC_PATHS = {"/v1/health"}


def parse_tokens(spec: str) -> dict[str, str]:
    """`token=tenant,token2=tenant2` -> {token: tenant}."""
    tokens: dict[str, str] = {}
    for pair in spec.split(","):
        token, sep, tenant = pair.strip().partition("=")
        if sep and token and tenant:
            tokens[token.strip()] = tenant.strip()
    return tokens


def to_event(
    method: str, raw_path: str, headers: dict[str, str], body: bytes, tenant: str | None, ip: str
) -> dict[str, Any]:
    parts = urlsplit(raw_path)
    query = parse_qsl(parts.query, keep_blank_values=True)
    multi_query: dict[str, list[str]] = {}
    for key, value in query:
        multi_query.setdefault(key, []).append(value)
    try:
        text: str | None = body.decode() if body else None
        encoded = False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    return {
        "resource": "/{proxy+}",
        "path": parts.path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": parts.path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": parts.path,
            "stage": "local",
            "requestId": uuid.uuid4().hex,
            "requestTimeEpoch": int(time.time() * 1000),
            "accountId": "000000000000",
            "apiId": "local",
            "protocol": "HTTP/1.1",
            "identity": {"userArn": tenant, "caller": tenant, "sourceIp": ip, "accountId": "000000000000"},
        },
        "body": text,
        "isBase64Encoded": encoded,
    }


def make_handler(invoke: Any, tokens: dict[str, str]) -> type[BaseHTTPRequestHandler]:
    # One Lambda container handles one request at a time; so does this adapter (the resolver is not reentrant).
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

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
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            path = urlsplit(self.path).path
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
            with lock:
                response = invoke(event, LocalContext("punctual-api", 29))
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

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = do_HEAD = do_OPTIONS = _serve  # noqa: N815

    return Handler


def main() -> None:
    port = int(os.environ.get("SCHEDULER_API_PORT", "8080"))
    tokens = parse_tokens(os.environ.get("SCHEDULER_DEV_TOKENS") or "dev-token=dev")
    from scheduler.handlers.api import lambda_handler

    server = ThreadingHTTPServer(("127.0.0.1", port), make_handler(lambda_handler, tokens), bind_and_activate=False)
    # Several api processes share the port (SCHEDULER_LOCAL_API_PROCESSES): the kernel spreads the connections
    # over them, as API Gateway spreads requests over Lambda containers, each handling one request at a time.
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    server.server_bind()
    server.server_activate()
    server.daemon_threads = True
    print(f"api listening on 127.0.0.1:{port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
