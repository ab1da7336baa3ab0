"""The API's problem responses: every error is an RFC 9457 problem+json with a `detail` a person can act on."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools.event_handler import Response
from pydantic import BaseModel, ValidationError

from scheduler.core.errors import (
    BackfillNotFound,
    ExternalIdTaken,
    IdempotencyConflict,
    InvalidRequest,
    InvalidState,
    JobNotFound,
    PayloadTooLarge,
    QuotaExceeded,
    Throttled,
    VersionConflict,
)
from scheduler.core.model.cron import InvalidSchedule
from scheduler.core.model.validation import field_errors, summary
from scheduler.handlers import api_models as views

Model = TypeVar("Model", bound=BaseModel)

PROBLEM = "application/problem+json"


class Problem(Exception):
    def __init__(self, status: int, title: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.title = title
        self.detail = detail
        self.extra = extra

    @classmethod
    def unprocessable(cls, detail: str, *errors: tuple[str, str]) -> Problem:
        """The 422 for content that is refused: `detail` says what to fix, `errors` name each field refused (field,
        message) for a client to show beside it."""
        fields = [{"field": field, "message": message} for field, message in errors]
        return cls(422, "Unprocessable Content", detail, **({"errors": fields} if fields else {}))


def problem_response(status: int, title: str, detail: str, **extra: Any) -> Response[str]:
    """The problem+json answer; `extra` holds the members a problem of its kind adds (views.Problem declares them),
    and `headers`, which go on the response."""
    headers = extra.pop("headers", None)
    body = cast(
        views.Problem,
        {
            "type": f"https://punctual.dev/problems/{title.lower().replace(' ', '-')}",
            "title": title,
            "status": status,
            "detail": detail,
            **extra,
        },
    )
    return Response(status, PROBLEM, json.dumps(body), headers=headers)


# -- presentation -----------------------------------------------------------------------------------------


def validated(model: type[Model], body: Any) -> Model:
    """`body` as `model`, or the 422 problem that names each field it got wrong."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise validation_problem(exc) from None


def validation_problem(exc: ValidationError) -> Problem:
    errors = field_errors(exc)
    return Problem.unprocessable(summary(errors), *errors)


# -- routes -----------------------------------------------------------------------------------------------


def on_problem(exc: Problem) -> Response[str]:
    return problem_response(exc.status, exc.title, exc.detail, **exc.extra)


def on_not_found(exc: JobNotFound) -> Response[str]:
    return problem_response(404, "Not Found", f"no job '{exc}' exists for this caller")


def on_backfill_not_found(exc: BackfillNotFound) -> Response[str]:
    return problem_response(404, "Not Found", f"no backfill '{exc}' of this job exists for this caller")


def on_version_conflict(exc: VersionConflict) -> Response[str]:
    current = exc.current.version if exc.current else None
    return problem_response(
        412,
        "Precondition Failed",
        f"the job is at version {current}; re-read it and send that version in If-Match",
        current_version=current,
    )


def on_idempotency_conflict(exc: IdempotencyConflict) -> Response[str]:
    return problem_response(
        409,
        "Conflict",
        "this Idempotency-Key was already used with a different request body; use a new key for a different job",
    )


def on_external_id_taken(exc: ExternalIdTaken) -> Response[str]:
    where = f" (job '{exc.job_id}', at GET /v1/jobs/by-external-id/{exc.external_id})" if exc.job_id else ""
    return problem_response(
        409,
        "Conflict",
        f"external_id '{exc.external_id}' is already another job's{where}; an external id is unique among a "
        "tenant's jobs (cancelled ones too). Read that job, or repeat the create with its Idempotency-Key",
        external_id=exc.external_id,
        job_id=exc.job_id,
    )


def on_invalid(exc: InvalidRequest) -> Response[str]:
    return on_problem(Problem.unprocessable(exc.detail, (exc.field or "body", exc.detail)))


def on_invalid_schedule(exc: InvalidSchedule) -> Response[str]:
    return on_problem(Problem.unprocessable(str(exc), ("schedule", str(exc))))


def on_invalid_state(exc: InvalidState) -> Response[str]:
    return problem_response(409, "Conflict", str(exc))


def on_too_large(exc: PayloadTooLarge) -> Response[str]:
    return problem_response(413, "Payload Too Large", str(exc))


def on_quota(exc: QuotaExceeded) -> Response[str]:
    return problem_response(429, "Too Many Jobs", f"{exc}; cancel some or ask for a higher quota")


def on_throttled(exc: Throttled) -> Response[str]:
    retry_after = str(max(1, math.ceil(exc.retry_after)))
    return problem_response(429, "Too Many Requests", exc.detail, headers={"Retry-After": retry_after})


#: The problem response of each domain error (the API's exception handlers; scheduler.handlers.api registers them).
HANDLERS: dict[type[Exception], Callable[[Any], Response[str]]] = {
    Problem: on_problem,
    JobNotFound: on_not_found,
    BackfillNotFound: on_backfill_not_found,
    VersionConflict: on_version_conflict,
    IdempotencyConflict: on_idempotency_conflict,
    ExternalIdTaken: on_external_id_taken,
    InvalidRequest: on_invalid,
    InvalidSchedule: on_invalid_schedule,
    InvalidState: on_invalid_state,
    PayloadTooLarge: on_too_large,
    QuotaExceeded: on_quota,
    Throttled: on_throttled,
}
