"""The api Lambda: the public REST API (docs/design.md §4) on Powertools' APIGatewayRestResolver.

The job routes live here, each declared once with its OpenAPI description (`api_routes`); the use cases are
`scheduler.core.jobs.service`. What a request carries is read in `api_requests`, the responses are shaped in
`api_views`, and every error is an RFC 9457 problem+json (`api_problems`) with a `detail` a person can act on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, cast

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from scheduler.core.capacity import forecast as forecasting
from scheduler.core.errors import BackfillNotFound, JobNotFound
from scheduler.core.jobs.service import Created, JobService, Submission
from scheduler.core.model.job import TARGET_TYPES, Job, JobQuery, JobSpec, JobState
from scheduler.core.model.labels import MAX_NAME_PREFIX, MAX_SELECTORS, LabelSelector
from scheduler.handlers import (
    api_bulk,  # noqa: F401  (registers the bulk action routes)
    api_console,  # noqa: F401  (registers the console's files)
    api_flow,  # noqa: F401  (registers the flow-control routes)
    api_operator,  # noqa: F401  (registers the operator's view)
    api_runs,  # noqa: F401  (registers the runs and backfill routes)
    api_signing,  # noqa: F401  (registers the signing keys' routes)
    wiring,
)
from scheduler.handlers import api_models as views
from scheduler.handlers.api_caller import metrics as metrics
from scheduler.handlers.api_caller import reads, service, tenant
from scheduler.handlers.api_models import BatchResult, Health, JobBatchResults
from scheduler.handlers.api_problems import HANDLERS, PROBLEM, Problem, problem_response, validated, validation_problem
from scheduler.handlers.api_requests import IF_MATCH, PAGE, app, header, if_match, int_query, json_body, page_of
from scheduler.handlers.api_routes import NO_JOB, Answer, Param, route
from scheduler.handlers.api_views import forecast_view, job_view, json_response, trigger_view
from scheduler.handlers.openapi import render

logger = wiring.handler_logger()

#: Job definitions one `POST /v1/jobs/batch` creates at most, and its body's size limit (Lambda takes 6 MB).
MAX_BATCH = 25
MAX_BATCH_BYTES = 5 * 1024 * 1024
MALFORMED_JSON = "malformed JSON, or JSON nested more than 128 levels deep"
#: The answers of a change of a job's state (cancel, pause, resume).
CHANGED: dict[int, Answer] = {200: ("the job after the action", "Job"), 409: "not allowed in this state"}


@route.get("/v1/health", summary="liveness", public=True, responses={200: ("ok", Health)})
def health() -> Response[str]:
    return json_response(200, {"status": "ok"})


@route.get("/v1/openapi.json", summary="this document", responses={200: ("OpenAPI", None)})
def openapi_document() -> Response[str]:
    """The OpenAPI document of this API (generated from the request models; `docs/openapi.json`)."""
    return Response(200, "application/json", render(route.operations))


@route.get(
    "/v1/forecast",
    summary="occurrences due per minute over the next minutes (the caller's own jobs)",
    params=(
        Param.query("minutes", {"type": "integer", "minimum": 1, "maximum": forecasting.MAX_MINUTES, "default": 60}),
    ),
    responses={200: ("the forecast, minute by minute", "Forecast"), 422: "minutes out of range"},
)
def get_forecast() -> Response[str]:
    """Occurrences due per minute over the next `minutes` (1-180, default 60): the caller's own."""
    who = tenant()
    minutes = int_query("minutes", 60, 1, forecasting.MAX_MINUTES)
    result = wiring.container(metrics).core.forecast_service().forecast(minutes, tenant=who)
    return json_response(200, forecast_view(result))


