"""WSGI middleware (Flask, Django, any WSGI app): verify, dedupe and fence every guarded request before the app
sees it. The app finds the Delivery in `environ["punctual.delivery"]` and the body in `wsgi.input` as sent.

    app.wsgi_app = receiver.wsgi(app.wsgi_app)          # Flask
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from punctual_sdk.receiver.dedupe import Outcome
from punctual_sdk.receiver.errors import ReceiverError
from punctual_sdk.receiver.http import HttpReply, declared_length, guarded, problem, retried_by_punctual, too_large

if TYPE_CHECKING:
    from punctual_sdk.receiver.kit import Receiver

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]
DELIVERY_KEY = "punctual.delivery"


def request_target(environ: Mapping[str, Any]) -> str:
    """The request target as the client sent it: the server's raw URI when it gives one (gunicorn `RAW_URI`,
    uWSGI `REQUEST_URI`), else the path re-quoted from PEP 3333's decoded `SCRIPT_NAME` + `PATH_INFO`."""
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI")
    if isinstance(raw, str) and raw.startswith("/"):
        return raw
    path = (environ.get("SCRIPT_NAME", "") + environ.get("PATH_INFO", "")).encode("latin-1")
    query = environ.get("QUERY_STRING", "")
    return quote(path, safe="/:@!$&'()*+,;=~") + (f"?{query}" if query else "")


def request_headers(environ: Mapping[str, Any]) -> dict[str, str]:
    headers = {k[5:].replace("_", "-").title(): str(v) for k, v in environ.items() if k.startswith("HTTP_")}
    for key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        if environ.get(key):
            headers[key.replace("_", "-").title()] = str(environ[key])
    return headers


def _host(environ: Mapping[str, Any]) -> str:
    if environ.get("HTTP_HOST"):
        return str(environ["HTTP_HOST"])
    port = str(environ.get("SERVER_PORT", ""))
    default = "443" if environ.get("wsgi.url_scheme") == "https" else "80"
    return str(environ.get("SERVER_NAME", "")) + ("" if port in ("", default) else f":{port}")


def _body(environ: Mapping[str, Any], limit: int) -> bytes:
    """The request body, read only when it fits in `limit` bytes: a larger Content-Length is refused unread, and
    no more than `limit` + 1 bytes are ever read (a server that ends the input itself, for a chunked body, sets
    `wsgi.input_terminated`; without it and without a Content-Length there is no body)."""
    length = declared_length(environ.get("CONTENT_LENGTH"))
    if length is not None and length > limit:
        raise too_large(length, limit)
    stream = environ["wsgi.input"]
    if length is None:
        body = stream.read(limit + 1) if environ.get("wsgi.input_terminated") else b""
    else:
        body = stream.read(length) if length > 0 else b""
    if len(body) > limit:
        raise too_large(None, limit)
    return bytes(body)


class WsgiReceiver:
    """The middleware. `paths`: the path prefixes it guards (all when None); other requests pass through."""

    def __init__(self, app: WsgiApp, receiver: Receiver, paths: tuple[str, ...] | None = None) -> None:
        self.app = app
        self.receiver = receiver
        self.paths = paths

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        if not guarded(environ.get("PATH_INFO", ""), self.paths):
            return self.app(environ, start_response)
        try:
            body = _body(environ, self.receiver.max_body_bytes)
        except ReceiverError as exc:
            return _send(problem(exc), start_response)
        environ["wsgi.input"] = io.BytesIO(body)
        try:
            delivery = self.receiver.http_delivery(
                environ.get("REQUEST_METHOD", "GET"),
                _host(environ),
                request_target(environ),
                request_headers(environ),
                body,
            )
            claimed = self.receiver.guard.claim(delivery.occurrence_key, delivery.fencing_token, delivery.job_id)
        except ReceiverError as exc:
            return _send(problem(exc), start_response)
        if isinstance(claimed, Outcome):
            return _send(HttpReply.from_record(claimed.result).replayed(), start_response)
        environ[DELIVERY_KEY] = delivery
        try:
            reply = self._run_app(environ)
        except BaseException:
            self.receiver.guard.release(claimed)
            raise
        if retried_by_punctual(reply.status):
            self.receiver.guard.release(claimed)
            return _send(reply, start_response)
        try:
            self.receiver.guard.complete(
                claimed, reply.to_record(self.receiver.max_answer_bytes), minimal=reply.minimal_record()
            )
        except ReceiverError as exc:
            return _send(problem(exc), start_response)
        return _send(reply, start_response)

    def _run_app(self, environ: dict[str, Any]) -> HttpReply:
        captured: dict[str, Any] = {}
        chunks: list[bytes] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[..., Any]:
            if exc_info is not None and captured:
                raise exc_info[1].with_traceback(exc_info[2])
            captured["status"], captured["headers"] = status, headers
            return chunks.append

        answer = self.app(environ, start_response)
        try:
            chunks.extend(answer)
        finally:
            close = getattr(answer, "close", None)
            if close is not None:
                close()
        if "status" not in captured:
            raise RuntimeError("the WSGI app returned without calling start_response")
        status = int(str(captured["status"]).split(" ", 1)[0])
        return HttpReply(status, tuple((str(k), str(v)) for k, v in captured["headers"]), b"".join(chunks))


def _send(reply: HttpReply, start_response: StartResponse) -> Iterable[bytes]:
    try:
        reason = HTTPStatus(reply.status).phrase
    except ValueError:
        reason = "Unknown"
    start_response(f"{reply.status} {reason}", list(reply.headers))
    return [reply.body]
