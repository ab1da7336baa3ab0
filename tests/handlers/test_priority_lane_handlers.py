"""Priority lanes through the handlers: the sweeper sends each occurrence to its job's lane, and the worker changes
a message's visibility on the lane it came from."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.dispatch_message import dispatch_from_body, dispatch_to_body
from scheduler.core.model.timefmt import rfc3339, truncate_ms
from scheduler.core.ports import Dispatch
from scheduler.handlers import sweeper, worker
from scheduler.handlers.local_invocation import LocalContext
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from scheduler_local.worker_poller import to_event

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT = "arn:aws:iam::111111111111:user/alice"


def create(api_call: Any, at: datetime, priority: str) -> str:
    body = {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "http", "url": "http://127.0.0.1:9/"},
        "priority": priority,
    }
    response = api_call("POST", "/v1/jobs", body, tenant=TENANT)
    assert response.status == 201, response.text
    assert response.body["priority"] == priority
    return str(response.body["job_id"])


def received(sqs_client: Any, url: str, timeout: float = 5) -> list[Dispatch]:
    out: list[Dispatch] = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        batch = sqs_client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        out += [dispatch_from_body(m["Body"], LOCAL_MESSAGE_KEY) for m in batch]
        if not batch and out:
            break
        time.sleep(0.1)
    return out


def test_the_sweeper_sends_each_occurrence_to_its_jobs_lane(env, api_call, sqs_client) -> None:
    at = truncate_ms(datetime.now(UTC) + timedelta(seconds=90))
    jobs = {priority: create(api_call, at, priority) for priority in ("high", "normal", "low")}

    sweeper.lambda_handler({"source": "aws.events"}, LocalContext("punctual-sweeper", 60))

    # DelaySeconds hides them for now: look at the lanes' counts instead of receiving
    for priority, url in (
        ("high", env.ready_queue_high_url),
        ("normal", env.ready_queue_url),
        ("low", env.ready_queue_low_url),
    ):
        attributes = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        waiting = int(attributes["ApproximateNumberOfMessagesDelayed"]) + int(attributes["ApproximateNumberOfMessages"])
        assert waiting == 1, (priority, attributes)
    assert len(jobs) == 3


def test_the_worker_hides_a_message_on_the_lane_it_came_from(env, api_call, sqs_client) -> None:
    # Given an early message of a high-priority job on the high lane (and one of a job that no longer exists)
    at = truncate_ms(datetime.now(UTC) + timedelta(seconds=4))
    job_id = create(api_call, at, "high")
    early = Dispatch(job_id, TENANT, at, at, 1, "scheduled", "high")
    gone = Dispatch("gone", TENANT, at - timedelta(minutes=5), at - timedelta(minutes=5), 1, "scheduled", "high")
    for dispatch in (early, gone):
        sqs_client.send_message(
            QueueUrl=env.ready_queue_high_url, MessageBody=dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)
        )
    arn = sqs_client.get_queue_attributes(QueueUrl=env.ready_queue_high_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    messages = sqs_client.receive_message(
        QueueUrl=env.ready_queue_high_url, AttributeNames=["All"], MaxNumberOfMessages=10
    )["Messages"]
    assert len(messages) == 2
    records = to_event(messages, arn)["Records"]
    early_id = next(m["MessageId"] for m in messages if dispatch_from_body(m["Body"], LOCAL_MESSAGE_KEY) == early)

    # When the worker handles them, it keeps the early one and hides it on the high lane until its time
    response = worker.lambda_handler({"Records": records}, LocalContext("punctual-worker", 120))

    assert response["batchItemFailures"] == [{"itemIdentifier": early_id}]
    # (a visibility change sent to another lane's queue would fail, and leave it hidden for the queue's 720 s)
    assert received(sqs_client, env.ready_queue_high_url, timeout=1) == []
    assert received(sqs_client, env.ready_queue_high_url, timeout=8) == [early]
