"""The API's routes of a job's runs (history, resolve, retry) and of its backfills."""

from __future__ import annotations

from urllib.parse import unquote

from aws_lambda_powertools.event_handler import Response

from scheduler.core.jobs import run_retry
from scheduler.core.jobs.backfill import BackfillService
from scheduler.core.model.job import MAX_NOTE, BackfillRequest, RunState
from scheduler.core.model.timefmt import parse_rfc3339
from scheduler.handlers import wiring
from scheduler.handlers.api_caller import metrics, reads, resolution, service, tenant
from scheduler.handlers.api_problems import Problem, validated
from scheduler.handlers.api_requests import PAGE, json_body, page_of
from scheduler.handlers.api_routes import Param, route
from scheduler.handlers.api_views import backfill_view, json_response, run_view


@route.get(
    "/v1/jobs/<job_id>/runs",
    summary="run history, newest first",
    params=PAGE,
    responses={200: ("a page of runs", "RunList")},
)
def job_runs(job_id: str) -> Response[str]:
    who = tenant()
    runs, next_cursor = page_of(lambda limit, cursor: reads().runs(who, job_id, limit, cursor))
    return json_response(200, {"runs": [run_view(r) for r in runs], "next_cursor": next_cursor})


@route.post(
    "/v1/jobs/<job_id>/runs/<occurrence_key>/resolve",
    summary="settle a RECONCILING run",
    body="Resolve",
    responses={200: ("the run", "Run"), 409: "not RECONCILING"},
)
def resolve_run(job_id: str, occurrence_key: str) -> Response[str]:
    who = tenant()
    body = json_body()
    outcome = {"succeeded": RunState.SUCCEEDED, "retry": RunState.RETRY_WAIT}.get(str(body.get("outcome")))
    if outcome is None or set(body) - {"outcome", "note"}:
        raise Problem.unprocessable(
            'send {"outcome": "succeeded" | "retry", "note"?: "..."}',
            ("outcome", "must be 'succeeded' or 'retry'"),
        )
    note = body.get("note", "resolved by operator")
    if not isinstance(note, str) or not 1 <= len(note) <= MAX_NOTE:
        raise Problem.unprocessable(
            f"note, when given, is a string of 1-{MAX_NOTE} characters saying why the operator resolved the run",
            ("note", f"must be a string of 1-{MAX_NOTE} characters"),
        )
    run = resolution().resolve(who, job_id, unquote(occurrence_key), outcome, note)
    return json_response(200, run_view(run))


@route.post(
    "/v1/jobs/<job_id>/runs/<scheduled_for>/retry",
    summary="re-run a DEAD or RECONCILING run once (the same occurrence key, a new attempt)",
    description=(
        "The occurrence becomes claimable again (a DEAD one with a fresh attempt budget) and is sent to the job's "
        "ready queue; the worker's claim makes the new attempt with the next fencing token. A SUCCEEDED run is never "
        "run again. Repeating the retry while the run waits for its attempt sends it again and answers the same "
        "state (safe after a lost answer). No body."
    ),
    params=(Param.path("scheduled_for", "the run's scheduled_for (RFC 3339 with an offset), or its occurrence key"),),
    responses={
        202: ("the run, waiting for its new attempt", "Run"),
        409: "the run is not DEAD or RECONCILING (e.g. SUCCEEDED), or the job is paused/cancelled",
        422: "scheduled_for is not an RFC 3339 instant",
    },
)
def retry_run(job_id: str, scheduled_for: str) -> Response[str]:
    """Re-run a DEAD or RECONCILING occurrence of the caller's job once (the same key, a new attempt): 202 with the
    run as it is now, waiting for its attempt. The occurrence is named by its instant (or its occurrence key)."""
    who = tenant()
    named = unquote(scheduled_for).removeprefix(f"{job_id}:")
    try:
        at = parse_rfc3339(named)
    except (ValueError, OverflowError):
        raise Problem.unprocessable(
            f"name the run by its scheduled_for instant in RFC 3339 with an offset (e.g. 2026-01-05T09:00:00Z), "
            f"not '{named[:80]}'",
            ("scheduled_for", "must be an RFC 3339 instant with an offset"),
        ) from None
    run = run_retry.retry_run(service(), who, job_id, at)
    return json_response(202, run_view(run))


def backfills() -> BackfillService:
    return wiring.container(metrics).core.backfill_service()


@route.post(
    "/v1/jobs/<job_id>/backfill",
    summary="materialise the job's occurrences in a past range (in waves; what already ran is not re-run)",
    body=BackfillRequest,
    responses={
        202: ("accepted; Location names the backfill", "Backfill"),
        409: "the job is cancelled",
        422: "bad range: in the future, too many occurrences, none, or a one-shot job",
    },
)
def start_backfill(job_id: str) -> Response[str]:
    who = tenant()
    body = json_body()
    request = validated(BackfillRequest, body)
    svc = backfills()
    backfill = svc.start(who, job_id, request.range_from, request.to)
    location = f"/v1/jobs/{job_id}/backfill/{backfill.backfill_id}"
    return json_response(202, backfill_view(backfill, svc), {"Location": location})


@route.get(
    "/v1/jobs/<job_id>/backfill",
    summary="the job's backfills, newest first",
    params=PAGE,
    responses={
        200: ("a page of backfills", "BackfillList"),
        422: "bad query: limit out of range, or a cursor this API did not return for this job",
    },
)
def list_backfills(job_id: str) -> Response[str]:
    who = tenant()
    svc = backfills()
    found, next_cursor = page_of(lambda limit, cursor: svc.list(who, job_id, limit, cursor))
    return json_response(200, {"backfills": [backfill_view(b, svc) for b in found], "next_cursor": next_cursor})


@route.get(
    "/v1/jobs/<job_id>/backfill/<backfill_id>",
    summary="a backfill and its progress",
    responses={200: ("the backfill", "Backfill")},
)
def get_backfill(job_id: str, backfill_id: str) -> Response[str]:
    who = tenant()
    svc = backfills()
    return json_response(200, backfill_view(svc.get(who, job_id, backfill_id), svc))


@route.delete(
    "/v1/jobs/<job_id>/backfill/<backfill_id>",
    summary="cancel: no further waves (idempotent; occurrences already sent still run)",
    responses={200: ("the cancelled backfill", "Backfill"), 409: "already completed"},
)
def cancel_backfill(job_id: str, backfill_id: str) -> Response[str]:
    who = tenant()
    svc = backfills()
    return json_response(200, backfill_view(svc.cancel(who, job_id, backfill_id), svc))
