"""The API's routes of bulk actions: `POST /v1/jobs/bulk` (pause, resume or cancel every job matching a label
selector, resumable by its Idempotency-Key) and `GET /v1/operations/{operation_id}` (its progress)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aws_lambda_powertools.event_handler import Response

from scheduler.core.jobs.bulk import BULK_TIME_BUDGET, BulkAction, BulkService, OperationState
from scheduler.handlers import wiring
from scheduler.handlers.api_caller import metrics, tenant
from scheduler.handlers.api_problems import Problem
from scheduler.handlers.api_requests import app, header, json_body
from scheduler.handlers.api_routes import Param, route
from scheduler.handlers.api_views import bulk_view, json_response

#: Kept free before the Lambda's own deadline: the last page's checkpoint and the answer.
DEADLINE_MARGIN = timedelta(seconds=5)
_SHAPE = 'send {"action": "pause" | "resume" | "cancel", "selector": {"labels": {"key": "value", ...}}}'


def bulk_service() -> BulkService:
    return wiring.container(metrics).core.bulk_service()


def _time_left() -> timedelta:
    """How long this request may work: the time budget, or less when the function's deadline is nearer."""
    context: Any = getattr(app, "lambda_context", None)
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return BULK_TIME_BUDGET
    return max(timedelta(0), min(BULK_TIME_BUDGET, timedelta(milliseconds=remaining()) - DEADLINE_MARGIN))


def _request(body: Any) -> tuple[BulkAction, dict[str, str]]:
    if not isinstance(body, dict) or set(body) - {"action", "selector"}:
        unknown = sorted(set(body) - {"action", "selector"}) if isinstance(body, dict) else []
        raise Problem.unprocessable(f"unknown field(s): {', '.join(unknown)}; {_SHAPE}")
    try:
        action = BulkAction(str(body.get("action")))
    except ValueError:
        raise Problem.unprocessable(
            f"action must be 'pause', 'resume' or 'cancel'; {_SHAPE}",
            ("action", "must be 'pause', 'resume' or 'cancel'"),
        ) from None
    selector = body.get("selector")
    labels = selector.get("labels") if isinstance(selector, dict) else None
    if (
        not isinstance(selector, dict)
        or set(selector) - {"labels"}
        or not isinstance(labels, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
    ):
        raise Problem.unprocessable(
            f"selector is an object with 'labels', a map of label keys to string values; {_SHAPE}",
            ("selector.labels", "must be a map of strings to strings"),
        )
    return action, labels


@route.post(
    "/v1/jobs/bulk",
    summary="pause, resume or cancel every job matching a label selector (at most MAX_BULK_JOBS)",
    description=(
        "Works until done or about 20 s, then answers 202 with the progress; the same request with the same "
        "Idempotency-Key goes on from there (also after a crash or a timeout) until 200 with the final report. "
        "Each job it changes counts as a request against the tenant's request limit (a request stops, with its "
        "progress, when the limit takes no more), and a tenant runs at most 2 operations at once "
        "(SCHEDULER_BULK_MAX_RUNNING; each until it is done, or 40 s after its last request)."
    ),
    params=(
        Param.header(
            "Idempotency-Key",
            {"type": "string", "minLength": 1, "maxLength": 255},
            "names the operation: a retry with the same key goes on with it (7 days)",
            required=True,
        ),
    ),
    body="BulkRequest",
    responses={
        200: ("done: the final report", "BulkOperation"),
        202: ("still running: the progress; send the same request again", "BulkOperation"),
        400: "no Idempotency-Key, or malformed JSON",
        409: "Idempotency-Key reused with another action or selector",
        415: "not JSON",
        422: "bad action or selector: empty, malformed, or matching more jobs than one takes",
        429: (
            "over the tenant's request limit (each job a bulk action changes counts as a request), or the tenant "
            "already runs as many bulk operations as it may: nothing was done; Retry-After says when to send the same "
            "request again"
        ),
    },
)
def bulk_action() -> Response[str]:
    """Work through the jobs matching the selector until done or the time is up: 200 with the final report when
    DONE, else 202 with the progress (the same request again goes on from there)."""
    who = tenant()
    key = header("Idempotency-Key")
    if key is None or not 1 <= len(key) <= 255:
        raise Problem(
            400,
            "Bad Request",
            "a bulk action needs an Idempotency-Key header of 1-255 characters: repeat the request with the same "
            "key to go on with it after a timeout or a crash",
        )
    action, labels = _request(json_body())
    svc = bulk_service()
    stop_at = svc.clock.now() + _time_left()
    operation = svc.run(who, key, action, labels, stop_at)
    status = 200 if operation.state == OperationState.DONE else 202
    location = f"/v1/operations/{operation.operation_id}"
    return json_response(status, bulk_view(operation), {"Location": location})


@route.get(
    "/v1/operations/<operation_id>",
    summary="a bulk operation and its progress (the caller's own)",
    responses={200: ("the operation", "BulkOperation"), 404: "no such operation"},
)
def get_operation(operation_id: str) -> Response[str]:
    who = tenant()
    operation = bulk_service().operations.get(who, operation_id)
    if operation is None:
        raise Problem(404, "Not Found", f"no operation '{operation_id[:80]}' exists for this caller")
    return json_response(200, bulk_view(operation))
