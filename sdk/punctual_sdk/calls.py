"""What every resource of the client sends through: the base URL, the auth, the transport and the retries that are
safe (`ApiCalls._call`), the pages of a list, and the helpers that build paths and queries."""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from urllib.parse import quote, urlencode

from pydantic import BaseModel

from punctual_sdk.auth import Auth
from punctual_sdk.errors import (
    ApiError,
    InvalidArgument,
    InvalidResponse,
    ServerError,
    TooManyRequests,
    TransportError,
    retry_after_seconds,
)
from punctual_sdk.errors import error_from_response as _error_from_response
from punctual_sdk.models import (
    ApiModel,
    Page,
)
from punctual_sdk.transport import HttpRequest, Transport, urllib_transport

USER_AGENT = "punctual-sdk/0.1"
DEFAULT_LOCAL_URL = "http://127.0.0.1:8080"
#: How many items `POST /v1/jobs/batch` takes at most.
MAX_BATCH = 25

#: A job definition: a `JobDefinition` (or any pydantic model of one, such as the core's `JobSpec`) or a mapping.
Definition = BaseModel | Mapping[str, Any]
Outcome = Literal["succeeded", "retry"]
BulkAction = Literal["pause", "resume", "cancel"]
M = TypeVar("M", bound=ApiModel)


class ApiCalls:
    """The plumbing of `Client` (punctual_sdk.client): each resource's methods (punctual_sdk.resources) send through
    `_call` and `_page`."""

    def __init__(
        self,
        base_url: str,
        auth: Auth | None = None,
        *,
        timeout: float = 30.0,
        transport: Transport = urllib_transport,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        user_agent: str = USER_AGENT,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise InvalidArgument(f"base_url is the API's http(s) URL (e.g. {DEFAULT_LOCAL_URL}), not '{base_url}'")
        if retries < 0 or backoff < 0 or max_backoff < 0:
            raise InvalidArgument("retries, backoff and max_backoff are zero or more")
        self.base_url = base_url.rstrip("/")
        self.auth = auth
        self.timeout = timeout
        self.transport = transport
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.jitter = jitter
        self.user_agent = user_agent

    def _page(self, method: str, path: str, query: Mapping[str, str | list[str]], noun: str, model: type[M]) -> Page[M]:
        body = self._call(method, path, query=query)
        cursor = body.get("next_cursor") or None
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidResponse(f"the API sent a next_cursor that is not a string: {cursor!r}", body)
        return Page([model.from_json(item) for item in _items(body, noun)], cursor)

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | list[str]] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        retry: bool | None = None,
    ) -> dict[str, Any]:
        """Send one request (and its retries); the JSON answer, or the typed error. `retry`: whether a 5xx or a
        lost connection may be retried (default: for GET); a 429 is retried whatever it is (nothing was done)."""
        url = self.base_url + path + (f"?{urlencode(query, doseq=True)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        base = {"Accept": "application/json", "User-Agent": self.user_agent, **(headers or {})}
        if data is not None:
            base["Content-Type"] = "application/json"
        unsigned = HttpRequest(method, url, base, data)
        repeatable = method == "GET" if retry is None else retry
        attempt = 0
        while True:
            attempt += 1
            # Signed for each attempt: a SigV4 signature is valid for a few minutes and credentials may refresh.
            request = self.auth.sign(unsigned) if self.auth is not None else unsigned
            try:
                response = self.transport(request, self.timeout)
            except TransportError:
                if not repeatable or attempt > self.retries:
                    raise
                self.sleep(self._backoff(attempt))
                continue
            if response.status < 400:
                return _json(response.status, response.body)
            error = _error_from_response(response.status, response.body, response.headers)
            delay = self._retry_delay(error, repeatable, attempt)
            if delay is None:
                raise error
            self.sleep(delay)

    def _retry_delay(self, error: ApiError, repeatable: bool, attempt: int) -> float | None:
        """How long to wait before retrying after `error`, or None to raise it."""
        if attempt > self.retries:
            return None
        if isinstance(error, TooManyRequests):
            if error.is_quota:  # the tenant's job quota: waiting does not free it
                return None
        elif not (isinstance(error, ServerError) and repeatable):
            return None
        hinted = retry_after_seconds(error.headers)
        if hinted is None:
            return self._backoff(attempt)
        if hinted > self.max_backoff:
            return None  # a shorter wait would only be refused again
        # At least what the server asked, plus a little jitter so that many clients do not come back together.
        return min(self.max_backoff, hinted + self.jitter() * self.backoff)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter: a random wait up to backoff * 2^(attempt-1), capped."""
        return self.jitter() * min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))


def _json(status: int, body: bytes) -> dict[str, Any]:
    """A successful answer's JSON (an empty body: {}); `InvalidResponse` when it is not JSON."""
    try:
        text = body.decode() if body else ""
        parsed = json.loads(text) if text.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        shown = body[:200].decode(errors="replace")
        raise InvalidResponse(f"the API answered {status} with a body that is not JSON: {shown!r}", body) from exc
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _items(body: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    """The list `name` of an answer (absent: empty); `InvalidResponse` when it or an item is not what a list of
    documents is."""
    items = body.get(name) or []
    if not isinstance(items, list) or not all(isinstance(item, Mapping) for item in items):
        raise InvalidResponse(f"the API sent a '{name}' that is not a list of JSON objects", body)
    return items


def _new_key() -> str:
    return f"sdk-{uuid.uuid4()}"


def _definition(definition: Definition) -> dict[str, Any]:
    if isinstance(definition, BaseModel):
        dumped: dict[str, Any] = definition.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return dumped
    if isinstance(definition, Mapping):
        return dict(definition)
    raise InvalidArgument(f"a job definition is a JobDefinition or a mapping, not {type(definition).__name__}")


def _rfc3339(value: datetime) -> str:
    """An instant in UTC with a `Z`, milliseconds only when it has them (as the API writes instants)."""
    value = value.astimezone(UTC)
    if ms := value.microsecond // 1000:
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms:03d}Z"
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _page_query(limit: int | None, cursor: str | None) -> dict[str, str]:
    query: dict[str, str] = {}
    if limit:
        query["limit"] = str(limit)
    if cursor:
        query["cursor"] = cursor
    return query


def _every(page: Callable[[str | None], Page[M]]) -> Iterator[M]:
    cursor: str | None = None
    while True:
        current = page(cursor)
        yield from current.items
        if not current.next_cursor:
            return
        cursor = current.next_cursor


def _segment(value: str) -> str:
    """One path segment, percent-encoded (occurrence keys carry ':'; nothing may carry '/')."""
    if not value:
        raise InvalidArgument("an id is a non-empty string")
    return quote(value, safe="")


def _job(job_id: str) -> str:
    return f"/v1/jobs/{_segment(job_id)}"


def _backfill(job_id: str, backfill_id: str) -> str:
    return f"{_job(job_id)}/backfill/{_segment(backfill_id)}"
