"""Backfill through the api and sweeper handlers (API Gateway events, DynamoDB Local, moto SQS)."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.dispatch_message import dispatches_from_body
from scheduler.core.model.timefmt import minute_of, rfc3339
from scheduler.handlers import sweeper
from scheduler.handlers.local_invocation import LocalContext
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT_A = "arn:aws:iam::111111111111:user/alice"
TENANT_B = "arn:aws:iam::222222222222:user/bob"


def every_minute(api_call: Any) -> str:
    body = {
        "schedule": {"type": "cron", "expression": "* * * * *"},
        "target": {"type": "http", "url": "http://127.0.0.1:9/"},
    }
    response = api_call("POST", "/v1/jobs", body, tenant=TENANT_A)
    assert response.status == 201, response.text
    return str(response.body["job_id"])


def past_hour() -> tuple[str, str]:
    end = minute_of(datetime.now(UTC)) - timedelta(minutes=2)
    return rfc3339(end - timedelta(minutes=30)), rfc3339(end)


def test_a_backfill_is_accepted_progresses_through_the_sweeper_and_can_be_read(env, api_call, sqs_client) -> None:
    job_id = every_minute(api_call)
    start, end = past_hour()

    # When a backfill of 30 past minutes is requested
    created = api_call("POST", f"/v1/jobs/{job_id}/backfill", {"from": start, "to": end}, tenant=TENANT_A)

    # Then it is accepted with its progress
    assert created.status == 202, created.text
    view = created.body
    assert created.header("Location") == f"/v1/jobs/{job_id}/backfill/{view['backfill_id']}"
    assert (view["state"], view["total"], view["dispatched"], view["remaining"]) == ("RUNNING", 30, 0, 30)
    assert (view["from"], view["to"], view["job_id"]) == (start, end, job_id)
    assert view["wave_size"] == 500 and view["waves_left"] == 1 and view["waves"] == 0

    # When the sweeper runs, it sends the wave, with the normal occurrence keys
    summary = sweeper.lambda_handler({"source": "aws.events"}, LocalContext("punctual-sweeper", 60))
    assert summary["backfill_dispatched"] == 30
    progress = api_call("GET", f"/v1/jobs/{job_id}/backfill/{view['backfill_id']}", tenant=TENANT_A).body
    assert (progress["state"], progress["dispatched"], progress["remaining"], progress["waves"]) == (
        "COMPLETED",
        30,
        0,
        1,
    )
    assert progress["last_dispatched_for"] == rfc3339(datetime.fromisoformat(end) - timedelta(minutes=1))
    bodies = []
    while batch := sqs_client.receive_message(QueueUrl=env.ready_queue_url, MaxNumberOfMessages=10).get("Messages"):
        bodies += [d for m in batch for d in dispatches_from_body(m["Body"], LOCAL_MESSAGE_KEY)]
    backfilled = sorted(d.scheduled_for for d in bodies if d.kind == "backfill")
    assert len(backfilled) == 30
    assert rfc3339(backfilled[0]) == start


def test_cancel_is_idempotent_and_another_tenant_sees_nothing(env, api_call) -> None:
    job_id = every_minute(api_call)
    start, end = past_hour()
    backfill_id = api_call("POST", f"/v1/jobs/{job_id}/backfill", {"from": start, "to": end}, tenant=TENANT_A).body[
        "backfill_id"
    ]
    path = f"/v1/jobs/{job_id}/backfill/{backfill_id}"

    assert api_call("GET", path, tenant=TENANT_B).status == 404
    assert api_call("DELETE", path, tenant=TENANT_B).status == 404
    first = api_call("DELETE", path, tenant=TENANT_A)
    again = api_call("DELETE", path, tenant=TENANT_A)

    assert (first.status, first.body["state"], first.body["remaining"]) == (200, "CANCELLED", 0)
    assert (again.status, again.body["state"]) == (200, "CANCELLED")
    missing = api_call("GET", f"/v1/jobs/{job_id}/backfill/{uuid.uuid4().hex}", tenant=TENANT_A)
    assert missing.status == 404 and "backfill" in missing.body["detail"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"to": "2026-01-05T10:00:00Z"}, "from"),
        ({"from": "2026-01-05T10:00:00Z", "to": "2026-01-05T09:00:00Z", "extra": 1}, "extra"),
        ({"from": "2026-01-05T10:00:00Z", "to": "2026-01-05T09:00:00Z"}, "body"),
        ({"from": "2026-01-05T10:00:00", "to": "2026-01-05T11:00:00Z"}, "from"),
        ({"from": "2026-01-05T10:00:00Z", "to": "2999-01-05T11:00:00Z"}, "to"),
        ({"from": "2000-01-05T10:00:00Z", "to": "2026-01-05T11:00:00Z"}, "from"),
    ],
)
def test_a_bad_range_is_422_and_stores_nothing(env, api_call, snapshot, body, field) -> None:
    job_id = every_minute(api_call)
    before = snapshot()

    response = api_call("POST", f"/v1/jobs/{job_id}/backfill", body, tenant=TENANT_A)

    assert response.status == 422, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert field in {e["field"] for e in response.body["errors"]}
    assert snapshot() == before


def test_backfill_of_an_unknown_job_is_404_and_of_a_one_shot_job_is_422(env, api_call) -> None:
    start, end = past_hour()
    assert api_call("POST", "/v1/jobs/nope/backfill", {"from": start, "to": end}, tenant=TENANT_A).status == 404
    once = {"schedule": {"type": "once", "delay_seconds": 60}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}}
    job_id = api_call("POST", "/v1/jobs", once, tenant=TENANT_A).body["job_id"]
    response = api_call("POST", f"/v1/jobs/{job_id}/backfill", {"from": start, "to": end}, tenant=TENANT_A)
    assert response.status == 422 and response.body["errors"][0]["field"] == "schedule"


def test_wrong_methods_on_backfill_paths_are_405(env, api_call) -> None:
    for method in ("PUT", "DELETE", "PATCH"):
        listing = api_call(method, "/v1/jobs/x/backfill", {}, tenant=TENANT_A)
        assert listing.status == 405, (method, listing.text)
        assert listing.header("Allow") == "GET, POST"
        assert listing.header("Content-Type") == "application/problem+json"
        assert "use GET, POST" in listing.body["detail"]
    response = api_call("PUT", "/v1/jobs/x/backfill/y", {}, tenant=TENANT_A)
    assert response.status == 405
    assert response.header("Allow") == "DELETE, GET"


# -- listing ------------------------------------------------------------------------------------------------


def start_backfills(api_call: Any, job_id: str, count: int) -> list[str]:
    """`count` backfills of the job, of successive 10-minute ranges in the past; their ids, oldest first."""
    end = minute_of(datetime.now(UTC)) - timedelta(minutes=2)
    ids = []
    for n in range(count):
        upto = end - timedelta(minutes=10 * n)
        body = {"from": rfc3339(upto - timedelta(minutes=10)), "to": rfc3339(upto)}
        response = api_call("POST", f"/v1/jobs/{job_id}/backfill", body, tenant=TENANT_A)
        assert response.status == 202, response.text
        ids.append(str(response.body["backfill_id"]))
    return ids


def test_a_jobs_backfills_are_listed_newest_first_a_page_at_a_time(env, api_call) -> None:
    job_id, other = every_minute(api_call), every_minute(api_call)
    ids = start_backfills(api_call, job_id, 3)
    start_backfills(api_call, other, 1)
    newest_first = ids[::-1]

    # When the job's backfills are listed in one page
    whole = api_call("GET", f"/v1/jobs/{job_id}/backfill", tenant=TENANT_A)

    # Then it is the jobs list's envelope, each backfill as GET .../backfill/{id} shows it, newest first
    assert whole.status == 200, whole.text
    assert whole.header("Content-Type") == "application/json"
    assert set(whole.body) == {"backfills", "next_cursor"} and whole.body["next_cursor"] is None
    assert [b["backfill_id"] for b in whole.body["backfills"]] == newest_first
    for view in whole.body["backfills"]:
        assert view == api_call("GET", f"/v1/jobs/{job_id}/backfill/{view['backfill_id']}", tenant=TENANT_A).body

    # And with a limit, page by page through next_cursor
    seen: list[list[str]] = []
    cursor = None
    for _ in range(10):
        path = f"/v1/jobs/{job_id}/backfill?limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = api_call("GET", path, tenant=TENANT_A)
        assert page.status == 200, page.text
        seen.append([b["backfill_id"] for b in page.body["backfills"]])
        cursor = page.body["next_cursor"]
        if cursor is None:
            break
    assert seen == [newest_first[0:2], newest_first[2:3]]

    # And a job without backfills has an empty list
    empty = every_minute(api_call)
    assert api_call("GET", f"/v1/jobs/{empty}/backfill", tenant=TENANT_A).body == {"backfills": [], "next_cursor": None}


def test_listing_the_backfills_of_another_tenants_or_an_unknown_job_is_404(env, api_call) -> None:
    job_id = every_minute(api_call)
    start_backfills(api_call, job_id, 1)

    for path in (f"/v1/jobs/{job_id}/backfill", "/v1/jobs/no-such-job/backfill"):
        response = api_call("GET", path, tenant=TENANT_B)
        assert response.status == 404, response.text
        assert response.header("Content-Type") == "application/problem+json"
        assert "exists for this caller" in response.body["detail"]
        assert TENANT_A not in response.text  # nothing about the owner leaks


@pytest.mark.parametrize("limit", ["0", "101", "ten", "-1", "1.5"])
def test_a_bad_limit_is_422_and_says_what_is_allowed(env, api_call, limit) -> None:
    job_id = every_minute(api_call)

    response = api_call("GET", f"/v1/jobs/{job_id}/backfill?limit={limit}", tenant=TENANT_A)

    assert response.status == 422, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert response.body["detail"] == "query parameter 'limit' must be a whole number 1-100"
    assert response.body["errors"] == [{"field": "limit", "message": "must be 1-100"}]


def test_a_garbage_forged_or_other_jobs_cursor_is_422_and_says_so(env, api_call) -> None:
    job_id, other = every_minute(api_call), every_minute(api_call)
    start_backfills(api_call, job_id, 2)
    start_backfills(api_call, other, 2)
    theirs = api_call("GET", f"/v1/jobs/{other}/backfill?limit=1", tenant=TENANT_A).body["next_cursor"]
    assert theirs
    forged = base64.urlsafe_b64encode(json.dumps({"PK": {"S": f"JOB#{job_id}"}, "SK": {"S": "DEF"}}).encode())

    for cursor in (base64.urlsafe_b64encode(b"not a cursor").decode(), forged.decode(), theirs):
        response = api_call("GET", f"/v1/jobs/{job_id}/backfill?cursor={cursor}", tenant=TENANT_A)
        assert response.status == 422, response.text
        assert response.header("Content-Type") == "application/problem+json"
        assert response.body["detail"].startswith("cursor is not one this API returned")
        assert response.body["errors"][0]["field"] == "cursor"
