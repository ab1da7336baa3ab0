"""`/v1/flow-controls`: a tenant's flow-control keys through the api Lambda on DynamoDB Local - set by a job or a PUT
(last write wins), read with their live view, listed; bad limits are a 422 that says what to fix and change
nothing; a create beyond a key's max_backlog is a 429 naming the key; and a run its key held shows why."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.dispatch_message import dispatch_to_body
from scheduler.adapters.dynamodb import DynamoTenantSlots
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch
from scheduler.core.tenancy.flow_control import flow_owner
from scheduler.handlers import sweeper, worker
from scheduler.handlers.local_invocation import LocalContext
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from tests.handlers.test_concurrency_handlers import records

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT_A = "arn:aws:iam::111111111111:user/alice"
TENANT_B = "arn:aws:iam::222222222222:user/bob"


def keyed_job(flow: dict[str, Any], when: datetime | None = None) -> dict[str, Any]:
    at = when or datetime.now(UTC) + timedelta(minutes=30)
    return {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "http", "url": "http://127.0.0.1:9/hook"},
        "flow_control": flow,
    }


def test_a_job_names_a_key_a_put_changes_its_limits_and_each_tenant_has_its_own(api_call) -> None:
    created = api_call("POST", "/v1/jobs", keyed_job({"key": "payments-api", "rate": 50}), tenant=TENANT_A)
    assert created.status == 201, created.text
    assert created.body["flow_control"] == {"key": "payments-api", "rate": 50, "period_seconds": 1}

    key = api_call("GET", "/v1/flow-controls/payments-api", tenant=TENANT_A)
    assert key.status == 200, key.text
    assert key.body["rate"] == 50 and key.body["parallelism"] is None
    assert key.body["backlog"] == 0 and key.body["in_flight"] == 0 and key.body["rate_factor"] == 1.0

    put = api_call("PUT", "/v1/flow-controls/payments-api", {"parallelism": 4, "rate": 10, "period_seconds": 2},
                   tenant=TENANT_A)  # fmt: skip
    assert put.status == 200, put.text
    assert (put.body["rate"], put.body["period_seconds"], put.body["parallelism"]) == (10, 2, 4)
    assert api_call("GET", "/v1/flow-controls", tenant=TENANT_A).body["keys"][0]["parallelism"] == 4
    assert api_call("GET", "/v1/flow-controls/payments-api", tenant=TENANT_B).status == 404
    assert api_call("GET", "/v1/flow-controls", tenant=TENANT_B).body == {"keys": []}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),
        ({"rate": 0}, "rate"),
        ({"rate": 5, "period_seconds": 7200}, "period_seconds"),
        ({"rate": 100_000}, "body"),
        ({"rate": 5, "key": "other"}, "key"),
        ({"rate": 5, "burst": 9}, "burst"),
    ],
)
def test_bad_limits_are_a_422_that_names_the_field_and_change_nothing(api_call, snapshot, body, field) -> None:
    before = snapshot()
    response = api_call("PUT", "/v1/flow-controls/payments-api", body, tenant=TENANT_A)

    assert response.status == 422, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert field in response.text and response.body["detail"]
    assert snapshot() == before


def test_a_bad_key_in_the_path_or_a_job_is_a_422(api_call) -> None:
    assert api_call("PUT", "/v1/flow-controls/pay%20ments", {"rate": 1}, tenant=TENANT_A).status == 422
    refused = api_call("POST", "/v1/jobs", keyed_job({"key": "payments-api"}), tenant=TENANT_A)
    assert refused.status == 422 and "at least one of 'rate'" in refused.body["detail"]


def test_a_create_beyond_the_keys_max_backlog_is_a_429_naming_the_key(api_call) -> None:
    soon = datetime.now(UTC) + timedelta(seconds=40)
    flow = {"key": "slow-api", "rate": 1, "period_seconds": 60, "max_backlog": 2}
    for _ in range(3):
        assert api_call("POST", "/v1/jobs", keyed_job(flow, soon), tenant=TENANT_A).status == 201
    sweeper.lambda_handler({"source": "aws.events"}, LocalContext("punctual-sweeper", 60))  # the second and third held

    refused = api_call("POST", "/v1/jobs", keyed_job(flow, soon), tenant=TENANT_A)

    assert refused.status == 429, refused.text
    assert "slow-api" in refused.body["detail"] and int(refused.header("Retry-After") or 0) >= 1
    assert api_call("GET", "/v1/flow-controls/slow-api", tenant=TENANT_A).body["backlog"] == 2


def test_a_run_its_key_held_shows_the_key_and_why_in_its_history(
    env, api_call, hook, sqs_client, dynamodb_client
) -> None:
    # Given a keyed job (one call at a time) whose one slot another worker holds, and a trigger of it due now
    url, calls = hook
    later = rfc3339(datetime.now(UTC) + timedelta(hours=1))
    flow = {"key": "slow-api", "parallelism": 1}
    body = {"schedule": {"type": "once", "at": later}, "target": {"type": "http", "url": url}, "flow_control": flow}
    created = api_call("POST", "/v1/jobs", body, tenant=TENANT_A)
    assert created.status == 201, created.text
    job_id = str(created.body["job_id"])
    slots = DynamoTenantSlots(env.jobs_table, dynamodb_client, kind="FLOWSLOT")
    now = datetime.now(UTC)
    assert slots.acquire(flow_owner(TENANT_A, "slow-api"), 1, "another-worker", now, now + timedelta(minutes=5)) == 0
    due = now.replace(microsecond=0) - timedelta(seconds=1)
    dispatch = Dispatch(job_id, TENANT_A, due, due, 1, "manual", flow_key="slow-api")
    sqs_client.send_message(QueueUrl=env.ready_queue_url, MessageBody=dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY))

    # When the worker gets it, it waits for the slot (nothing claimed, nothing called)
    [record] = records(sqs_client, env.ready_queue_url)
    result = worker.lambda_handler({"Records": [record]}, LocalContext("punctual-worker", 120))
    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == [record["messageId"]]
    assert calls == []
    assert api_call("GET", f"/v1/jobs/{job_id}/runs", tenant=TENANT_A).body["runs"] == []

    # Then once the slot is free it runs, and its run tells which key held it, why, and how long
    slots.release(flow_owner(TENANT_A, "slow-api"), 0, "another-worker")
    deadline = time.monotonic() + 30
    while not calls and time.monotonic() < deadline:
        batch = records(sqs_client, env.ready_queue_url)
        if batch:
            worker.lambda_handler({"Records": batch}, LocalContext("punctual-worker", 120))
    [run] = api_call("GET", f"/v1/jobs/{job_id}/runs", tenant=TENANT_A).body["runs"]
    assert run["state"] == "SUCCEEDED"
    held = run["held"]
    assert (held["key"], held["reasons"], held["since"]) == ("slow-api", ["parallelism"], rfc3339(due))
    assert held["seconds"] >= 1
    assert held["detail"].startswith("held by flow-control key slow-api for ")
    assert held["detail"].endswith(": a slot of its parallelism")
