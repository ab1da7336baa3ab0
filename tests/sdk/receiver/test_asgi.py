"""The ASGI middleware around a raw ASGI app (and Starlette when installed): verify, dedupe, fence, release."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from punctual_sdk.receiver import Receiver
from tests.sdk.receiver.signed import NOW, Request, signed_request


def scope_of(request: Request) -> dict[str, Any]:
    path, _, query = request.path.partition("?")
    return {
        "type": "http",
        "method": request.method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [(k.lower().encode(), v.encode()) for k, v in request.headers.items()],
    }


def call(app: Any, request: Request, chunk: int = 7) -> tuple[int, dict[str, str], bytes]:
    """One request through `app`, its body sent in chunks of `chunk` bytes."""
    parts = [request.body[i : i + chunk] for i in range(0, len(request.body), chunk)] or [b""]
    messages = [{"type": "http.request", "body": p, "more_body": n < len(parts) - 1} for n, p in enumerate(parts)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope_of(request), receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body


class Charges:
    """A raw ASGI app whose effect is counted."""

    def __init__(self, status: int = 200) -> None:
        self.effects: list[Any] = []
        self.status = status

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        self.effects.append((scope["punctual.delivery"].occurrence_key, json.loads(message["body"])))
        await send({"type": "http.response.start", "status": self.status, "headers": [(b"x-app", b"1")]})
        await send({"type": "http.response.body", "body": json.dumps({"charge": len(self.effects)}).encode()})


def test_a_signed_call_runs_the_app_once_and_a_redelivery_gets_the_first_answer(receiver: Receiver) -> None:
    app = Charges()
    guarded = receiver.asgi(app)

    first = call(guarded, signed_request())
    again = call(guarded, signed_request(attempt=3))

    assert first[0] == again[0] == 200
    assert json.loads(again[2]) == {"charge": 1}
    assert again[1]["x-app"] == "1" and again[1]["x-punctual-duplicate"] == "true"
    assert app.effects == [("job-1:2026-12-01T08:00:00Z", {"amount": 5})]


def test_forged_replayed_and_stale_calls_are_refused_without_running_the_app(receiver: Receiver) -> None:
    app = Charges()
    guarded = receiver.asgi(app)
    call(guarded, signed_request(token=8))

    assert call(guarded, signed_request(keys={"k1": "forged"}))[0] == 401
    assert call(guarded, signed_request(timestamp=NOW - 301))[0] == 401
    status, headers, body = call(guarded, signed_request(token=7))
    assert (status, headers["content-type"]) == (409, "application/problem+json")
    assert "lower than 8" in json.loads(body)["detail"]
    assert len(app.effects) == 1


def test_in_progress_elsewhere_gets_429_and_a_5xx_releases_the_occurrence(receiver: Receiver) -> None:
    claim = receiver.guard.claim("job-1:2026-12-01T08:00:00Z", 7)
    app = Charges(503)
    guarded = receiver.asgi(app)

    status, headers, _ = call(guarded, signed_request())
    assert (status, headers["retry-after"]) == (429, "60")

    receiver.guard.release(claim)
    assert call(guarded, signed_request())[0] == 503
    app.status = 200
    assert call(guarded, signed_request(attempt=2))[0] == 200
    assert len(app.effects) == 2


def test_an_app_that_raises_releases_the_occurrence(receiver: Receiver) -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("database down")

    with pytest.raises(RuntimeError):
        call(receiver.asgi(broken), signed_request())
    app = Charges()
    assert call(receiver.asgi(app), signed_request())[0] == 200


def test_the_request_target_with_its_query_is_what_is_verified(receiver: Receiver) -> None:
    app = Charges()
    request = signed_request(path="/hooks/pay?x=1&y=%20z")

    assert call(receiver.asgi(app), request)[0] == 200
    moved = signed_request(path="/hooks/pay?x=1&y=%20z")
    moved.path = "/hooks/pay?x=1&y=%20y"
    assert call(receiver.asgi(app), moved)[0] == 401


def test_starlette_behind_the_middleware(receiver: Receiver) -> None:
    starlette = pytest.importorskip("starlette.applications")
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    effects: list[str] = []

    async def pay(request: Any) -> Any:
        effects.append(request.scope["punctual.delivery"].occurrence_key)
        return JSONResponse({"charged": (await request.json())["amount"]})

    from punctual_sdk.receiver.asgi import AsgiReceiver

    app = starlette.Starlette(routes=[Route("/hooks/pay", pay, methods=["POST"])])
    app.add_middleware(AsgiReceiver, receiver=receiver)

    assert call(app, signed_request())[0] == 200
    assert call(app, signed_request(attempt=2))[0] == 200
    assert effects == ["job-1:2026-12-01T08:00:00Z"]


def small_receiver(limit: int) -> Receiver:
    from punctual_sdk.receiver import InMemoryDedupeStore
    from tests.sdk.receiver.signed import JOB_ID, KEYS

    return Receiver(
        InMemoryDedupeStore(), lambda job_id: KEYS if job_id == JOB_ID else {}, max_body_bytes=limit, clock=lambda: NOW
    )


def streamed(app: Any, scope: dict[str, Any], chunks: int, size: int = 4096) -> tuple[int, str, int]:
    """`app`'s answer to a body of `chunks` chunks of `size` bytes (unless it stops reading): status, problem
    title, and how many chunks it read."""
    read = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal read
        read += 1
        return {"type": "http.request", "body": b"x" * size, "more_body": read < chunks}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body).get("title", ""), read


def test_a_body_over_the_limit_is_refused_with_413_and_no_further_chunk_is_read() -> None:
    app = Charges()
    guarded = small_receiver(10_000).asgi(app)
    scope = scope_of(signed_request())

    # a body with no Content-Length: reading stops at the chunk that passes the limit
    assert streamed(guarded, scope, chunks=2_500) == (413, "RequestTooLarge", 3)

    # a declared length over the limit: refused before the first chunk
    scope["headers"].append((b"content-length", b"10000000"))
    assert streamed(guarded, scope, chunks=2_500) == (413, "RequestTooLarge", 0)
    assert app.effects == []


def test_a_body_at_the_limit_passes() -> None:
    request = signed_request()
    app = Charges()

    assert call(small_receiver(len(request.body)).asgi(app), request)[0] == 200
    assert len(app.effects) == 1


def test_an_answer_too_large_to_keep_is_replayed_as_its_status_without_the_body(receiver: Receiver) -> None:
    runs = []

    async def report(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        runs.append(1)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"300000")]})
        await send({"type": "http.response.body", "body": b"r" * 300_000})

    guarded = receiver.asgi(report)
    first = call(guarded, signed_request())
    again = call(guarded, signed_request(attempt=2))

    assert (first[0], len(first[2])) == (200, 300_000)
    assert (again[0], again[2], again[1]["content-length"]) == (200, b"", "0")
    assert again[1]["x-punctual-body-not-kept"].endswith("; bytes=300000")
    assert len(runs) == 1