@route.post(
    "/v1/jobs",
    summary="create a job",
    params=(
        Param.header(
            "Idempotency-Key",
            {"type": "string", "maxLength": 255},
            "a retry with the same key and body returns the same job (24 h)",
        ),
    ),
    body=JobSpec,
    responses={
        201: ("created", "Job"),
        200: ("replay of an earlier create with the same Idempotency-Key", "Job"),
        400: MALFORMED_JSON,
        409: "Idempotency-Key reused with a different body, or external_id already another job's",
        413: "payload over 64 KiB",
        415: "not JSON",
        422: "invalid field",
        429: "over the tenant's active-job quota",
    },
)
def create_job() -> Response[str]:
    who = tenant()
    body = json_body()
    spec = validated(JobSpec, body)
    key = header("Idempotency-Key")
    if key is not None and not (1 <= len(key) <= 255):
        raise Problem.unprocessable("Idempotency-Key must be 1-255 characters")
    svc = service()
    created = svc.create(who, spec, key, body)
    view = job_view(created.job, reads())
    view["replayed"] = created.replayed
    headers = {"Location": f"/v1/jobs/{created.job.job_id}", "ETag": f'"{created.job.version}"'}
    if created.replayed:
        headers["Idempotent-Replayed"] = "true"
    return json_response(200 if created.replayed else 201, view, headers)


def _submission(item: Any) -> Submission:
    """One item of a batch as a job to create; a malformed item raises its problem (and stores nothing)."""
    if not isinstance(item, dict) or not isinstance(item.get("job"), dict):
        raise Problem.unprocessable("each item is an object with a 'job' definition")
    unknown = set(item) - {"job", "idempotency_key"}
    if unknown:
        raise Problem.unprocessable(f"unknown item field(s): {', '.join(sorted(unknown))}")
    key = item.get("idempotency_key")
    if key is not None and not (isinstance(key, str) and 1 <= len(key) <= 255):
        raise Problem.unprocessable("idempotency_key must be a string of 1-255 characters")
    spec = validated(JobSpec, item["job"])
    return Submission(spec, key, item["job"])


@route.post(
    "/v1/jobs/batch",
    summary="create up to 25 jobs in one request (each created, replayed or refused on its own)",
    body="JobBatch",
    responses={
        200: ("one result per item, in the items' order", "JobBatchResults"),
        400: MALFORMED_JSON,
        413: "body over 5 MiB",
        415: "not JSON",
        422: "not a list of 1-25 items",
    },
)
def create_jobs() -> Response[str]:
    """Create up to MAX_BATCH jobs in one request: each item is created (or replayed, or refused) on its own, and
    the results come back in the items' order - one request to API Gateway and one Lambda for them all, and the
    valid items stored in one DynamoDB transaction with one change of the tenant's quota counter."""
    who = tenant()
    body = json_body(max_bytes=MAX_BATCH_BYTES)
    items = body.get("items")
    if set(body) - {"items"} or not isinstance(items, list) or not items:
        raise Problem.unprocessable('send {"items": [{"job": {...}, "idempotency_key": ...}]}')
    if len(items) > MAX_BATCH:
        raise Problem.unprocessable(f"a batch holds at most {MAX_BATCH} items; this one has {len(items)}")
    svc = service()
    answers: list[Created | Exception | None] = [None] * len(items)
    submissions: list[tuple[int, Submission]] = []
    for index, item in enumerate(items):
        try:
            submissions.append((index, _submission(item)))
        except Problem as problem:
            answers[index] = problem
    for (index, _), created in zip(submissions, svc.create_many(who, [s for _, s in submissions]), strict=True):
        answers[index] = created
    results: list[BatchResult] = []
    for index, answer in enumerate(answers):
        if isinstance(answer, Created):
            view = job_view(answer.job, reads())
            view["replayed"] = answer.replayed
            # A job view is JobSpec's fields and views.Job's (merged so in the document too).
            results.append({"index": index, "status": 200 if answer.replayed else 201, "job": cast(views.Job, view)})
        else:
            assert answer is not None
            refused = _problem_of(answer)
            results.append({"index": index, "status": refused.status_code, "problem": json.loads(refused.body or "{}")})
    accepted = sum(1 for r in results if r["status"] in (200, 201))
    logger.info("batch created", extra={"items": len(items), "created_or_replayed": accepted})
    metrics.add_metric(name="BatchItems", unit="Count", value=len(items))
    batch: JobBatchResults = {"results": results}
    return json_response(200, batch)


def _problem_of(exc: Exception) -> Response[str]:
    """The problem response the API gives for `exc` (its exception handler's), for one item of a batch (which
    creates jobs: a job or backfill not found is unexpected there)."""
    for kind, handle in HANDLERS.items():
        if kind not in (JobNotFound, BackfillNotFound) and isinstance(exc, kind):
            return handle(exc)
    unexpected: Response[str] = on_unexpected(exc)
    return unexpected


