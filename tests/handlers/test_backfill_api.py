"""Backfill through the api and sweeper handlers (API Gateway events, DynamoDB Local, moto SQS)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.codec import dispatch_from_body
from scheduler.core.timefmt import minute_of, rfc3339
from scheduler.handlers import sweeper
from scheduler_local.lambda_context import LocalContext

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
        bodies += [dispatch_from_body(m["Body"]) for m in batch]
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
    assert api_call("GET", "/v1/jobs/x/backfill", tenant=TENANT_A).status == 405
    response = api_call("PUT", "/v1/jobs/x/backfill/y", {}, tenant=TENANT_A)
    assert response.status == 405
    assert response.header("Allow") == "DELETE, GET"
