"""The punctual API, in-process: the deployed API handler's routes (`scheduler.handlers.api`) answer the test.

A call is turned into the API Gateway event the deployed API receives (as the local stack's server does) and
resolved by the same Powertools resolver, so validation, problem+json refusals, views, ETags and Idempotency-Key
replays are the deployed ones. The handler finds its services through `wiring.container`, which is pointed at the
test scheduler's container for the duration of the call only.

`ApiTransport` is also a transport of `punctual_sdk.client.Client` (`TestScheduler.client()`): an application's
own code that calls punctual through the SDK client runs against the test scheduler unchanged.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from unittest import mock
from urllib.parse import urlsplit

from aws_lambda_powertools.utilities.typing import LambdaContext

from punctual_sdk.errors import error_from_response
from scheduler.handlers import api, wiring
from scheduler.handlers.local_invocation import LocalContext, to_event

if TYPE_CHECKING:
    from punctual_sdk.transport import HttpRequest, HttpResponse


@dataclass(frozen=True)
class ApiAnswer:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"null")


class InProcessApi:
    """Calls of the API handler as `tenant`, on `container`'s services (`wiring.AwsContainer`)."""

    def __init__(self, container: wiring.AwsContainer, tenant: str) -> None:
        self.container = container
        self.tenant = tenant
        #: The resolver keeps the current event in module state: one call at a time, as one Lambda container.
        self._lock = threading.Lock()

    def call(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> ApiAnswer:
        """One request; every status comes back as an answer."""
        sent = {"Content-Type": "application/json", **(headers or {})}
        event = to_event(method.upper(), path, sent, body, self.tenant, "127.0.0.1")
        with self._lock, mock.patch.object(wiring, "container", lambda metrics: self.container):
            try:
                context = cast(LambdaContext, LocalContext("punctual-api", 29))
                response = api.app.resolve(event, context)  # type: ignore[attr-defined]
            finally:
                # Metrics are flushed by the Lambda decorator, which is not in this path: drop them.
                api.metrics.clear_metrics()
        merged = {k: ", ".join(v) for k, v in (response.get("multiValueHeaders") or {}).items()}
        merged.update(response.get("headers") or {})
        return ApiAnswer(int(response["statusCode"]), merged, (response.get("body") or "").encode())

    def json(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        """A request with a JSON body; the JSON answer, or the API's refusal as a typed `ApiError`
        (`punctual_sdk.errors`: `Unprocessable` for an invalid job, with `detail` and `field` naming the fix)."""
        data = b"" if body is None else json.dumps(body).encode()
        answer = self.call(method, path, data, headers)
        if answer.status >= 400:
            raise error_from_response(answer.status, answer.body, answer.headers)
        return answer.json()


class ApiTransport:
    """A `punctual_sdk.transport.Transport` that answers from the in-process API (the client's auth headers are
    ignored: every call is the test scheduler's tenant)."""

    def __init__(self, api: InProcessApi) -> None:
        self.api = api

    def __call__(self, request: HttpRequest, timeout: float) -> HttpResponse:
        from punctual_sdk.transport import HttpResponse

        parts = urlsplit(request.url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in ("authorization", "host")}
        answer = self.api.call(request.method, path, request.body or b"", headers)
        return HttpResponse(answer.status, answer.headers, answer.body)
