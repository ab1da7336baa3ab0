"""Completion events through the Lambda handlers, on the moto server's EventBridge: the worker publishes right after
recording an outcome; the sweeper drains what a worker left in the outbox. Read back through a rule on the bus that
targets an SQS queue, as a consumer would."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import boto3
import pytest

from scheduler.adapters.dispatch_message import dispatch_to_body
from scheduler.adapters.dynamodb import DynamoLedger
from scheduler.core.model.job import RunState
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch
from scheduler.core.records import Attempt
from scheduler.handlers import sweeper, worker
from scheduler.handlers.local_invocation import LocalContext
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from scheduler_local.worker_poller import to_event

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT = "arn:aws:iam::111111111111:user/alice"


@pytest.fixture
def tap(env: Any, sqs_client: Any) -> Any:
    """An SQS queue that receives every punctual event on the stack's bus (a consumer's rule)."""
    events = boto3.client("events", region_name="us-east-1")
    name = f"tap{uuid.uuid4().hex[:8]}"
    url = sqs_client.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(
        Name=name, EventBusName=env.event_bus_name, EventPattern=json.dumps({"source": ["punctual.scheduler"]})
    )
    events.put_targets(Rule=name, EventBusName=env.event_bus_name, Targets=[{"Id": "tap", "Arn": arn}])

    def read(count: int, timeout: float = 10) -> list[dict[str, Any]]:
        got: list[dict[str, Any]] = []
        deadline = time.time() + timeout
        while len(got) < count and time.time() < deadline:
            for m in sqs_client.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
                "Messages", []
            ):
                got.append(json.loads(m["Body"]))
        return got

    return read


def record_for(sqs_client: Any, queue_url: str, body: str) -> dict[str, Any]:
    sqs_client.send_message(QueueUrl=queue_url, MessageBody=body)
    arn = sqs_client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    messages = sqs_client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=1, AttributeNames=["All"])["Messages"]
    [record] = to_event(messages, arn)["Records"]
    return dict(record)


def _cancelled_after_dispatch(env: Any, api_call: Any, sqs_client: Any, events: bool | None) -> tuple[Dispatch, Any]:
    """A one-shot job (`events` as given, left out when None) whose occurrence was dispatched and which was then
    cancelled; the worker handler run on its message. Returns the dispatch and the handler's response."""
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
    body: dict[str, Any] = {
        "schedule": {"type": "once", "at": rfc3339(due)},
        "target": {"type": "http", "url": "http://127.0.0.1:9/"},
    }
    if events is not None:
        body["events"] = events
    job_id = api_call("POST", "/v1/jobs", body, tenant=TENANT).body["job_id"]
    dispatch = Dispatch(job_id, TENANT, due, due, 1)
    api_call("DELETE", f"/v1/jobs/{job_id}", tenant=TENANT)
    response = worker.lambda_handler(
        {"Records": [record_for(sqs_client, env.ready_queue_url, dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY))]},
        LocalContext("punctual-worker", 120),
    )
    return dispatch, response


def test_the_worker_publishes_the_outcome_it_records(env, api_call, sqs_client, tap) -> None:
    # Given a job whose occurrence was dispatched, and which was cancelled before its message was handled;
    # when the worker handles the message (it records CANCELLED)
    dispatch, response = _cancelled_after_dispatch(env, api_call, sqs_client, events=True)

    # Then one "Occurrence Cancelled" event with the occurrence key reached the consumer's queue
    assert response["batchItemFailures"] == []
    [event] = tap(1)
    assert event["source"] == "punctual.scheduler"
    assert event["detail-type"] == "Occurrence Cancelled"
    assert event["detail"]["occurrence_key"] == dispatch.key
    assert event["detail"]["tenant"] == TENANT
    assert event["detail"]["event_id"] == f"{dispatch.key}/1/CANCELLED"
    # And nothing is left in the outbox
    ledger = DynamoLedger(env.executions_table)
    assert ledger.get(dispatch.key).outbox == []


def test_a_job_that_does_not_ask_for_events_writes_no_outbox_and_publishes_nothing(
    env, api_call, sqs_client, tap
) -> None:
    # Given a job that leaves `events` out (the deployed default is off), cancelled after its dispatch;
    # when the worker handles the message
    dispatch, response = _cancelled_after_dispatch(env, api_call, sqs_client, events=None)

    # Then the outcome is recorded, with no outbox entry (nothing for the drain to find) and no event
    assert response["batchItemFailures"] == []
    recorded = DynamoLedger(env.executions_table).get(dispatch.key)
    assert recorded.state == RunState.CANCELLED and recorded.outbox == []
    item = boto3.client("dynamodb").get_item(TableName=env.executions_table, Key={"PK": {"S": dispatch.key}})["Item"]
    assert "event_pending" not in item
    assert tap(1, timeout=3) == []


def test_the_sweeper_publishes_what_a_worker_left_in_the_outbox(env, sqs_client, tap) -> None:
    # Given an outcome recorded a minute ago by a worker that died before publishing it
    ledger = DynamoLedger(env.executions_table)
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    orphan = Dispatch("gone", TENANT, at, at, 1)
    assert ledger.record_unclaimed(orphan, RunState.SKIPPED, at, "worker died before publishing")

    # When the sweeper runs
    summary = sweeper.lambda_handler({"source": "aws.events"}, LocalContext("punctual-sweeper", 60))

    # Then it published the event and cleared the outbox
    assert summary["completion_events_published"] >= 1
    [event] = [e for e in tap(1) if e["detail"]["occurrence_key"] == orphan.key]
    assert event["detail-type"] == "Occurrence Skipped"
    assert event["detail"]["error"] == "worker died before publishing"
    assert ledger.get(orphan.key).outbox == []


def test_the_api_publishes_the_outcome_an_operator_resolves_at_once(env, api_call, tap) -> None:
    # Given an at-most-once occurrence whose worker was lost mid-run (RECONCILING)
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=2)
    body = {
        "schedule": {"type": "once", "at": rfc3339(due + timedelta(hours=1))},
        "target": {"type": "http", "url": "http://127.0.0.1:9/"},
        "delivery": "at_most_once",
    }
    job_id = api_call("POST", "/v1/jobs", body, tenant=TENANT).body["job_id"]
    dispatch = Dispatch(job_id, TENANT, due, due, 1, "manual")
    ledger = DynamoLedger(env.executions_table)
    claimed = ledger.claim(dispatch, Attempt("lost-worker", due, due + timedelta(seconds=1), False))
    lapsed = due + timedelta(seconds=5)  # its lease ended
    assert ledger.expire_to(dispatch.key, claimed.epoch, RunState.RECONCILING, lapsed, "worker lost mid-run")

    # When the operator resolves it through the API (no sweep runs)
    path = f"/v1/jobs/{job_id}/runs/{quote(dispatch.key, safe='')}/resolve"
    response = api_call("POST", path, {"outcome": "succeeded", "note": "the bank shows it"}, tenant=TENANT)
    assert response.status == 200, response.text

    # Then the consumer already has its "Occurrence Succeeded" event (and the earlier RECONCILING one)
    events = {e["detail-type"]: e for e in tap(2)}
    assert set(events) == {"Occurrence Reconciling", "Occurrence Succeeded"}
    assert events["Occurrence Succeeded"]["detail"]["occurrence_key"] == dispatch.key
    assert ledger.get(dispatch.key).outbox == []
