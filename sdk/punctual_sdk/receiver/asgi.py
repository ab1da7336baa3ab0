"""ASGI middleware (Starlette, FastAPI, any ASGI app): verify, dedupe and fence every guarded HTTP request before
the app sees it. The app finds the Delivery in `scope["punctual.delivery"]` (Starlette:
`request.scope["punctual.delivery"]`) and reads the body as sent.

    app.add_middleware(AsgiReceiver, receiver=receiver)    # Starlette / FastAPI
    app = receiver.asgi(app)                               # any ASGI app

The key fetch and the store's writes block (urllib, boto3): they run in a worker thread (`asyncio.to_thread`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from punctual_sdk.receiver.dedupe import Claim, Outcome
from punctual_sdk.receiver.delivery import Delivery
from punctual_sdk.receiver.errors import ReceiverError
from punctual_sdk.receiver.http import HttpReply, declared_length, guarded, problem, retried_by_punctual, too_large

if TYPE_CHECKING:
    from punctual_sdk.receiver.kit import Receiver

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]
DELIVERY_KEY = "punctual.delivery"


def request_target(scope: Scope) -> str:
    """The request target as the client sent it: `raw_path` (or the re-quoted `path`) and the query string."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes | bytearray) else quote(scope.get("path", "/"))
    query = scope.get("query_string", b"").decode("latin-1")
    return path + (f"?{query}" if query else "")


def _headers(scope: Scope) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in scope.get("headers", []):
        key = name.decode("latin-1")
        # a repeated header is kept repeated (joined), so verification sees it was not exactly one
        headers[key] = headers[key] + ", " + value.decode("latin-1") if key in headers else value.decode("latin-1")
    return headers


async def _body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
    """The request body, read only while it fits in `limit` bytes: a larger Content-Length is refused unread, and
    reading stops at the first chunk that goes past the limit."""
    length = declared_length(headers.get("content-length"))
    if length is not None and length > limit:
        raise too_large(length, limit)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ConnectionError("the client disconnected before sending the whole body")
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            raise too_large(None, limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _send_reply(reply: HttpReply, send: Send) -> None:
    headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})


class AsgiReceiver:
    """The middleware. `paths`: the path prefixes it guards (all when None); other requests pass through."""

    def __init__(self, app: AsgiApp, receiver: Receiver, paths: tuple[str, ...] | None = None) -> None:
        self.app = app
        self.receiver = receiver
        self.paths = paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or not guarded(scope.get("path", ""), self.paths):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            body = await _body(receive, headers, self.receiver.max_body_bytes)
        except ReceiverError as exc:
            await _send_reply(problem(exc), send)
            return
        host = headers.get("host", "")
        try:
            delivery, claimed = await asyncio.to_thread(
                self._admit, scope.get("method", "GET"), host, request_target(scope), headers, body
            )
        except ReceiverError as exc:
            await _send_reply(problem(exc), send)
            return
        if isinstance(claimed, Outcome):
            await _send_reply(HttpReply.from_record(claimed.result).replayed(), send)
            return
        scope[DELIVERY_KEY] = delivery
        try:
            reply = await self._run_app(scope, body)
        except BaseException:
            await asyncio.to_thread(self.receiver.guard.release, claimed)
            raise
        if retried_by_punctual(reply.status):
            await asyncio.to_thread(self.receiver.guard.release, claimed)
        else:
            try:
                record = reply.to_record(self.receiver.max_answer_bytes)
                await asyncio.to_thread(self.receiver.guard.complete, claimed, record, minimal=reply.minimal_record())
            except ReceiverError as exc:
                reply = problem(exc)
        await _send_reply(reply, send)

    def _admit(
        self, method: str, host: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[Delivery, Claim | Outcome]:
        delivery = self.receiver.http_delivery(method, host, path, headers, body)
        return delivery, self.receiver.guard.claim(delivery.occurrence_key, delivery.fencing_token, delivery.job_id)

    async def _run_app(self, scope: Scope, body: bytes) -> HttpReply:
        sent = False
        started: dict[str, Any] = {}
        chunks: list[bytes] = []

        async def receive() -> Message:
            nonlocal sent
            if sent:
                await asyncio.Event().wait()  # the body was read: the next message would be a disconnect
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))

        await self.app(scope, receive, send)
        if "status" not in started:
            raise RuntimeError("the ASGI app returned without starting a response")
        headers = tuple((k.decode("latin-1"), v.decode("latin-1")) for k, v in started.get("headers", []))
        return HttpReply(int(started["status"]), headers, b"".join(chunks))