@route.get(
    "/v1/jobs",
    summary="list the caller's jobs, oldest first",
    description=(
        "Oldest first, a page at a time (`next_cursor`). The jobs one `POST /v1/jobs/batch` stored together are "
        "listed together, in the batch's order, where its first job is. The list may lag a write by a moment; "
        "`GET /v1/jobs/{job_id}` is always current."
    ),
    params=(
        Param.query("state", {"enum": [s.value for s in JobState]}),
        Param.query(
            "label",
            {
                "type": "array",
                "maxItems": MAX_SELECTORS,
                "items": {"type": "string", "pattern": "^[^:]+:[-A-Za-z0-9_.]*$"},
            },
            "key:value (the label has that value) or key: (the job has the label); repeat to AND them. With a "
            "label, the list is by that label's value, then job id",
            style="form",
            explode=True,
        ),
        Param.query("target_type", {"enum": list(TARGET_TYPES)}),
        Param.query("name_prefix", {"type": "string", "minLength": 1, "maxLength": MAX_NAME_PREFIX}),
        *PAGE,
    ),
    responses={200: ("a page of jobs", "JobList"), 422: "bad query"},
)
def list_jobs() -> Response[str]:
    who = tenant()
    state_raw = app.current_event.get_query_string_value("state", None)
    state = None
    if state_raw:
        try:
            state = JobState(state_raw.upper())
        except ValueError:
            raise Problem.unprocessable(
                f"state must be one of {', '.join(s.value for s in JobState)}, not '{state_raw}'",
                ("state", "unknown state"),
            ) from None
    query = _job_query()
    jobs = reads()
    shown, next_cursor = page_of(lambda limit, cursor: jobs.list_shown(who, state, limit, cursor, query))
    views = [job_view(job, jobs, status=status) for job, status in shown]
    return json_response(200, {"jobs": views, "next_cursor": next_cursor})


def _job_query() -> JobQuery:
    """The list's filters besides `state`: `label=key:value` or `label=key:` (repeatable, ANDed), `target_type=`,
    `name_prefix=`; a malformed one is a 422 naming its parameter."""
    event = app.current_event
    raw_labels = (event.multi_value_query_string_parameters or {}).get("label") or []
    if len(raw_labels) > MAX_SELECTORS:
        raise Problem.unprocessable(
            f"a list takes at most {MAX_SELECTORS} label selectors; this one has {len(raw_labels)}",
            ("label", f"at most {MAX_SELECTORS}"),
        )
    selectors = []
    for raw in raw_labels:
        try:
            selectors.append(LabelSelector.parse(raw))
        except ValueError as exc:
            raise Problem.unprocessable(
                f"{exc}; a selector is label=key:value (that value) or label=key: (any value)",
                ("label", str(exc)),
            ) from None
    target_type = event.get_query_string_value("target_type", None)
    if target_type is not None and target_type not in TARGET_TYPES:
        raise Problem.unprocessable(
            f"target_type must be one of {', '.join(TARGET_TYPES)}, not '{target_type[:80]}'",
            ("target_type", "unknown target type"),
        )
    name_prefix = event.get_query_string_value("name_prefix", None)
    if name_prefix is not None and not 1 <= len(name_prefix) <= MAX_NAME_PREFIX:
        raise Problem.unprocessable(
            f"name_prefix must be 1-{MAX_NAME_PREFIX} characters",
            ("name_prefix", f"must be 1-{MAX_NAME_PREFIX} characters"),
        )
    return JobQuery(tuple(dict.fromkeys(selectors)), target_type, name_prefix)


@route.get(
    "/v1/jobs/by-external-id/<external_id>",
    summary="the caller's job with this external_id",
    responses={200: ("the job", "Job"), 404: NO_JOB},
)
def get_job_by_external_id(external_id: str) -> Response[str]:
    """The caller's job with this external id (JobSpec.external_id); another tenant's is a 404 like any."""
    who = tenant()
    from urllib.parse import unquote

    jobs = reads()
    job = jobs.get_by_external_id(who, unquote(external_id))
    return json_response(200, job_view(job, jobs), {"ETag": f'"{job.version}"', "Location": f"/v1/jobs/{job.job_id}"})


