"""Where the test scheduler delivers `http` targets: to an app in this process instead of over the network.

The deployed `http` target (`scheduler.adapters.http_target.HttpTargetInvoker`) runs unchanged - the same
headers, the same signature v2 (and v1) over the same bytes, the same classification of the answer (2xx done,
429/5xx retried with Retry-After, 3xx and other 4xx permanent) - and only the exchange itself is replaced: the
request goes to the receiver app given for the target's URL. An app is one of

- a WSGI app (`app(environ, start_response)`, e.g. Flask),
- an ASGI app (`async app(scope, receive, send)`, e.g. FastAPI or Starlette),
- a plain callable `handle(request: Request) -> Response | int | None` (None: 200).

An exception raised by the app is a call whose outcome is unknown (the deployed worker sees a dropped connection
or a 500): it is recorded as an ambiguous failure, as there, and the exception is kept on the delivery.
"""

from __future__ import annotations

import asyncio
import http.client
import inspect
import io
import json
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import urlsplit

from punctual_sdk.errors import InvalidArgument
from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.call_deadlines import CallWatch
from scheduler.adapters.http_target import HttpTargetInvoker, host_header
from scheduler.core.ports import TargetFailure
from scheduler.security.signing import KeyRing


@dataclass(frozen=True)
class Request:
    """What a receiver gets: the scheduler's call as it would arrive over HTTP."""

    method: str
    url: str
    path: str
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str | None:
        """A header by name, whatever its case."""
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass(frozen=True)
class Response:
    """What a plain receiver callable may return (or just the status, or None for 200)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


App = Callable[..., Any]


def _positional(app: App) -> int | None:
    try:
        parameters = inspect.signature(app).parameters.values()
    except (TypeError, ValueError):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(1 for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty)


def _is_async(app: App) -> bool:
    return inspect.iscoroutinefunction(app) or inspect.iscoroutinefunction(type(app).__call__)


def exchange_with(app: App) -> Callable[[Request], Response]:
    """The exchange with `app`: WSGI, ASGI or a plain callable, told apart by its signature."""
    if not callable(app):
        raise InvalidArgument(f"a receiver is a WSGI app, an ASGI app or a callable(request), not {app!r}")
    arity = _positional(app)
    if _is_async(app):
        if arity != 3:
            raise InvalidArgument(f"{app!r} is async: an ASGI receiver takes (scope, receive, send)")
        return lambda request: _asgi(app, request)
    if arity == 2:
        return lambda request: _wsgi(app, request)
    if arity == 1:
        return lambda request: _plain(app, request)
    raise InvalidArgument(
        f"cannot tell how to call the receiver {app!r}: pass a WSGI app (environ, start_response), an ASGI app "
        "(async scope, receive, send) or a callable taking one Request"
    )


def _plain(app: App, request: Request) -> Response:
    answer = app(request)
    if answer is None:
        return Response(200)
    if isinstance(answer, Response):
        return answer
    if isinstance(answer, int) and not isinstance(answer, bool):
        return Response(answer)
    raise InvalidArgument(f"a receiver callable returns a Response, an int status or None, not {answer!r}")


def _wsgi(app: App, request: Request) -> Response:
    parts = urlsplit(request.url)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": request.method,
        "SCRIPT_NAME": "",
        "PATH_INFO": parts.path or "/",
        "QUERY_STRING": parts.query,
        "SERVER_NAME": parts.hostname or "localhost",
        "SERVER_PORT": str(parts.port or (443 if parts.scheme == "https" else 80)),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "CONTENT_LENGTH": str(len(request.body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": parts.scheme or "http",
        "wsgi.input": io.BytesIO(request.body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
        "REMOTE_ADDR": "127.0.0.1",
    }
    for name, value in request.headers.items():
        key = name.upper().replace("-", "_")
        if key in ("CONTENT_TYPE", "CONTENT_LENGTH"):
            environ[key] = value
        else:
            environ[f"HTTP_{key}"] = value
    started: list[Any] = []

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Callable[[bytes], None]:
        started[:] = [status, headers]
        return lambda chunk: None

    chunks = app(environ, start_response)
    try:
        body = b"".join(cast(Iterable[bytes], chunks))
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()
    if not started:
        raise RuntimeError(f"the WSGI app {app!r} returned without calling start_response")
    return Response(int(str(started[0]).split()[0]), dict(started[1]), body)


def _asgi(app: App, request: Request) -> Response:
    parts = urlsplit(request.url)
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": parts.scheme or "http",
        "path": parts.path or "/",
        "raw_path": (parts.path or "/").encode(),
        "query_string": parts.query.encode(),
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode()) for k, v in request.headers.items()],
        "server": (parts.hostname or "localhost", parts.port or (443 if parts.scheme == "https" else 80)),
        "client": ("127.0.0.1", 0),
    }
    status: list[int] = []
    headers: dict[str, str] = {}
    body: list[bytes] = []
    delivered = False

    async def receive() -> dict[str, Any]:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": request.body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(message: Mapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            status.append(int(message["status"]))
            headers.update({k.decode(): v.decode() for k, v in message.get("headers", [])})
        elif message["type"] == "http.response.body":
            body.append(bytes(message.get("body", b"")))

    _run_coroutine(lambda: app(scope, receive, send))
    if not status:
        raise RuntimeError(f"the ASGI app {app!r} returned without starting a response")
    return Response(status[0], headers, b"".join(body))


def _run_coroutine(make: Callable[[], Any]) -> None:
    """Run an ASGI call to its end; in a thread of its own when the test itself runs in an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(make())
        return
    failure: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(make())
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="punctual-asgi")
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


