"""The api Lambda: the public REST API (docs/design.md §4) on Powertools' APIGatewayRestResolver.

The routes live here; the use cases are `scheduler.core.jobs`. What a request carries is read in `api_requests`, the
responses are shaped in `api_views`, and every error is an RFC 9457 problem+json (`api_problems`) with a `detail` a
person can act on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from scheduler.core import forecast as forecasting
from scheduler.core.errors import BackfillNotFound, JobNotFound
from scheduler.core.jobs import DEFAULT_KEY_OVERLAP, MAX_KEY_OVERLAP, Created, JobService, Submission
from scheduler.core.labels import MAX_NAME_PREFIX, MAX_SELECTORS, JobQuery, LabelSelector
from scheduler.core.model import TARGET_TYPES, Job, JobSpec, JobState
from scheduler.core.timefmt import rfc3339
from scheduler.handlers import (
    api_bulk,  # noqa: F401  (registers the bulk action routes)
    api_console,  # noqa: F401  (registers the console's files)
    api_operator,  # noqa: F401  (registers the operator's view)
    api_runs,  # noqa: F401  (registers the runs and backfill routes)
    wiring,
)
from scheduler.handlers.api_caller import metrics as metrics
from scheduler.handlers.api_caller import service, tenant
from scheduler.handlers.api_problems import HANDLERS, PROBLEM, Problem, problem_response, validated, validation_problem
from scheduler.handlers.api_requests import app, header, int_query, is_number, json_body, page_of
from scheduler.handlers.api_views import job_view, json_response
from scheduler.signing import signing_versions, versioned_key_id

logger = wiring.handler_logger()

#: Job definitions one `POST /v1/jobs/batch` creates at most, and its body's size limit (Lambda takes 6 MB).
MAX_BATCH = 25
MAX_BATCH_BYTES = 5 * 1024 * 1024


@app.get("/v1/health")
def health() -> Response[str]:
    return json_response(200, {"status": "ok"})


@app.get("/v1/openapi.json")
def openapi_document() -> Response[str]:
    """The OpenAPI document of this API (generated from the request models; `docs/openapi.json`)."""
    from scheduler.openapi import render

    return Response(200, "application/json", render())


@app.get("/v1/forecast")
def get_forecast() -> Response[str]:
    """Occurrences due per minute over the next `minutes` (1-180, default 60): the caller's own."""
    who = tenant()
    minutes = int_query("minutes", 60, 1, forecasting.MAX_MINUTES)
    result = wiring.container(metrics).core.forecast_service().forecast(minutes, tenant=who)
    return json_response(200, forecasting.view(result))


@app.post("/v1/jobs")
def create_job() -> Response[str]:
    who = tenant()
    body = json_body()
    spec = validated(JobSpec, body)
    key = header("Idempotency-Key")
    if key is not None and not (1 <= len(key) <= 255):
        raise Problem(422, "Unprocessable Content", "Idempotency-Key must be 1-255 characters")
    svc = service()
    created = svc.create(who, spec, key, body)
    view = job_view(created.job, svc)
    view["replayed"] = created.replayed
    headers = {"Location": f"/v1/jobs/{created.job.job_id}", "ETag": f'"{created.job.version}"'}
    if created.replayed:
        headers["Idempotent-Replayed"] = "true"
    return json_response(200 if created.replayed else 201, view, headers)


def _submission(item: Any) -> Submission:
    """One item of a batch as a job to create; a malformed item raises its problem (and stores nothing)."""
    if not isinstance(item, dict) or not isinstance(item.get("job"), dict):
        raise Problem(422, "Unprocessable Content", "each item is an object with a 'job' definition")
    unknown = set(item) - {"job", "idempotency_key"}
    if unknown:
        raise Problem(422, "Unprocessable Content", f"unknown item field(s): {', '.join(sorted(unknown))}")
    key = item.get("idempotency_key")
    if key is not None and not (isinstance(key, str) and 1 <= len(key) <= 255):
        raise Problem(422, "Unprocessable Content", "idempotency_key must be a string of 1-255 characters")
    spec = validated(JobSpec, item["job"])
    return Submission(spec, key, item["job"])


@app.post("/v1/jobs/batch")
def create_jobs() -> Response[str]:
    """Create up to MAX_BATCH jobs in one request: each item is created (or replayed, or refused) on its own, and
    the results come back in the items' order - one request to API Gateway and one Lambda for them all, and the
    valid items stored in one DynamoDB transaction with one change of the tenant's quota counter."""
    who = tenant()
    body = json_body(max_bytes=MAX_BATCH_BYTES)
    items = body.get("items")
    if set(body) - {"items"} or not isinstance(items, list) or not items:
        raise Problem(422, "Unprocessable Content", 'send {"items": [{"job": {...}, "idempotency_key": ...}]}')
    if len(items) > MAX_BATCH:
        raise Problem(
            422, "Unprocessable Content", f"a batch holds at most {MAX_BATCH} items; this one has {len(items)}"
        )
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
    results: list[dict[str, Any]] = []
    for index, answer in enumerate(answers):
        if isinstance(answer, Created):
            view = job_view(answer.job, svc)
            view["replayed"] = answer.replayed
            results.append({"index": index, "status": 200 if answer.replayed else 201, "job": view})
        else:
            assert answer is not None
            refused = _problem_of(answer)
            results.append({"index": index, "status": refused.status_code, "problem": json.loads(refused.body or "{}")})
    accepted = sum(1 for r in results if r["status"] in (200, 201))
    logger.info("batch created", extra={"items": len(items), "created_or_replayed": accepted})
    metrics.add_metric(name="BatchItems", unit="Count", value=len(items))
    return json_response(200, {"results": results})