@route.get(
    "/v1/jobs/<job_id>",
    summary="a job",
    params=(Param.query("preview", {"type": "integer", "minimum": 0, "maximum": 50}),),
    responses={200: ("the job", "Job")},
)
def get_job(job_id: str) -> Response[str]:
    who = tenant()
    preview = int_query("preview", 0, 0, 50)
    jobs = reads()
    job = jobs.get(who, job_id)
    return json_response(200, job_view(job, jobs, preview), {"ETag": f'"{job.version}"'})


@route.patch(
    "/v1/jobs/<job_id>",
    summary="change a job (applies to occurrences not yet dispatched)",
    params=(IF_MATCH,),
    body="JobPatch",
    responses={200: ("the changed job", "Job"), 409: "cancelled jobs cannot change", 422: "invalid field"},
)
def update_job(job_id: str) -> Response[str]:
    who = tenant()
    body = json_body()
    expected = if_match()
    svc = service()
    try:
        job = svc.update(who, job_id, body, expected)
    except ValidationError as exc:
        raise validation_problem(exc) from None
    return json_response(200, job_view(job, reads()), {"ETag": f'"{job.version}"'})


def _changed(change: Callable[[JobService, str, str], Job], job_id: str) -> Response[str]:
    """A change of state (cancel, pause, resume) of the caller's job, answered with the job as it is now."""
    who = tenant()
    svc = service()
    return json_response(200, job_view(change(svc, who, job_id), reads()))


@route.delete(
    "/v1/jobs/<job_id>",
    summary="cancel (idempotent)",
    description=(
        "A soft delete: the job becomes CANCELLED and stays readable (GET returns it with state CANCELLED, its run "
        "history too); occurrences already queued are recorded CANCELLED, none fires after the 200. It cannot be "
        "resumed or changed."
    ),
    responses=CHANGED,
)
def cancel_job(job_id: str) -> Response[str]:
    return _changed(JobService.cancel, job_id)


@route.post("/v1/jobs/<job_id>/pause", summary="pause", responses=CHANGED)
def pause_job(job_id: str) -> Response[str]:
    return _changed(JobService.pause, job_id)


@route.post("/v1/jobs/<job_id>/resume", summary="resume (missed runs per the misfire policy)", responses=CHANGED)
def resume_job(job_id: str) -> Response[str]:
    return _changed(JobService.resume, job_id)


@route.post(
    "/v1/jobs/<job_id>/trigger",
    summary="fire one extra occurrence now",
    responses={202: ("accepted", "Trigger"), 409: "paused or cancelled"},
)
def trigger_job(job_id: str) -> Response[str]:
    who = tenant()
    timer = service().trigger(who, job_id)
    return json_response(202, trigger_view(timer))


# -- errors -----------------------------------------------------------------------------------------------


def registered_routes() -> dict[re.Pattern[str], set[str]]:
    """The methods of each route, as the route table declares them (the 405s answer with them)."""
    return route.methods()


@app.not_found
def not_found(exc: Exception) -> Response[str]:
    path = app.current_event.path
    method = app.current_event.http_method
    for pattern, methods in registered_routes().items():
        if pattern.match(path) and method not in methods:
            allowed = ", ".join(sorted(methods))
            return Response(
                405,
                PROBLEM,
                json.dumps(
                    {
                        "type": "https://punctual.dev/problems/method-not-allowed",
                        "title": "Method Not Allowed",
                        "status": 405,
                        "detail": f"{method} is not allowed on {path}; use {allowed}",
                    }
                ),
                headers={"Allow": allowed},
            )
    return problem_response(404, "Not Found", f"there is no resource at {path}")


for _kind, _handle in HANDLERS.items():
    app.exception_handler(_kind)(_handle)


@app.exception_handler(Exception)
def on_unexpected(exc: Exception) -> Response[str]:
    logger.exception("unhandled error")
    return problem_response(
        500,
        "Internal Server Error",
        "the scheduler failed to handle this request; nothing was changed unless a 2xx was returned "
        "earlier. Retry with the same Idempotency-Key.",
    )


@wiring.lambda_context(logger, correlation_id_path=correlation_paths.API_GATEWAY_REST)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
