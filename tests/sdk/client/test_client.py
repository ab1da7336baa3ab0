"""The SDK's client with a scripted API: requests as the API takes them, typed answers, problem+json raised as typed
exceptions carrying `detail`, pages followed, retries that are bounded, jittered, honour Retry-After and keep a
create's Idempotency-Key, and SigV4 signing. No network."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from punctual_sdk import errors
from punctual_sdk.auth import BearerAuth, SigV4Auth, region_of
from punctual_sdk.client import Client
from punctual_sdk.models import (
    Backfill,
    BackfillState,
    CronSchedule,
    HttpTarget,
    Job,
    JobDefinition,
    JobState,
    RunState,
    SigningKeys,
)
from punctual_sdk.transport import HttpRequest

Problem = Callable[..., tuple[int, dict[str, Any]]]
JobJson = Callable[..., dict[str, Any]]

DEFINITION = {
    "name": "report",
    "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
    "target": {"type": "http", "url": "https://example.com/hook"},
    "payload": {"report": "daily"},
}


def test_create_sends_the_definition_with_the_token_and_answers_a_typed_job(api: Any, job_json: JobJson) -> None:
    # Given an API that creates the job
    api.answers["POST /v1/jobs"] = (201, job_json(name="report", future_field={"x": 1}))
    client = Client("http://api.test/", BearerAuth("t-alice"), transport=api)

    # When a typed definition is submitted with a key
    definition = JobDefinition(
        name="report",
        schedule=CronSchedule(expression="0 9 * * 1-5", timezone="Europe/Berlin"),
        target=HttpTarget(url="https://example.com/hook"),
        payload={"report": "daily"},
    )
    job = client.create(definition, idempotency_key="report-2026")

    # Then only the fields set are sent, with the bearer token and the key
    method, path, _, body, headers = api.sent()
    assert (method, path) == ("POST", "/v1/jobs")
    assert body == {
        "name": "report",
        "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
        "target": {"type": "http", "url": "https://example.com/hook"},
        "payload": {"report": "daily"},
    }
    assert headers["Authorization"] == "Bearer t-alice"
    assert headers["Idempotency-Key"] == "report-2026"
    # And the answer is typed, keeps what this SDK does not know, and has the document as sent
    assert isinstance(job, Job)
    assert job.state is JobState.ACTIVE
    assert job.next_run_at == datetime(2026, 1, 6, 8, tzinfo=UTC)
    assert isinstance(job.schedule, CronSchedule) and job.schedule.timezone == "Europe/Berlin"
    assert isinstance(job.target, HttpTarget) and job.target.timeout_seconds == 30
    assert job.raw["future_field"] == {"x": 1}
    assert job.definition["name"] == "report" and "job_id" not in job.definition


def test_a_schedule_or_target_of_a_kind_the_sdk_does_not_know_comes_back_as_a_dict(api: Any, job_json: JobJson) -> None:
    api.answers["GET /v1/jobs/job-1"] = (200, job_json(target={"type": "kafka", "topic": "t"}))

    job = api.client().get("job-1")

    assert job.target == {"type": "kafka", "topic": "t"}


def test_a_state_of_a_newer_api_is_unknown_and_kept_as_sent(api: Any, job_json: JobJson) -> None:
    # Given a newer API whose job, run and backfill are in states this SDK has never heard of
    api.answers["GET /v1/jobs/job-1"] = (200, job_json(state="HIBERNATING"))
    api.answers["GET /v1/jobs/job-1/runs"] = (
        200,
        {"runs": [{"occurrence_key": "job-1:a", "state": "QUARANTINED", "attempts": 1}], "next_cursor": None},
    )
    api.answers["GET /v1/jobs/job-1/backfill/b-1"] = (200, {"backfill_id": "b-1", "state": "THROTTLED"})
    client = api.client()

    # When they are read
    job = client.get("job-1")
    [run] = client.runs("job-1").items
    backfill = client.backfill("job-1", "b-1")

    # Then each parses: the state is UNKNOWN, the state as sent is readable, and nothing is taken for settled
    assert job.state is JobState.UNKNOWN and job.raw["state"] == "HIBERNATING"
    assert run.state is RunState.UNKNOWN and run.raw["state"] == "QUARANTINED" and not run.state.terminal
    assert backfill.state is BackfillState.UNKNOWN and backfill.raw["state"] == "THROTTLED"
    assert job.version == 1 and run.occurrence_key == "job-1:a"


@pytest.mark.parametrize(
    ("answer", "call", "says"),
    [
        ((200, {"state": "ACTIVE", "version": 1}), lambda c: c.get("job-1"), "job_id: Field required"),
        ((200, {"job_id": "job-1", "state": "ACTIVE", "version": "v1"}), lambda c: c.get("job-1"), "version"),
        ((200, {"job_id": "job-1", "state": 7, "version": 1}), lambda c: c.get("job-1"), "state"),
        ((200, b"<html>gateway</html>"), lambda c: c.get("job-1"), "not JSON"),
        ((200, b"\xff\xfe"), lambda c: c.get("job-1"), "not JSON"),
        ((200, {"runs": {"a": 1}}), lambda c: c.runs("job-1"), "'runs' that is not a list"),
        ((200, {"runs": ["job-1:a"]}), lambda c: c.runs("job-1"), "'runs' that is not a list of JSON objects"),
        ((200, {"runs": [], "next_cursor": 5}), lambda c: c.runs("job-1"), "next_cursor"),
        ((200, {"results": "none"}), lambda c: c.create_batch([DEFINITION]), "'results'"),
    ],
)
def test_an_answer_the_sdk_cannot_read_is_an_invalid_response_never_a_raw_parse_error(
    api: Any, answer: tuple[int, Any], call: Callable[[Client], Any], says: str
) -> None:
    api.answers["GET /v1/jobs/job-1"] = answer
    api.answers["GET /v1/jobs/job-1/runs"] = answer
    api.answers["POST /v1/jobs/batch"] = answer

    with pytest.raises(errors.InvalidResponse, match=says) as raised:
        call(api.client())

    assert isinstance(raised.value, errors.PunctualError)
    assert raised.value.body is not None


STATUSES = [
    (400, errors.BadRequest),
    (401, errors.Unauthorized),
    (403, errors.Forbidden),
    (404, errors.NotFound),
    (409, errors.Conflict),
    (412, errors.PreconditionFailed),
    (422, errors.Unprocessable),
    (429, errors.TooManyRequests),
    (500, errors.ServerError),
    (503, errors.ServerError),
    (418, errors.ApiError),
]


@pytest.mark.parametrize(("status", "kind"), STATUSES)
def test_a_problem_is_raised_as_its_typed_exception_with_the_detail(
    api: Any, problem: Problem, status: int, kind: type[errors.ApiError]
) -> None:
    api.answers["POST /v1/jobs/job-1/trigger"] = problem(status, "Some Title", f"what to fix ({status})")

    with pytest.raises(kind) as raised:
        api.client(retries=0).trigger("job-1")

    assert type(raised.value) is kind
    assert raised.value.status == status
    assert raised.value.detail == f"what to fix ({status})"
    assert raised.value.title == "Some Title"
    assert raised.value.type == "https://punctual.dev/problems/some-title"
    assert raised.value.body["status"] == status
    assert isinstance(raised.value, errors.PunctualError)


def test_a_precondition_failed_is_a_conflict() -> None:
    assert issubclass(errors.PreconditionFailed, errors.Conflict)


def test_a_validation_problem_names_its_fields(api: Any, problem: Problem) -> None:
    api.answers["PATCH /v1/jobs/job-1"] = problem(
        422, "Unprocessable Content", "schedule.expression: minute must be 0-59, not 61",
        errors=[{"field": "schedule.expression", "message": "minute must be 0-59, not 61"},
                {"field": "jitter_seconds", "message": "too large"}],
    )  # fmt: skip

    with pytest.raises(errors.Unprocessable) as raised:
        api.client().update("job-1", {"schedule": {"expression": "61 * * * *"}})

    assert raised.value.field == "schedule.expression"
    assert [e.field for e in raised.value.errors] == ["schedule.expression", "jitter_seconds"]
    assert "minute must be 0-59" in str(raised.value)


def test_an_error_page_that_is_not_json_still_gives_a_typed_error(api: Any) -> None:
    api.answers["GET /v1/jobs/job-1"] = (403, b"<html>Forbidden</html>")

    with pytest.raises(errors.Forbidden) as raised:
        api.client().get("job-1")

    assert raised.value.title == "HTTP 403"
    assert "Forbidden" in raised.value.detail


def test_api_gateways_own_message_becomes_the_detail(api: Any) -> None:
    api.answers["GET /v1/jobs"] = (403, {"message": "User is not authorized to access this resource"})

    with pytest.raises(errors.Forbidden, match="not authorized"):
        api.client().list_jobs()


def test_update_sends_if_match_as_a_quoted_version_and_a_stale_one_is_precondition_failed(
    api: Any, job_json: JobJson, problem: Problem
) -> None:
    api.answers["PATCH /v1/jobs/job-1"] = [(200, job_json(version=4)), problem(412, "Precondition Failed", "stale")]
    client = api.client()

    assert client.update("job-1", {"name": "x"}, if_match=3).version == 4
    assert api.sent()[4]["If-Match"] == '"3"'
    with pytest.raises(errors.PreconditionFailed):
        client.update("job-1", {"name": "y"}, if_match=3)


def test_rotate_signing_key_sends_the_overlap_and_if_match_once_and_returns_the_keys(api: Any) -> None:
    keys = [{"key_id": "k1.2", "key": "new", "version": 2, "expires_at": None},
            {"key_id": "k1", "key": "old", "version": 1, "expires_at": "2026-01-06T09:00:00Z"}]  # fmt: skip
    api.answers["POST /v1/jobs/job-1/signing-keys/rotate"] = [
        (200, {"job_id": "job-1", "key_version": 2, "keys": keys})
    ]

    rotated = api.client().rotate_signing_key("job-1", overlap_seconds=3600, if_match=1)

    _, _, _, body, headers = api.sent()
    assert (body, headers["If-Match"]) == ({"overlap_seconds": 3600}, '"1"')
    assert rotated.by_id() == {"k1.2": "new", "k1": "old"}


def test_the_job_list_sends_each_label_filter_and_the_others(api: Any, job_json: JobJson) -> None:
    api.answers["GET /v1/jobs"] = [(200, {"jobs": [job_json("a")], "next_cursor": None})]

    page = api.client().list_jobs(
        "active", labels={"customer": "42", "team": None}, target_type="http", name_prefix="charge-"
    )

    assert [j.job_id for j in page.items] == ["a"]
    assert api.sent()[2] == {
        "state": ["ACTIVE"],
        "label": ["customer:42", "team:"],
        "target_type": ["http"],
        "name_prefix": ["charge-"],
    }


def test_a_run_is_retried_by_its_instant_and_a_job_found_by_its_external_id(api: Any, job_json: JobJson) -> None:
    run = {"occurrence_key": "job-1:2026-12-01T08:00:00Z", "scheduled_for": "2026-12-01T08:00:00Z",
           "state": "RETRY_WAIT", "attempts": 3}  # fmt: skip
    api.answers["POST /v1/jobs/job-1/runs/2026-12-01T08%3A00%3A00Z/retry"] = [(202, run)]
    api.answers["GET /v1/jobs/by-external-id/order-7"] = [(200, job_json("job-1"))]
    client = api.client()

    assert client.retry_run("job-1", datetime(2026, 12, 1, 8, tzinfo=UTC)).state == "RETRY_WAIT"
    assert client.get_by_external_id("order-7").job_id == "job-1"


def test_iter_jobs_follows_next_cursor_with_the_filter_on_every_page(api: Any, job_json: JobJson) -> None:
    pages = {None: (["a", "b"], "c1"), "c1": (["c"], "c2"), "c2": (["d"], None)}

    def page(request: HttpRequest) -> tuple[int, Any]:
        query = dict(p.split("=") for p in request.url.split("?")[1].split("&"))
        ids, following = pages[query.get("cursor")]
        return 200, {"jobs": [job_json(i, state="PAUSED") for i in ids], "next_cursor": following}

    api.answers["GET /v1/jobs"] = page

    jobs = list(api.client().iter_jobs(JobState.PAUSED, page_size=2))

    assert [j.job_id for j in jobs] == ["a", "b", "c", "d"]
    assert api.sent(0)[2] == {"state": ["PAUSED"], "limit": ["2"]}
    assert api.sent(2)[2] == {"state": ["PAUSED"], "limit": ["2"], "cursor": ["c2"]}


def test_iter_runs_follows_next_cursor_and_types_the_runs(api: Any) -> None:
    def run(key: str) -> dict[str, Any]:
        return {"occurrence_key": key, "scheduled_for": "2026-01-06T08:00:00Z", "state": "SUCCEEDED", "attempts": 1}

    api.answers["GET /v1/jobs/job-1/runs"] = [
        (200, {"runs": [run("job-1:a"), run("job-1:b")], "next_cursor": "n1"}),
        (200, {"runs": [run("job-1:c")], "next_cursor": None}),
    ]

    runs = list(api.client().iter_runs("job-1", page_size=2))

    assert [r.occurrence_key for r in runs] == ["job-1:a", "job-1:b", "job-1:c"]
    assert all(r.state is RunState.SUCCEEDED for r in runs)
    assert api.sent(1)[2] == {"limit": ["2"], "cursor": ["n1"]}


def test_a_run_its_flow_control_key_held_is_typed_and_a_reason_of_a_newer_api_kept(api: Any) -> None:
    held = {
        "key": "payments-api",
        "reasons": ["rate", "quota-of-tomorrow"],
        "since": "2026-01-06T08:00:00Z",
        "seconds": 12.4,
        "detail": "held by flow-control key payments-api for 12.4 s: its rate",
    }
    base = {"scheduled_for": "2026-01-06T08:00:00Z", "state": "SUCCEEDED", "attempts": 1}
    api.answers["GET /v1/jobs/job-1/runs"] = (
        200,
        {"runs": [{"occurrence_key": "job-1:a", **base, "held": held}, {"occurrence_key": "job-1:b", **base}]},
    )

    held_run, older_api_run = api.client().runs("job-1").items

    assert held_run.held is not None
    assert (held_run.held.key, held_run.held.reasons, held_run.held.seconds) == (
        "payments-api",
        ["rate", "quota-of-tomorrow"],
        12.4,
    )
    assert held_run.held.since == datetime(2026, 1, 6, 8, tzinfo=UTC)
    assert held_run.held.detail.startswith("held by flow-control key payments-api")
    assert older_api_run.held is None


def test_resolve_takes_the_job_from_the_key_and_encodes_the_key(api: Any) -> None:
    key = "job-1:2026-12-01T08:00:00Z"
    run = {"occurrence_key": key, "scheduled_for": "2026-12-01T08:00:00Z", "state": "SUCCEEDED", "attempts": 1}
    api.answers["POST /v1/jobs/job-1/runs/job-1%3A2026-12-01T08%3A00%3A00Z/resolve"] = (200, run)

    resolved = api.client().resolve(key, "succeeded", note="charged, checked in the ledger")

    assert resolved.state is RunState.SUCCEEDED
    assert api.sent()[3] == {"outcome": "succeeded", "note": "charged, checked in the ledger"}


def test_backfill_sends_the_range_in_utc_and_reads_from_and_to(api: Any) -> None:
    api.answers["POST /v1/jobs/job-1/backfill"] = (202, {
        "backfill_id": "bf-1", "job_id": "job-1", "from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z",
        "state": "RUNNING", "total": 24, "dispatched": 0, "remaining": 24, "waves": 0, "waves_left": 1,
        "wave_size": 500,
    })  # fmt: skip

    backfill = api.client().start_backfill(
        "job-1", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, 0, 0, 0, 250_000, tzinfo=UTC)
    )

    assert api.sent()[3] == {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00.250Z"}
    assert isinstance(backfill, Backfill) and backfill.running
    assert backfill.range_from == datetime(2026, 1, 1, tzinfo=UTC)
    assert backfill.raw["from"] == "2026-01-01T00:00:00Z"


@pytest.mark.parametrize(
    ("range_from", "range_to", "says"),
    [
        (datetime(2026, 1, 1), datetime(2026, 1, 2, tzinfo=UTC), "range_from needs a time zone"),
        (datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC), "must be after range_from"),
    ],
)
def test_a_bad_backfill_range_is_refused_before_sending(
    api: Any, range_from: datetime, range_to: datetime, says: str
) -> None:
    with pytest.raises(errors.InvalidArgument, match=says):
        api.client().start_backfill("job-1", range_from, range_to)
    assert api.requests == []


def test_signing_keys_keep_every_key_and_fields_the_sdk_does_not_know(api: Any) -> None:
    api.answers["GET /v1/jobs/job-1/signing-keys"] = (200, {
        "job_id": "job-1", "signature": "v2", "algorithm": "HMAC-SHA256", "current_key_id": "k2",
        "keys": [{"key_id": "k2", "key": "c2VjcmV0Mg", "not_before": "x"}, {"key_id": "k1", "key": "c2VjcmV0MQ"}],
        "rotation": {"overlap_seconds": 3600},
    })  # fmt: skip

    keys = api.client().signing_keys("job-1")

    assert isinstance(keys, SigningKeys)
    assert keys.by_id() == {"k2": "c2VjcmV0Mg", "k1": "c2VjcmV0MQ"}
    assert keys.current_key_id == "k2"
    assert keys.raw["rotation"] == {"overlap_seconds": 3600}


def test_trigger_forecast_pause_resume_cancel_and_the_backfill_reads_use_their_routes(
    api: Any, job_json: JobJson
) -> None:
    api.answers.update({
        "POST /v1/jobs/job-1/trigger": (202, {"job_id": "job-1", "occurrence_key": "job-1:2026-01-06T08:00:00.123Z",
                                              "scheduled_for": "2026-01-06T08:00:00.123Z"}),
        "GET /v1/forecast": (200, {"start": "2026-01-06T08:00:00Z", "total": 3, "peak_due": 3, "timers_read": 1,
                                   "peak_minute": "2026-01-06T08:00:00Z",
                                   "minutes": [{"minute": "2026-01-06T08:00:00Z", "due": 3, "peak_second": 2}]}),
        "POST /v1/jobs/job-1/pause": (200, job_json(state="PAUSED")),
        "POST /v1/jobs/job-1/resume": (200, job_json()),
        "DELETE /v1/jobs/job-1": (200, job_json(state="CANCELLED")),
        "GET /v1/jobs/job-1/backfill": (200, {"backfills": [], "next_cursor": None}),
        "DELETE /v1/jobs/job-1/backfill/bf-1": (200, {"backfill_id": "bf-1", "state": "CANCELLED"}),
    })  # fmt: skip
    client = api.client()

    assert client.trigger("job-1").occurrence_key == "job-1:2026-01-06T08:00:00.123Z"
    forecast = client.forecast(30)
    assert forecast.total == 3 and forecast.minutes[0].peak_second == 2
    assert api.sent()[2] == {"minutes": ["30"]}
    assert client.pause("job-1").state is JobState.PAUSED
    assert client.resume("job-1").state is JobState.ACTIVE
    assert client.cancel("job-1").state is JobState.CANCELLED
    assert list(client.iter_backfills("job-1")) == []
    assert not client.cancel_backfill("job-1", "bf-1").running


def test_a_batch_answers_one_result_per_item_and_gives_each_item_a_key(
    api: Any, job_json: JobJson, problem: Problem
) -> None:
    refused = problem(422, "Unprocessable Content", "schedule.type: unknown")[1]
    api.answers["POST /v1/jobs/batch"] = (200, {"results": [
        {"index": 0, "status": 201, "job": job_json("a")},
        {"index": 1, "status": 422, "problem": refused},
    ]})  # fmt: skip

    results = api.client().create_batch([(DEFINITION, "mine"), DEFINITION])

    assert isinstance(results[0], Job) and results[0].job_id == "a"
    assert isinstance(results[1], errors.Unprocessable) and results[1].detail == "schedule.type: unknown"
    items = api.sent()[3]["items"]
    assert items[0]["idempotency_key"] == "mine"
    assert items[1]["idempotency_key"]  # made here, so a retry of the batch replays instead of creating twins


def test_a_batch_over_the_limit_is_refused_before_sending(api: Any) -> None:
    with pytest.raises(errors.InvalidArgument, match="1-25 definitions; this one has 26"):
        api.client().create_batch([DEFINITION] * 26)
    assert api.requests == []


# -- retries --------------------------------------------------------------------------------------------------


def test_a_create_retried_after_5xx_and_a_lost_connection_keeps_one_idempotency_key(
    api: Any, job_json: JobJson, problem: Problem
) -> None:
    # Given an API that fails twice (a gateway error, then the connection drops) before creating the job
    answers = iter([problem(503, "Service Unavailable", "busy"), None, (201, job_json())])

    def flaky(request: HttpRequest) -> Any:
        answer = next(answers)
        if answer is None:
            raise errors.TransportError("connection reset")
        return answer

    api.answers["POST /v1/jobs"] = flaky

    # When a definition is created without a key of the caller's
    job = api.client().create(DEFINITION)

    # Then every attempt carried the same Idempotency-Key, made once
    assert job.job_id == "job-1"
    keys = [r.headers["Idempotency-Key"] for r in api.requests]
    assert len(keys) == 3 and len(set(keys)) == 1 and keys[0]


def test_two_creates_get_two_keys(api: Any, job_json: JobJson) -> None:
    api.answers["POST /v1/jobs"] = (201, job_json())
    client = api.client()

    client.create(DEFINITION)
    client.create(DEFINITION)

    assert api.requests[0].headers["Idempotency-Key"] != api.requests[1].headers["Idempotency-Key"]


def test_the_callers_key_is_kept_on_every_retry(api: Any, job_json: JobJson, problem: Problem) -> None:
    api.answers["POST /v1/jobs"] = [problem(502, "Bad Gateway", "x"), (200, job_json(replayed=True))]

    job = api.client().create(DEFINITION, idempotency_key="order-42")

    assert job.replayed
    assert [r.headers["Idempotency-Key"] for r in api.requests] == ["order-42", "order-42"]


def test_retries_are_bounded_and_back_off_with_jitter(api: Any, problem: Problem) -> None:
    api.answers["GET /v1/jobs/job-1"] = problem(503, "Service Unavailable", "busy")
    client = api.client(retries=3, backoff=1.0, max_backoff=3.0, jitter=lambda: 0.5)

    with pytest.raises(errors.ServerError):
        client.get("job-1")

    assert len(api.requests) == 4
    # full jitter (here half) of 1, 2, 4 seconds, capped at 3
    assert api.sleeps == [0.5, 1.0, 1.5]


def test_a_429_honours_retry_after(api: Any, job_json: JobJson, problem: Problem) -> None:
    throttled = (*problem(429, "Too Many Requests", "slow down"), {"Retry-After": "2"})
    api.answers["POST /v1/jobs/job-1/trigger"] = [throttled, (202, {"job_id": "job-1", "occurrence_key": "job-1:t"})]

    # A trigger is never repeated after a 5xx, but a 429 means nothing was done: it is sent again
    triggered = api.client(backoff=0.4, jitter=lambda: 0.5).trigger("job-1")

    assert triggered.occurrence_key == "job-1:t"
    assert api.sleeps == [2.2]  # at least what the server asked, plus jitter


def test_a_retry_after_beyond_the_bound_is_raised_at_once(api: Any, problem: Problem) -> None:
    api.answers["GET /v1/jobs"] = (*problem(429, "Too Many Requests", "slow down"), {"Retry-After": "120"})

    with pytest.raises(errors.TooManyRequests) as raised:
        api.client(max_backoff=20).list_jobs()

    assert len(api.requests) == 1
    assert raised.value.retry_after == 120


def test_the_job_quota_is_not_retried(api: Any, problem: Problem) -> None:
    api.answers["POST /v1/jobs"] = problem(429, "Too Many Jobs", "the tenant has 10000 active jobs")

    with pytest.raises(errors.TooManyRequests) as raised:
        api.client().create(DEFINITION)

    assert raised.value.is_quota
    assert len(api.requests) == 1


@pytest.mark.parametrize("call", ["trigger", "start_backfill", "resolve", "update_if_match"])
def test_a_request_whose_repeat_would_act_twice_is_not_retried_after_a_5xx(
    api: Any, problem: Problem, call: str
) -> None:
    failing = problem(502, "Bad Gateway", "lost")
    for route in ("POST /v1/jobs/job-1/trigger", "POST /v1/jobs/job-1/backfill", "PATCH /v1/jobs/job-1",
                  "POST /v1/jobs/job-1/runs/job-1%3At/resolve"):  # fmt: skip
        api.answers[route] = failing
    client = api.client()
    actions = {
        "trigger": lambda: client.trigger("job-1"),
        "start_backfill": lambda: client.start_backfill(
            "job-1", datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
        ),
        "resolve": lambda: client.resolve("job-1:t", "retry"),
        "update_if_match": lambda: client.update("job-1", {"name": "x"}, if_match=2),
    }

    with pytest.raises(errors.ServerError):
        actions[call]()
    assert len(api.requests) == 1


def test_an_unreachable_api_is_a_transport_error_after_the_retries(api: Any) -> None:
    def down(request: HttpRequest, timeout: float) -> Any:
        raise errors.TransportError(f"cannot reach {request.url}: connection refused")

    client = Client("http://api.test", transport=down, retries=2, sleep=lambda s: None)

    with pytest.raises(errors.TransportError, match="connection refused"):
        client.get("job-1")


def test_bad_arguments_say_what_to_fix() -> None:
    with pytest.raises(errors.InvalidArgument, match="base_url is the API's http"):
        Client("api.test")
    with pytest.raises(errors.AuthError, match="non-empty"):
        BearerAuth("")


# -- auth -----------------------------------------------------------------------------------------------------


class FixedSession:
    region_name = "us-east-1"

    def get_credentials(self) -> Any:
        from botocore.credentials import Credentials

        return Credentials("AKIDEXAMPLE", "secret", "session-token")


def test_sigv4_signs_every_attempt_for_execute_api_in_the_region_of_the_url(api: Any, job_json: JobJson) -> None:
    pytest.importorskip("botocore")
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod"
    api.answers["GET /prod/v1/jobs/job-1"] = [(503, {"title": "busy"}), (200, job_json())]
    client = Client.aws(url, session=FixedSession(), transport=api, sleep=lambda s: None)

    client.get("job-1")

    for request in api.requests:
        assert request.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert "/eu-west-1/execute-api/aws4_request" in request.headers["Authorization"]
        assert request.headers["X-Amz-Security-Token"] == "session-token"


def test_sigv4_without_credentials_says_how_to_get_them() -> None:
    pytest.importorskip("botocore")

    class NoCredentials(FixedSession):
        def get_credentials(self) -> Any:
            return None

    with pytest.raises(errors.AuthError, match="no AWS credentials"):
        SigV4Auth("eu-west-1", NoCredentials()).sign(HttpRequest("GET", "https://x/v1/jobs", {}, None))


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://abc123.execute-api.eu-central-1.amazonaws.com/prod/", "eu-central-1"),
        ("https://abc123.execute-api.cn-north-1.amazonaws.com.cn/prod", "cn-north-1"),
        ("http://127.0.0.1:8080", None),
        ("https://scheduler.example.com", None),
    ],
)
def test_the_region_comes_from_an_execute_api_url(url: str, region: str | None) -> None:
    assert region_of(url) == region


def bulk_report(state: str, processed: int, failed: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"operation_id": "op-1", "action": "pause", "selector": {"labels": {"customer": "42"}}, "state": state,
            "matched": 3, "processed": processed, "changed": processed, "unchanged": 0,
            "failed": failed or []}  # fmt: skip


def test_a_bulk_action_goes_on_with_one_key_through_a_5xx_until_it_is_done(api: Any, problem: Problem) -> None:
    # Given an API that answers RUNNING, then a 503 (the work may have been done), then the final report
    failed = [{"job_id": "job-3", "reason": "only an ACTIVE job can be paused; this one is CANCELLED"}]
    api.answers["POST /v1/jobs/bulk"] = [
        (202, bulk_report("RUNNING", 1)),
        problem(503, "Service Unavailable", "try again"),
        (200, bulk_report("DONE", 3, failed)),
    ]
    client = api.client()

    # When a tenant pauses every job of a label
    report = client.bulk("pause", {"customer": "42"})

    # Then one operation was driven to its end: every request carried the same key and the same selector
    assert (report.state, report.matched, report.processed) == ("DONE", 3, 3)
    assert [(f.job_id, f.reason.startswith("only an ACTIVE")) for f in report.failed] == [("job-3", True)]
    sent = [api.sent(i) for i in range(len(api.requests))]
    assert len(sent) == 3
    assert {headers["Idempotency-Key"] for *_, headers in sent} == {sent[0][4]["Idempotency-Key"]}
    assert {(method, path) for method, path, *_ in sent} == {("POST", "/v1/jobs/bulk")}
    assert all(body == {"action": "pause", "selector": {"labels": {"customer": "42"}}} for *_, body, _ in sent)


def test_a_refused_bulk_action_is_not_sent_again(api: Any, problem: Problem) -> None:
    api.answers["POST /v1/jobs/bulk"] = problem(422, "Unprocessable Content", "label 'customer': the value must be ...")
    client = api.client()

    with pytest.raises(errors.ApiError) as raised:
        client.bulk_action("cancel", {"customer": "4 2"}, "key-1")

    assert raised.value.status == 422 and "the value must be" in raised.value.detail
    assert len(api.requests) == 1


def test_an_operation_and_the_operator_status_are_typed(api: Any) -> None:
    api.answers["GET /v1/operations/op%2F1"] = (200, bulk_report("DONE", 3))
    lane = {"lane": "normal", "queue": "punctual-ready", "visible": 2, "in_flight": 1, "delayed": 6,
            "oldest_age_seconds": None}  # fmt: skip
    status = {"checked_at": "2026-12-06T15:00:00Z", "watermark": "2026-12-06T15:01:00Z", "dispatch_lag_seconds": 0,
              "largest_lag_seconds": 1.5, "lanes": [lane], "ready_queue": None, "dead_letter_queue": None,
              "recent": {"DeadLetters": 0.0}, "recent_source": "CloudWatch", "window_seconds": 3600,
              "notes": [], "problems": []}  # fmt: skip
    api.answers["GET /v1/operator/status"] = (200, status)
    client = api.client()

    assert client.operation("op/1").changed == 3
    assert api.sent()[1] == "/v1/operations/op%2F1"
    shown = client.operator_status()
    assert (shown.lanes[0].lane, shown.lanes[0].delayed, shown.largest_lag_seconds) == ("normal", 6, 1.5)
    assert shown.watermark == datetime(2026, 12, 6, 15, 1, tzinfo=UTC)
