"""The confused deputy, on the local stack: a tenant cannot make the worker run another tenant's job by writing a
dispatch message to the ready queue - neither through an `sqs` target (refused at submit) nor by placing the message
there itself (dead-lettered unrun: it carries no valid HMAC). docs/security.md, "Trust model"."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from harness import LocalStack, Receiver, local_client

from scheduler.core.model.timefmt import rfc3339

pytestmark = pytest.mark.system


def test_a_forged_dispatch_is_refused_at_submit_and_dead_lettered_unrun(
    stack: LocalStack, receiver: Receiver, aws_endpoints: dict[str, str]
) -> None:
    # Given bob's job (its id is not secret: every webhook carries it), due in an hour
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    job = {"schedule": {"type": "once", "at": rfc3339(at)}, "target": {"type": "http", "url": receiver.url}}
    status, victim, _ = stack.call("POST", "/v1/jobs", job, token="t-bob")
    assert status == 201
    sqs = local_client("sqs", aws_endpoints)
    prefix = stack.env["SCHEDULER_LOCAL_PREFIX"]
    ready = sqs.get_queue_url(QueueName=f"{prefix}-ready")["QueueUrl"]
    dlq = sqs.get_queue_url(QueueName=f"{prefix}-dlq")["QueueUrl"]
    now = rfc3339(datetime.now(UTC).replace(microsecond=0))
    key = f"{victim['job_id']}:{now}"
    forged = {"v": 1, "kind": "manual", "job_id": victim["job_id"], "tenant": "bob", "scheduled_for": now,
              "fire_at": now, "version": 1, "priority": "normal", "occurrence_key": key}  # fmt: skip

    # When alice submits a job whose sqs target is the ready queue, carrying that dispatch
    status, problem, _ = stack.call(
        "POST", "/v1/jobs",
        {"schedule": {"type": "once", "delay_seconds": 1}, "target": {"type": "sqs", "queue_url": ready},
         "payload": forged},
    )  # fmt: skip

    # Then it is refused, naming the field
    assert status == 422, problem
    assert problem["errors"][0]["field"] == "target.queue_url"

    # When she places the dispatch on the ready queue herself (with a made-up HMAC, and without one)
    for body in (forged | {"mac": "0" * 64}, forged):
        sqs.send_message(QueueUrl=ready, MessageBody=json.dumps(body))

    # Then both are dead-lettered with the reason, and bob's job never runs
    found: list[dict[str, Any]] = []
    deadline = time.time() + 30
    while len(found) < 2 and time.time() < deadline:
        for message in sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, WaitTimeSeconds=1).get("Messages", []):
            body = json.loads(message["Body"])
            if victim["job_id"] in body.get("unauthenticated", ""):
                found.append(body)
                sqs.delete_message(QueueUrl=dlq, ReceiptHandle=message["ReceiptHandle"])
    assert len(found) == 2, found
    assert all("unauthenticated dispatch message" in body["error"] for body in found)
    assert receiver.calls == []
    status, runs, _ = stack.call("GET", f"/v1/jobs/{victim['job_id']}/runs", token="t-bob")
    assert status == 200 and runs["runs"] == []
