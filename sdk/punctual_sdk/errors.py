"""What the client raises: the API's refusals (RFC 9457 problem+json) as typed exceptions, and failures to reach the
API or to sign for it.

Every `ApiError` carries the problem's `detail` (what to fix), its `title`, `type`, the first offending `field`
and all of them in `errors`, and the whole problem document in `body`. Catch a subclass for one status
(`NotFound`, `PreconditionFailed`, ...), or `ApiError` for any refusal, or `PunctualError` for anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The problem type of the API's per-tenant job quota (a 429 that waiting does not fix).
QUOTA_PROBLEM_TYPE = "https://punctual.dev/problems/too-many-jobs"


class PunctualError(Exception):
    """Anything the SDK raises."""


@dataclass(frozen=True)
class FieldError:
    """One offending field of a refused request (`errors[]` of the problem document)."""

    field: str
    message: str


class ApiError(PunctualError):
    """The API refused a request: an RFC 9457 problem (status, title, detail, type and, for validation, fields)."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        type: str = "about:blank",
        field: str | None = None,
        body: Mapping[str, Any] | None = None,
        *,
        errors: tuple[FieldError, ...] = (),
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.type = type
        self.errors = errors
        self.field = field if field is not None else (errors[0].field if errors else None)
        self.body: dict[str, Any] = dict(body or {})
        self.headers: dict[str, str] = dict(headers or {})

    @property
    def problem(self) -> dict[str, Any]:
        """The problem document as the API sent it (empty when the answer was not one)."""
        return self.body

    def __str__(self) -> str:
        return f"{self.title} ({self.status}): {self.detail}"


class BadRequest(ApiError):
    """400: the request is malformed (not JSON, a bad header such as If-Match)."""


class Unauthorized(ApiError):
    """401: no credentials, or ones the API does not accept."""


class Forbidden(ApiError):
    """403: the caller may not do this (an unknown principal, a missing IAM permission)."""


class NotFound(ApiError):
    """404: no such job, run or backfill for this caller."""


class Conflict(ApiError):
    """409: the job's state forbids the change (a cancelled job), or an Idempotency-Key reused for another body."""


class PreconditionFailed(Conflict):
    """412: If-Match named a version that is no longer current; re-read the job and apply the change again."""


class Unprocessable(ApiError):
    """422: the request is well-formed but invalid; `field` and `errors` name what to fix."""


class TooManyRequests(ApiError):
    """429: throttled (retried by the client) or over the tenant's job quota (not retried: cancel some jobs)."""

    @property
    def retry_after(self) -> float | None:
        """The server's Retry-After, in seconds, when it sent one."""
        return retry_after_seconds(self.headers)

    @property
    def is_quota(self) -> bool:
        return self.type == QUOTA_PROBLEM_TYPE


class ServerError(ApiError):
    """5xx: the API failed or is unavailable; a create is safe to retry with the same Idempotency-Key."""


class TransportError(PunctualError):
    """The API could not be reached or did not answer (DNS, refused connection, timeout, TLS)."""


class InvalidResponse(PunctualError):
    """The API answered with success but with something this SDK cannot read: a body that is not JSON, or a document
    without a field the SDK needs (or with one of the wrong type). `body` holds what was received. A field or a state
    the SDK does not know is not this: a newer API's additions are kept (`raw`, the `UNKNOWN` states)."""

    def __init__(self, message: str, body: Any = None) -> None:
        super().__init__(message)
        self.body = body


class InvalidArgument(PunctualError, ValueError):
    """A call refused before anything was sent (a naive datetime, a batch over the limit); says what to fix."""


class AuthError(PunctualError):
    """Nothing to sign a request with (no AWS credentials in the chain, no region)."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    412: PreconditionFailed,
    422: Unprocessable,
    429: TooManyRequests,
}


def error_class(status: int) -> type[ApiError]:
    """The exception class of an HTTP error status (`ApiError` for a status without its own class)."""
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, ApiError)


def problem_error(status: int, problem: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> ApiError:
    """The typed exception of a problem document (as a response body, or as one item of a batch)."""
    errors = tuple(
        FieldError(str(e.get("field", "body")), str(e.get("message", "")))
        for e in problem.get("errors") or []
        if isinstance(e, Mapping)
    )
    title = str(problem.get("title") or f"HTTP {status}")
    # API Gateway's own refusals (throttling, a missing IAM permission) say {"message": ...}.
    detail = str(problem.get("detail") or problem.get("message") or title)
    kind = str(problem.get("type") or "about:blank")
    return error_class(status)(status, title, detail, kind, None, problem, errors=errors, headers=headers)


def error_from_response(status: int, body: bytes, headers: Mapping[str, str] | None = None) -> ApiError:
    """Read an error response; one that is not a problem document (a proxy's HTML page) still gives a usable error."""
    try:
        problem = json.loads(body.decode() or "{}")
    except (UnicodeDecodeError, json.JSONDecodeError):
        problem = None
    if isinstance(problem, Mapping):
        return problem_error(status, problem, headers)
    text = body.decode(errors="replace").strip()[:200]
    detail = text or f"the API answered {status} without a problem document"
    return error_class(status)(status, f"HTTP {status}", detail, headers=headers)


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Retry-After (delta-seconds or an HTTP date) in seconds from now; None when absent or unreadable."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    from datetime import UTC, datetime
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


__all__ = [
    "QUOTA_PROBLEM_TYPE",
    "ApiError",
    "AuthError",
    "BadRequest",
    "Conflict",
    "FieldError",
    "Forbidden",
    "InvalidArgument",
    "InvalidResponse",
    "NotFound",
    "PreconditionFailed",
    "PunctualError",
    "ServerError",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "Unprocessable",
    "error_class",
    "error_from_response",
    "problem_error",
    "retry_after_seconds",
]