class _Answer:
    """An app's response, as much of `http.client.HTTPResponse` as the deployed invoker reads."""

    def __init__(self, response: Response) -> None:
        self.status = response.status
        self._headers = {k.lower(): v for k, v in response.headers.items()}
        self.will_close = True  # never pooled

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self._headers.get(name.lower(), default)

    def isclosed(self) -> bool:
        return True


#: Every host name of a target resolves here (no DNS in a test); the SSRF guard still refuses link-local, metadata
#: and other forbidden literal addresses, as deployed.
TEST_ADDRESS = "127.0.0.1"


def test_guard() -> AddressGuard:
    return AddressGuard(allow_private=True, resolver=lambda host, port: [TEST_ADDRESS])


class InProcessHttp(HttpTargetInvoker):
    """The deployed `http` target whose exchange is a call of the receiver app for the target's URL (the longest
    matching URL prefix of `apps`). Every request it made is in `requests`, with the app's answer or exception."""

    def __init__(self, apps: Mapping[str, App], keys: KeyRing, v1_secret: str | None) -> None:
        super().__init__(test_guard(), keys, v1_secret)
        self.apps = {prefix: exchange_with(app) for prefix, app in apps.items()}
        self.sent: list[tuple[Request, Response | BaseException]] = []
        #: Receivers that answered what no HTTP server can (raised by the scheduler's step, not recorded as runs).
        self.misuse: list[InvalidArgument] = []
        self._lock = threading.Lock()

    def app_for(self, url: str) -> Callable[[Request], Response] | None:
        matches = [prefix for prefix in self.apps if url.startswith(prefix)]
        return self.apps[max(matches, key=len)] if matches else None

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        watch: CallWatch,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        *,
        fresh: bool,
    ) -> http.client.HTTPResponse:
        """The request handed to the receiver app in this thread: no socket, so no deadline (`watch`) to enforce."""
        port = connection.port
        scheme = "https" if isinstance(connection, http.client.HTTPSConnection) else "http"
        default = 443 if scheme == "https" else 80
        url = f"{scheme}://{connection.host}{'' if port == default else f':{port}'}{path}"
        # What http.client adds on the wire: the Host header (covered by signature v2) and the body's length.
        sent = {"Host": host_header(connection.host, port, scheme), "Content-Length": str(len(body)), **headers}
        request = Request(method, url, urlsplit(url).path or "/", sent, body)
        exchange = self.app_for(url)
        if exchange is None:
            known = ", ".join(sorted(self.apps)) or "none"
            failure = TargetFailure("retryable", f"no receiver for {url} in this test (receivers: {known})")
            self._keep(request, failure)
            raise failure
        try:
            response = exchange(request)
        except InvalidArgument as exc:  # the test's receiver is wrong: said when the scheduler's step ends
            self.misuse.append(exc)
            raise TargetFailure("permanent", str(exc)) from exc
        except Exception as exc:
            self._keep(request, exc)
            raise TargetFailure("ambiguous", f"the receiver raised {type(exc).__name__}: {exc}") from exc
        self._keep(request, response)
        return cast(http.client.HTTPResponse, _Answer(response))

    def _keep(self, request: Request, answer: Response | BaseException) -> None:
        with self._lock:
            self.sent.append((request, answer))