def _problem_of(exc: Exception) -> Response[str]:
    """The problem response the API gives for `exc` (its exception handler's), for one item of a batch (which
    creates jobs: a job or backfill not found is unexpected there)."""
    for kind, handle in HANDLERS.items():
        if kind not in (JobNotFound, BackfillNotFound) and isinstance(exc, kind):
            return handle(exc)
    unexpected: Response[str] = on_unexpected(exc)
    return unexpected


@app.get("/v1/jobs")
def list_jobs() -> Response[str]:
    who = tenant()
    state_raw = app.current_event.get_query_string_value("state", None)
    state = None
    if state_raw:
        try:
            state = JobState(state_raw.upper())
        except ValueError:
            raise Problem(
                422,
                "Unprocessable Content",
                f"state must be one of {', '.join(s.value for s in JobState)}, not '{state_raw}'",
                errors=[{"field": "state", "message": "unknown state"}],
            ) from None
    query = _job_query()
    svc = service()
    shown, next_cursor = page_of(lambda limit, cursor: svc.list_shown(who, state, limit, cursor, query))
    views = [job_view(job, svc, status=status) for job, status in shown]
    return json_response(200, {"jobs": views, "next_cursor": next_cursor})


def _job_query() -> JobQuery:
    """The list's filters besides `state`: `label=key:value` or `label=key:` (repeatable, ANDed), `target_type=`,
    `name_prefix=`; a malformed one is a 422 naming its parameter."""
    event = app.current_event
    raw_labels = (event.multi_value_query_string_parameters or {}).get("label") or []
    if len(raw_labels) > MAX_SELECTORS:
        raise Problem(
            422,
            "Unprocessable Content",
            f"a list takes at most {MAX_SELECTORS} label selectors; this one has {len(raw_labels)}",
            errors=[{"field": "label", "message": f"at most {MAX_SELECTORS}"}],
        )
    selectors = []
    for raw in raw_labels:
        try:
            selectors.append(LabelSelector.parse(raw))
        except ValueError as exc:
            raise Problem(
                422,
                "Unprocessable Content",
                f"{exc}; a selector is label=key:value (that value) or label=key: (any value)",
                errors=[{"field": "label", "message": str(exc)}],
            ) from None
    target_type = event.get_query_string_value("target_type", None)
    if target_type is not None and target_type not in TARGET_TYPES:
        raise Problem(
            422,
            "Unprocessable Content",
            f"target_type must be one of {', '.join(TARGET_TYPES)}, not '{target_type[:80]}'",
            errors=[{"field": "target_type", "message": "unknown target type"}],
        )
    name_prefix = event.get_query_string_value("name_prefix", None)
    if name_prefix is not None and not 1 <= len(name_prefix) <= MAX_NAME_PREFIX:
        raise Problem(
            422,
            "Unprocessable Content",
            f"name_prefix must be 1-{MAX_NAME_PREFIX} characters",
            errors=[{"field": "name_prefix", "message": f"must be 1-{MAX_NAME_PREFIX} characters"}],
        )
    return JobQuery(tuple(dict.fromkeys(selectors)), target_type, name_prefix)


@app.get("/v1/jobs/by-external-id/<external_id>")
def get_job_by_external_id(external_id: str) -> Response[str]:
    """The caller's job with this external id (JobSpec.external_id); another tenant's is a 404 like any."""
    who = tenant()
    from urllib.parse import unquote

    svc = service()
    job = svc.get_by_external_id(who, unquote(external_id))
    return json_response(200, job_view(job, svc), {"ETag": f'"{job.version}"', "Location": f"/v1/jobs/{job.job_id}"})


@app.get("/v1/jobs/<job_id>")
def get_job(job_id: str) -> Response[str]:
    who = tenant()
    preview = int_query("preview", 0, 0, 50)
    svc = service()
    job = svc.get(who, job_id)
    return json_response(200, job_view(job, svc, preview), {"ETag": f'"{job.version}"'})


@app.patch("/v1/jobs/<job_id>")
def update_job(job_id: str) -> Response[str]:
    who = tenant()
    body = json_body()
    expected = _if_match()
    svc = service()
    try:
        job = svc.update(who, job_id, body, expected)
    except ValidationError as exc:
        raise validation_problem(exc) from None
    return json_response(200, job_view(job, svc), {"ETag": f'"{job.version}"'})


