"""What the client raises: the API's refusals (problem+json) and failures to reach it or to sign for it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from scheduler.core.validation import field_errors, summary


@dataclass(frozen=True)
class FieldError:
    """One offending field of a rejected request (`errors[]` of the problem+json)."""

    field: str
    message: str


class ApiError(Exception):
    """The API refused a request: an RFC 9457 problem (status, title, detail and, for validation, fields)."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        errors: tuple[FieldError, ...] = (),
        problem: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors
        self.problem: dict[str, Any] = dict(problem or {})

    @classmethod
    def from_response(cls, status: int, body: bytes) -> ApiError:
        """Read a problem+json body; anything else (a proxy's HTML page) still gives a usable error."""
        try:
            problem = json.loads(body.decode() or "{}")
        except (UnicodeDecodeError, json.JSONDecodeError):
            problem = None
        if not isinstance(problem, dict):
            text = body.decode(errors="replace").strip()[:200]
            return cls(status, f"HTTP {status}", text or f"the API answered {status} without a problem document")
        errors = tuple(
            FieldError(str(e.get("field", "body")), str(e.get("message", "")))
            for e in problem.get("errors") or []
            if isinstance(e, dict)
        )
        title = str(problem.get("title") or f"HTTP {status}")
        detail = str(problem.get("detail") or problem.get("message") or title)
        return cls(status, title, detail, errors, problem)

    def __str__(self) -> str:
        return f"{self.title} ({self.status}): {self.detail}"


class InvalidDefinition(ApiError):
    """A job definition refused here, before sending, with the same status and messages the API would give."""


class TransportError(Exception):
    """The API could not be reached or did not answer (DNS, refused connection, timeout, TLS)."""


class AuthError(Exception):
    """No credentials to sign with (no AWS credentials in the chain)."""


def definition_problem(exc: ValidationError) -> InvalidDefinition:
    """The 422 the API answers for this validation error: fields as the API names them, same messages."""
    errors = field_errors(exc)
    return InvalidDefinition(
        422, "Unprocessable Content", summary(errors), tuple(FieldError(field, message) for field, message in errors)
    )
