"""The api Lambda with API Gateway REST proxy events (the shape the local server and API Gateway send)."""

from __future__ import annotations

import base64
import itertools
import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from scheduler.core.model.job import MAX_PAYLOAD_BYTES
from scheduler.core.model.timefmt import parse_rfc3339

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT_A = "arn:aws:iam::111111111111:user/alice"
TENANT_B = "arn:aws:iam::222222222222:user/bob"
TARGET = {"type": "http", "url": "http://127.0.0.1:9/hook"}  # a literal address: no DNS in these tests


def job_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "nightly-report",
        "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
        "target": TARGET,
        "payload": {"report": "daily", "ratio": 0.25},
    }
    body.update(changes)
    return body


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, response.text
    assert response.header("Content-Type") == "application/problem+json"
    problem = response.body
    assert {"type", "title", "status", "detail"} <= set(problem)
    assert problem["status"] == status
    assert isinstance(problem["detail"], str) and problem["detail"]
    return problem


def create(api_call: Any, body: dict[str, Any] | None = None, tenant: str = TENANT_A, **kw: Any) -> Any:
    response = api_call("POST", "/v1/jobs", body or job_body(), tenant=tenant, **kw)
    assert response.status in (200, 201), response.text
    return response.body


# -- create -------------------------------------------------------------------------------------------------


