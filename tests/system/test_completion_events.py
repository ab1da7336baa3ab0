"""Completion events on the local stack: a job that fires announces its outcome on the stack's EventBridge bus (the
moto server), where a consumer's rule forwards it to an SQS queue."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from harness import LocalStack, Receiver, local_client

from scheduler.core.model.timefmt import rfc3339

pytestmark = pytest.mark.system


def test_a_fired_job_publishes_one_succeeded_event_a_consumer_can_read(
    stack: LocalStack, receiver: Receiver, aws_endpoints: dict[str, str]
) -> None:
    # Given a consumer: a rule on the stack's bus that forwards punctual's events to its queue
    events, sqs = local_client("events", aws_endpoints), local_client("sqs", aws_endpoints)
    bus = f"{stack.env['SCHEDULER_LOCAL_PREFIX']}-events"
    name = f"consumer{uuid.uuid4().hex[:8]}"
    queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    pattern = {"source": ["punctual.scheduler"], "detail-type": ["Occurrence Succeeded"]}
    events.put_rule(Name=name, EventBusName=bus, EventPattern=json.dumps(pattern))
    events.put_targets(Rule=name, EventBusName=bus, Targets=[{"Id": "consumer", "Arn": queue_arn}])

    # When a job that asks for completion events fires
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=3)
    body = {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "http", "url": receiver.url},
        "events": True,
    }
    status, job, _ = stack.call("POST", "/v1/jobs", body)
    assert status == 201, job
    receiver.wait_for(1, timeout=20)

    # Then the consumer receives its "Occurrence Succeeded" event, with the occurrence key to dedupe on
    received: list[dict[str, Any]] = []
    deadline = time.time() + 20
    while not received and time.time() < deadline:
        for message in sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        ):
            received.append(json.loads(message["Body"]))
    key = f"{job['job_id']}:{rfc3339(at)}"
    mine = [e for e in received if e["detail"]["occurrence_key"] == key]
    # (at least once, as documented: a publish whose answer came too late is published again by the sweeper's drain,
    # the same event with the same event_id, which consumers dedupe on)
    assert mine, received
    assert len({e["detail"]["event_id"] for e in mine}) == 1, mine
    event = mine[0]
    assert event["detail-type"] == "Occurrence Succeeded"
    assert event["detail"]["job_id"] == job["job_id"]
    assert event["detail"]["tenant"] == "alice"
    assert event["detail"]["state"] == "SUCCEEDED" and event["detail"]["attempts"] == 1