def _if_match() -> int | None:
    """The job version the request's If-Match names (None without one); a malformed one is a 400."""
    if_match = header("If-Match")
    if if_match is None:
        return None
    cleaned = if_match.strip().removeprefix("W/").strip('"')
    if not is_number(cleaned):
        raise Problem(400, "Bad Request", f"If-Match must be a job version (e.g. \"3\"), not '{if_match}'")
    return int(cleaned)


def _changed(change: Callable[[JobService, str, str], Job], job_id: str) -> Response[str]:
    """A change of state (cancel, pause, resume) of the caller's job, answered with the job as it is now."""
    who = tenant()
    svc = service()
    return json_response(200, job_view(change(svc, who, job_id), svc))


@app.delete("/v1/jobs/<job_id>")
def cancel_job(job_id: str) -> Response[str]:
    return _changed(JobService.cancel, job_id)


@app.post("/v1/jobs/<job_id>/pause")
def pause_job(job_id: str) -> Response[str]:
    return _changed(JobService.pause, job_id)


@app.post("/v1/jobs/<job_id>/resume")
def resume_job(job_id: str) -> Response[str]:
    return _changed(JobService.resume, job_id)


@app.post("/v1/jobs/<job_id>/trigger")
def trigger_job(job_id: str) -> Response[str]:
    who = tenant()
    timer = service().trigger(who, job_id)
    return json_response(
        202, {"job_id": job_id, "occurrence_key": timer.key, "scheduled_for": rfc3339(timer.scheduled_for)}
    )


@app.get("/v1/jobs/<job_id>/signing-keys")
def signing_keys(job_id: str) -> Response[str]:
    """The job's signature v2 keys (the current version under every active root key, then the replaced version
    while its overlap lasts): only its own tenant gets them (another tenant's job is a 404), and a key verifies that
    job's calls only (docs/security.md)."""
    who = tenant()
    job = service().get(who, job_id)
    return _signing_keys_response(job, 200)


@app.post("/v1/jobs/<job_id>/signing-keys/rotate")
def rotate_signing_key(job_id: str) -> Response[str]:
    """Make the next version of the job's key current; the replaced one keeps signing for `overlap_seconds` (0: a
    revoke). Answers like the GET, with the job's new version as ETag; `If-Match` refuses a stale read (412)."""
    who = tenant()
    body = json_body(required=False)
    unknown = set(body) - {"overlap_seconds"}
    if unknown:
        detail = f'unknown field(s): {", ".join(sorted(unknown))}; send {{"overlap_seconds": n}} or no body'
        errors = [{"field": name, "message": "unknown field"} for name in sorted(unknown)]
        raise Problem(422, "Unprocessable Content", detail, errors=errors)
    overlap = body.get("overlap_seconds", int(DEFAULT_KEY_OVERLAP.total_seconds()))
    limit = int(MAX_KEY_OVERLAP.total_seconds())
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap <= limit:
        raise Problem(
            422, "Unprocessable Content",
            f"overlap_seconds is a whole number of seconds 0-{limit} (7 days; 0 revokes the old key at once), "
            f"not {json.dumps(overlap)}",
            errors=[{"field": "overlap_seconds", "message": f"must be an integer 0-{limit}"}],
        )  # fmt: skip
    job = service().rotate_signing_key(who, job_id, timedelta(seconds=overlap), _if_match())
    return _signing_keys_response(job, 200)


def _signing_keys_response(job: Job, status: int) -> Response[str]:
    ring = wiring.container(metrics).key_ring
    now = wiring.container(metrics).core.clock.now()
    keys = []
    for version in signing_versions(job.key_version, job.previous_key_until, now):
        until = job.previous_key_until if version != job.key_version else None
        expires = rfc3339(until) if until is not None else None
        keys += [
            {"key_id": kid, "key": key, "version": version, "expires_at": expires}
            for kid, key in ring.job_keys(job.job_id, version).items()
        ]
    body = {
        "job_id": job.job_id,
        "signature": "v2",
        "algorithm": "HMAC-SHA256",
        "current_key_id": versioned_key_id(ring.current, job.key_version),
        "key_version": job.key_version,
        "keys": keys,
    }
    shown = [k["key_id"] for k in keys]
    logger.info("signing keys handed out", extra={"job_id": job.job_id, "tenant": job.tenant, "key_ids": shown})
    return json_response(status, body, {"Cache-Control": "no-store", "ETag": f'"{job.version}"'})


# -- errors -----------------------------------------------------------------------------------------------


def registered_routes() -> dict[re.Pattern[str], set[str]]:
    """The methods of each route, as the decorators above registered them with the resolver (the one list of
    routes: the 405s and the OpenAPI drift test read it)."""
    routes: dict[re.Pattern[str], set[str]] = {}
    for route in [*app._static_routes, *app._dynamic_routes]:
        routes.setdefault(route.rule, set()).add(route.method.upper())
    return routes


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