def test_create_returns_201_with_the_job_location_and_etag(api_call) -> None:
    response = api_call("POST", "/v1/jobs", job_body())

    assert response.status == 201
    assert response.header("Content-Type") == "application/json"
    job = response.body
    assert response.header("Location") == f"/v1/jobs/{job['job_id']}"
    assert response.header("ETag") == '"1"'
    assert (job["version"], job["state"], job["replayed"]) == (1, "ACTIVE", False)
    assert job["name"] == "nightly-report"
    assert job["schedule"] == {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"}
    assert job["target"]["url"] == TARGET["url"]
    assert job["payload"] == {"report": "daily", "ratio": 0.25}
    next_run = parse_rfc3339(job["next_run_at"])
    assert next_run > datetime.now(next_run.tzinfo)
    assert next_run.astimezone().minute == 0  # 09:00 Berlin is a whole hour in every zone we run in
    # and it reads back the same
    again = api_call("GET", f"/v1/jobs/{job['job_id']}")
    assert again.status == 200
    assert {k: v for k, v in again.body.items()} == {k: v for k, v in job.items() if k != "replayed"}


def test_health_needs_no_identity(api_call) -> None:
    response = api_call("GET", "/v1/health", tenant=None)
    assert (response.status, response.body) == (200, {"status": "ok"})


def test_no_identity_is_401(api_call, snapshot) -> None:
    before = snapshot()
    for method, path in [("POST", "/v1/jobs"), ("GET", "/v1/jobs"), ("GET", "/v1/jobs/x")]:
        assert_problem(api_call(method, path, job_body(), tenant=None), 401)
    assert snapshot() == before


# -- bad input: a clear 4xx, and nothing changed ------------------------------------------------------------


def _bad_requests() -> list[tuple[str, dict[str, Any], int, str | None]]:
    too_big = {"blob": "x" * (MAX_PAYLOAD_BYTES + 10)}
    return [
        ("malformed JSON", {"raw": b'{"name": "x",'}, 400, None),
        ("not an object", {"body": [1, 2]}, 400, None),
        ("empty body", {"raw": b""}, 400, None),
        ("unknown field", {"body": job_body(colour="blue")}, 422, "colour"),
        ("unknown nested field", {"body": job_body(target={**TARGET, "verb": "GET"})}, 422, "target.verb"),
        ("missing field", {"body": {"schedule": {"type": "rate", "every_seconds": 60}}}, 422, "target"),
        (
            "invalid cron",
            {"body": job_body(schedule={"type": "cron", "expression": "61 * * * *"})},
            422,
            "schedule.expression",
        ),
        (
            "invalid zone",
            {"body": job_body(schedule={"type": "cron", "expression": "0 9 * * *", "timezone": "Mars/Olympus"})},
            422,
            "schedule.timezone",
        ),
        (
            "rate of zero",
            {"body": job_body(schedule={"type": "rate", "every_seconds": 0})},
            422,
            "schedule.every_seconds",
        ),
        # JSON types are the schema's: a boolean or a string is not a number of seconds, nor a string a boolean
        ("boolean jitter", {"body": job_body(jitter_seconds=False)}, 422, "jitter_seconds"),
        (
            "string delay",
            {"body": job_body(schedule={"type": "once", "delay_seconds": "5"})},
            422,
            "schedule.delay_seconds",
        ),
        (
            "boolean rate",
            {"body": job_body(schedule={"type": "rate", "every_seconds": True})},
            422,
            "schedule.every_seconds",
        ),
        ("string attempts", {"body": job_body(retry={"max_attempts": "3"})}, 422, "retry.max_attempts"),
        ("string events flag", {"body": job_body(events="yes")}, 422, "events"),
        ("payload too large", {"body": job_body(payload=too_big)}, 413, None),
        ("body far too large", {"raw": json.dumps(job_body(payload="y" * 100_000)).encode()}, 413, None),
        ("not JSON media", {"body": job_body(), "headers": {"Content-Type": "text/plain"}}, 415, None),
        ("bad idempotency key", {"body": job_body(), "headers": {"Idempotency-Key": "k" * 300}}, 422, None),
        ("not UTF-8", {"raw": b'\xff\xfe{"name": "x"}'}, 400, None),
    ]


@pytest.mark.parametrize(
    ("case", "request_kw", "status", "field"), _bad_requests(), ids=[c[0] for c in _bad_requests()]
)
def test_bad_create_is_a_clear_4xx_and_changes_nothing(api_call, snapshot, case, request_kw, status, field) -> None:
    existing = create(api_call)
    before = snapshot()
    listed = api_call("GET", "/v1/jobs").body

    response = api_call(
        "POST", "/v1/jobs", request_kw.get("body"), raw=request_kw.get("raw"), headers=request_kw.get("headers")
    )

    problem = assert_problem(response, status)
    if field is not None:
        assert field in [e["field"] for e in problem["errors"]]
        assert field in problem["detail"]
    assert snapshot() == before
    assert api_call("GET", "/v1/jobs").body == listed
    assert [j["job_id"] for j in listed["jobs"]] == [existing["job_id"]]


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_constants_are_malformed_json(api_call, snapshot, constant) -> None:
    before = snapshot()
    raw = json.dumps(job_body(payload={"amount": "PLACEHOLDER"})).replace('"PLACEHOLDER"', constant).encode()

    response = api_call("POST", "/v1/jobs", raw=raw)

    assert_problem(response, 400)
    assert snapshot() == before


def test_unicode_digits_in_numeric_parameters_are_a_4xx(api_call, snapshot) -> None:
    job_id = create(api_call)["job_id"]
    before = snapshot()
    responses = [
        api_call("GET", "/v1/jobs?limit=²"),
        api_call("GET", f"/v1/jobs/{job_id}?preview=³"),
        api_call("GET", f"/v1/jobs/{job_id}/runs?limit=¹"),
        api_call("PATCH", f"/v1/jobs/{job_id}", {"name": "x"}, headers={"If-Match": '"²"'}),
    ]
    assert [r.status for r in responses] == [422, 422, 422, 400], [r.text for r in responses]
    assert snapshot() == before


def test_resolve_refuses_bad_outcomes_and_unknown_runs(api_call, snapshot) -> None:
    job_id = create(api_call)["job_id"]
    before = snapshot()
    key = f"{job_id}:2026-01-05T09:00:00Z"
    bad = api_call("POST", f"/v1/jobs/{job_id}/runs/{key}/resolve", {"outcome": "maybe"})
    assert assert_problem(bad, 422)["errors"][0]["field"] == "outcome"
    extra = api_call("POST", f"/v1/jobs/{job_id}/runs/{key}/resolve", {"outcome": "retry", "force": True})
    assert_problem(extra, 422)
    for note in ({"why": "typed an object"}, None, "", "x" * 501, 7):
        refused = api_call("POST", f"/v1/jobs/{job_id}/runs/{key}/resolve", {"outcome": "retry", "note": note})
        assert assert_problem(refused, 422)["errors"][0]["field"] == "note"
    assert_problem(api_call("POST", f"/v1/jobs/{job_id}/runs/{key}/resolve", {"outcome": "retry"}), 404)
    assert snapshot() == before


def test_invalid_cron_detail_says_what_is_wrong(api_call) -> None:
    response = api_call("POST", "/v1/jobs", job_body(schedule={"type": "cron", "expression": "61 * * * *"}))
    problem = assert_problem(response, 422)
    assert "minute must be 0-59, not 61" in problem["detail"]
    assert problem["detail"].startswith("schedule.expression")


def test_a_question_mark_outside_the_day_fields_is_a_422_naming_the_field(api_call, snapshot) -> None:
    job_id = api_call("POST", "/v1/jobs", job_body()).body["job_id"]
    before = snapshot()
    every_minute = {"type": "cron", "expression": "? * * * *"}
    for method, path, body in (
        ("POST", "/v1/jobs", job_body(schedule=every_minute)),
        ("PATCH", f"/v1/jobs/{job_id}", {"schedule": {"expression": "0 ? * * *"}}),
    ):
        problem = assert_problem(api_call(method, path, body), 422)
        assert "field '?': '?' (no specific value) is allowed only in the day-of-month" in problem["detail"]
        assert problem["detail"].startswith("minute" if method == "POST" else "hour")
        assert problem["errors"][0]["field"] == "schedule.expression"
    assert snapshot() == before
    accepted = api_call("POST", "/v1/jobs", job_body(schedule={"type": "cron", "expression": "0 9 ? * MON"}))
    assert accepted.status == 201, accepted.text


def test_private_targets_are_refused_unless_allowed(api_call, snapshot, monkeypatch) -> None:
    from scheduler.handlers import wiring

    monkeypatch.setenv("SCHEDULER_ALLOW_PRIVATE_TARGETS", "false")
    wiring.container.cache_clear()
    before = snapshot()
    for url in (
        "http://127.0.0.1/x",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.8/",
        "http://localhost/",
    ):
        response = api_call("POST", "/v1/jobs", job_body(target={"type": "http", "url": url}))
        problem = assert_problem(response, 422)
        assert problem["errors"][0]["field"] == "target.url"
    assert snapshot() == before


def test_wrong_method_is_405_with_allow(api_call, snapshot) -> None:
    job = create(api_call)
    before = snapshot()
    cases = [
        ("PUT", "/v1/jobs", "GET, POST"),
        ("DELETE", "/v1/jobs", "GET, POST"),
        ("POST", f"/v1/jobs/{job['job_id']}", "DELETE, GET, PATCH"),
        ("GET", f"/v1/jobs/{job['job_id']}/pause", "POST"),
        ("DELETE", f"/v1/jobs/{job['job_id']}/runs", "GET"),
    ]
    for method, path, allow in cases:
        response = api_call(method, path, job_body())
        assert_problem(response, 405)
        assert response.header("Allow") == allow
    assert_problem(api_call("GET", "/v1/nothing-here"), 404)
    assert snapshot() == before


# -- reads, tenants -----------------------------------------------------------------------------------------


def test_unknown_job_and_another_tenants_job_are_404(api_call, snapshot) -> None:
    job = create(api_call)
    job_id = job["job_id"]
    before = snapshot()

    assert_problem(api_call("GET", "/v1/jobs/no-such-job"), 404)
    for method, path, body in [
        ("GET", f"/v1/jobs/{job_id}", None),
        ("PATCH", f"/v1/jobs/{job_id}", {"name": "stolen"}),
        ("DELETE", f"/v1/jobs/{job_id}", None),
        ("POST", f"/v1/jobs/{job_id}/pause", None),
        ("POST", f"/v1/jobs/{job_id}/resume", None),
        ("POST", f"/v1/jobs/{job_id}/trigger", None),
        ("GET", f"/v1/jobs/{job_id}/runs", None),
        ("POST", f"/v1/jobs/{job_id}/runs/{job_id}:2026-01-05T09:00:00Z/resolve", {"outcome": "retry"}),
    ]:
        problem = assert_problem(api_call(method, path, body, tenant=TENANT_B), 404)
        assert TENANT_A not in problem["detail"]  # nothing about the owner leaks

    assert snapshot() == before
    assert api_call("GET", "/v1/jobs", tenant=TENANT_B).body == {"jobs": [], "next_cursor": None}
    assert api_call("GET", f"/v1/jobs/{job_id}").body["name"] == "nightly-report"


def test_sessions_of_one_role_are_one_tenant(api_call) -> None:
    session = "arn:aws:sts::333333333333:assumed-role/deployer/session-1"
    other_session = "arn:aws:sts::333333333333:assumed-role/deployer/session-2"
    job = create(api_call, tenant=session)
    assert api_call("GET", f"/v1/jobs/{job['job_id']}", tenant=other_session).status == 200
    assert api_call("GET", f"/v1/jobs/{job['job_id']}", tenant=TENANT_A).status == 404


def test_list_paginates_oldest_first_within_the_tenant(api_call) -> None:
    mine = [create(api_call, job_body(name=f"job-{i}"))["job_id"] for i in range(5)]
    create(api_call, tenant=TENANT_B)

    seen: list[str] = []
    cursor = None
    for _ in range(10):
        path = "/v1/jobs?limit=2" + (f"&cursor={cursor}" if cursor else "")
        response = api_call("GET", path)
        assert response.status == 200
        assert len(response.body["jobs"]) <= 2
        seen += [j["job_id"] for j in response.body["jobs"]]
        cursor = response.body["next_cursor"]
        if cursor is None:
            break

    assert seen == mine


def test_list_state_filter_and_query_validation(api_call) -> None:
    a = create(api_call)["job_id"]
    b = create(api_call)["job_id"]
    assert api_call("POST", f"/v1/jobs/{b}/pause").status == 200

    paused = api_call("GET", "/v1/jobs?state=paused").body["jobs"]
    active = api_call("GET", "/v1/jobs?state=ACTIVE").body["jobs"]

    assert [j["job_id"] for j in paused] == [b]
    assert [j["job_id"] for j in active] == [a]
    assert assert_problem(api_call("GET", "/v1/jobs?state=sleeping"), 422)["errors"][0]["field"] == "state"
    for bad in ("0", "101", "ten", "-1"):
        assert assert_problem(api_call("GET", f"/v1/jobs?limit={bad}"), 422)["errors"][0]["field"] == "limit"
    garbage = base64.urlsafe_b64encode(b"not a cursor").decode()
    assert assert_problem(api_call("GET", f"/v1/jobs?cursor={garbage}"), 422)["errors"][0]["field"] == "cursor"


def test_a_foreign_or_forged_cursor_is_a_4xx(api_call, snapshot) -> None:
    for _ in range(3):
        create(api_call)
    cursor = api_call("GET", "/v1/jobs?limit=1").body["next_cursor"]
    assert cursor
    forged = base64.urlsafe_b64encode(json.dumps({"PK": {"S": "JOB#x"}}).encode()).decode()
    before = snapshot()

    # a key of the wrong shape (boto3 refuses it before sending), on each paged endpoint
    job_id = api_call("GET", "/v1/jobs?limit=1").body["jobs"][0]["job_id"]
    misshapen = {
        "/v1/jobs": {"tenant_pk": {"S": f"TENANT#{TENANT_A}"}, "PK": 5},
        f"/v1/jobs/{job_id}/runs": {"job_id": {"S": job_id}, "PK": [1]},
    }

    foreign = api_call("GET", f"/v1/jobs?limit=5&cursor={cursor}", tenant=TENANT_B)
    made_up = api_call("GET", f"/v1/jobs?limit=5&cursor={forged}")
    for path, key in misshapen.items():
        token = base64.urlsafe_b64encode(json.dumps(key).encode()).decode()
        assert assert_problem(api_call("GET", f"{path}?cursor={token}"), 422)["errors"][0]["field"] == "cursor"

    assert foreign.status < 500 and made_up.status < 500, (foreign.text, made_up.text)
    assert TENANT_A not in foreign.text
    assert snapshot() == before


def test_get_preview_lists_the_next_runs(api_call) -> None:
    job = create(api_call, job_body(schedule={"type": "rate", "every_seconds": 3600}))

    response = api_call("GET", f"/v1/jobs/{job['job_id']}?preview=3")

    assert response.status == 200
    assert response.header("ETag") == '"1"'
    runs = [parse_rfc3339(t) for t in response.body["next_runs"]]
    assert len(runs) == 3
    assert [b - a for a, b in itertools.pairwise(runs)] == [timedelta(hours=1)] * 2
    assert response.body["next_run_at"] == response.body["next_runs"][0]
    assert "next_runs" not in api_call("GET", f"/v1/jobs/{job['job_id']}").body
    assert_problem(api_call("GET", f"/v1/jobs/{job['job_id']}?preview=51"), 422)


# -- changes ------------------------------------------------------------------------------------------------


def test_patch_with_if_match(api_call, snapshot) -> None:
    job_id = create(api_call)["job_id"]
    before = snapshot()

    stale = api_call("PATCH", f"/v1/jobs/{job_id}", {"name": "renamed"}, headers={"If-Match": '"5"'})
    problem = assert_problem(stale, 412)
    assert problem["current_version"] == 1
    assert_problem(api_call("PATCH", f"/v1/jobs/{job_id}", {"name": "x"}, headers={"If-Match": "soon"}), 400)
    assert_problem(api_call("PATCH", f"/v1/jobs/{job_id}", {"schedule": {"type": "cron", "expression": "* *"}}), 422)
    assert_problem(api_call("PATCH", f"/v1/jobs/{job_id}", {"target": {"bogus": 1}}), 422)
    assert snapshot() == before

    ok = api_call("PATCH", f"/v1/jobs/{job_id}", {"name": "renamed"}, headers={"If-Match": '"1"'})
    assert ok.status == 200
    assert (ok.body["name"], ok.body["version"]) == ("renamed", 2)
    assert ok.header("ETag") == '"2"'
    assert ok.body["payload"] == {"report": "daily", "ratio": 0.25}  # a merge patch keeps the rest


def test_idempotent_replay_and_conflict(api_call, snapshot) -> None:
    body = job_body()
    first = api_call("POST", "/v1/jobs", body, headers={"Idempotency-Key": "order-42"})
    assert first.status == 201
    before = snapshot()

    # the same body, even with its keys in another order
    reordered = dict(reversed(list(body.items())))
    replay = api_call("POST", "/v1/jobs", reordered, headers={"Idempotency-Key": "order-42"})
    assert replay.status == 200
    assert replay.body["replayed"] is True
    assert replay.body["job_id"] == first.body["job_id"]
    assert replay.header("Idempotent-Replayed") == "true"
    assert replay.header("Location") == first.header("Location")

    conflict = api_call("POST", "/v1/jobs", job_body(name="other"), headers={"Idempotency-Key": "order-42"})
    assert_problem(conflict, 409)
    assert snapshot() == before

    # keys are per tenant
    theirs = api_call(
        "POST", "/v1/jobs", job_body(name="other"), headers={"Idempotency-Key": "order-42"}, tenant=TENANT_B
    )
    assert theirs.status == 201 and theirs.body["job_id"] != first.body["job_id"]


def test_pause_resume_trigger_cancel_and_runs(api_call, snapshot) -> None:
    job_id = create(api_call, job_body(schedule={"type": "rate", "every_seconds": 3600}))["job_id"]

    paused = api_call("POST", f"/v1/jobs/{job_id}/pause")
    assert (paused.status, paused.body["state"], paused.body["version"]) == (200, "PAUSED", 2)
    assert paused.body["next_run_at"] is None
    assert api_call("POST", f"/v1/jobs/{job_id}/pause").body["version"] == 2  # idempotent
    before = snapshot()
    assert_problem(api_call("POST", f"/v1/jobs/{job_id}/trigger"), 409)
    assert snapshot() == before

    resumed = api_call("POST", f"/v1/jobs/{job_id}/resume")
    assert (resumed.status, resumed.body["state"], resumed.body["version"]) == (200, "ACTIVE", 3)
    assert resumed.body["next_run_at"] is not None

    triggered = api_call("POST", f"/v1/jobs/{job_id}/trigger")
    assert triggered.status == 202
    assert triggered.body["job_id"] == job_id
    assert triggered.body["occurrence_key"] == f"{job_id}:{triggered.body['scheduled_for']}"
    assert api_call("GET", f"/v1/jobs/{job_id}").body["version"] == 3  # a trigger does not change the job

    runs = api_call("GET", f"/v1/jobs/{job_id}/runs?limit=10")
    assert (runs.status, runs.body) == (200, {"runs": [], "next_cursor": None})

    cancelled = api_call("DELETE", f"/v1/jobs/{job_id}")
    assert (cancelled.status, cancelled.body["state"], cancelled.body["version"]) == (200, "CANCELLED", 4)
    again = api_call("DELETE", f"/v1/jobs/{job_id}")
    assert (again.status, again.body["version"]) == (200, 4)  # idempotent
    before = snapshot()
    assert_problem(api_call("POST", f"/v1/jobs/{job_id}/resume"), 409)
    assert_problem(api_call("POST", f"/v1/jobs/{job_id}/trigger"), 409)
    assert_problem(api_call("PATCH", f"/v1/jobs/{job_id}", {"name": "zombie"}), 409)
    assert snapshot() == before
    assert api_call("GET", "/v1/jobs?state=CANCELLED").body["jobs"][0]["job_id"] == job_id


def test_cancelling_frees_the_quota(api_call, monkeypatch) -> None:
    from scheduler.handlers import wiring

    monkeypatch.setenv("SCHEDULER_MAX_ACTIVE_JOBS_PER_TENANT", "1")
    wiring.container.cache_clear()
    job_id = create(api_call)["job_id"]
    problem = assert_problem(api_call("POST", "/v1/jobs", job_body()), 429)
    assert "1" in problem["detail"]
    assert api_call("DELETE", f"/v1/jobs/{job_id}").status == 200
    assert api_call("POST", "/v1/jobs", job_body()).status == 201
