"""Per-tenant execution budgets through the worker handler (DynamoDB Local, moto SQS): a tenant at its limit has
its message kept (not claimed, not dropped) and run once a slot frees; the slots are items next to the tenant's
quota counter, gone when the attempts are over."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.dispatch_message import dispatch_to_body
from scheduler.adapters.dynamodb import DynamoTenantSlots
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch
from scheduler.handlers import wiring, worker
from scheduler.handlers.local_invocation import LocalContext
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from scheduler_local.worker_poller import to_event

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT = "arn:aws:iam::333333333333:user/slow"


def records(sqs_client: Any, queue_url: str) -> list[dict[str, Any]]:
    """The visible messages as SQS event records (waiting up to 10 s for one)."""
    arn = sqs_client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    got = sqs_client.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=10, AttributeNames=["All"]
    ).get("Messages", [])
    return to_event(got, arn)["Records"]


def slot_items(dynamodb_client: Any, table: str) -> list[dict[str, Any]]:
    return dynamodb_client.query(
        TableName=table,
        KeyConditionExpression="PK = :pk AND begins_with(SK, :slot)",
        ExpressionAttributeValues={":pk": {"S": f"TENANT#{TENANT}"}, ":slot": {"S": "SLOT#"}},
        ConsistentRead=True,
    )["Items"]


def test_a_tenant_at_its_limit_is_kept_and_runs_once_a_slot_frees(
    env, api_call, hook, sqs_client, dynamodb_client, monkeypatch
) -> None:
    # Given a tenant that may run one occurrence at a time, whose one slot another worker holds
    monkeypatch.setenv("SCHEDULER_TENANT_MAX_CONCURRENCY", "1")
    wiring.container.cache_clear()
    url, calls = hook
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    later = rfc3339(due + timedelta(hours=1))
    body = {"schedule": {"type": "once", "at": later}, "target": {"type": "http", "url": url}}
    response = api_call("POST", "/v1/jobs", body, tenant=TENANT)
    assert response.status == 201, response.text
    job_id = str(response.body["job_id"])
    slots = DynamoTenantSlots(env.jobs_table, dynamodb_client)
    now = datetime.now(UTC)
    assert slots.acquire(TENANT, 1, "another-worker", now, now + timedelta(minutes=5)) == 0
    # (an extra occurrence of the job, due now: a trigger)
    dispatch = Dispatch(job_id, TENANT, due, due, 1, "manual")
    sqs_client.send_message(QueueUrl=env.ready_queue_url, MessageBody=dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY))

    # When the worker gets its message, the message is kept, and nothing is claimed or called
    [record] = records(sqs_client, env.ready_queue_url)
    result = worker.lambda_handler({"Records": [record]}, LocalContext("punctual-worker", 120))
    assert [f["itemIdentifier"] for f in result["batchItemFailures"]] == [record["messageId"]]
    assert calls == []
    runs = api_call("GET", f"/v1/jobs/{job_id}/runs", tenant=TENANT).body["runs"]
    assert runs == []

    # And when the other worker is done, the message comes back (in a second or two) and runs, once
    slots.release(TENANT, 0, "another-worker")
    deadline = time.monotonic() + 30
    while not calls and time.monotonic() < deadline:
        batch = records(sqs_client, env.ready_queue_url)
        if batch:
            result = worker.lambda_handler({"Records": batch}, LocalContext("punctual-worker", 120))
            assert result["batchItemFailures"] == []
    assert calls == [occurrence_key(job_id, due)]
    runs = api_call("GET", f"/v1/jobs/{job_id}/runs", tenant=TENANT).body["runs"]
    assert [(r["state"], r["attempts"]) for r in runs] == [("SUCCEEDED", 1)]
    # And its slot is free again: no slot item is left
    assert slot_items(dynamodb_client, env.jobs_table) == []
