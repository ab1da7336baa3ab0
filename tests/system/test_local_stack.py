"""The local stack over real HTTP: a job submitted to the API fires a local receiver once, on time, signed;
duplicates and crashed processes change nothing about that."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from harness import LocalStack, Receiver, local_client, wait_for_run

from punctual_sdk.receiver import verify_v2
from scheduler.adapters.dispatch_message import dispatch_to_body
from scheduler.core.model.timefmt import parse_rfc3339, rfc3339
from scheduler.core.ports import Dispatch
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY

pytestmark = pytest.mark.system


def once_in(seconds: int) -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=seconds)


def submit(stack: LocalStack, url: str, at: datetime, **extra: object) -> dict[str, object]:
    body = {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "http", "url": url},
        "payload": {"charge": "card-42"},
        **extra,
    }
    status, job, _ = stack.call("POST", "/v1/jobs", body)
    assert status == 201, job
    return job


def test_a_one_shot_job_fires_once_on_time_with_its_headers(stack: LocalStack, receiver: Receiver) -> None:
    # Given a job due in 4 seconds
    at = once_in(4)
    job = submit(stack, receiver.url, at)

    # When its time comes (and a little longer, to catch a second call)
    receiver.wait_for(1, timeout=20)
    time.sleep(3)

    # Then the receiver got exactly one call, not early and at most 2.5 s late, carrying the key and token
    assert len(receiver.calls) == 1
    call = receiver.calls[0]
    assert 0 <= call.at - at.timestamp() <= 2.5
    assert call.headers["idempotency-key"] == f"{job['job_id']}:{rfc3339(at)}"
    assert call.headers["x-scheduler-job-id"] == job["job_id"]
    assert parse_rfc3339(call.headers["x-scheduler-scheduled-for"]) == at
    assert call.headers["x-scheduler-attempt"] == "1"
    assert int(call.headers["x-scheduler-fencing-token"]) >= 1
    assert json.loads(call.body) == {"charge": "card-42"}
    job_keys = KeyRing.parse(LOCAL_SIGNING_KEYS).job_keys(str(job["job_id"]))
    verify_v2(job_keys, "POST", call.headers["host"], "/hook", call.headers, call.body)
    # v1 is signed only where a deployment turns it on (SCHEDULER_SIGNATURE_V1)
    assert ",v1=" not in call.headers["x-scheduler-signature"]

    # And the run history says SUCCEEDED
    status, runs, _ = stack.call("GET", f"/v1/jobs/{job['job_id']}/runs")
    assert status == 200
    assert [(r["state"], r["attempts"]) for r in runs["runs"]] == [("SUCCEEDED", 1)]


def test_the_same_message_delivered_twice_has_one_effect(
    stack: LocalStack, receiver: Receiver, aws_endpoints: dict[str, str]
) -> None:
    # Given a job, and a copy of its occurrence's message sent to the ready queue a second time
    at = once_in(3)
    job = submit(stack, receiver.url, at)
    sqs = local_client("sqs", aws_endpoints)
    queue_url = sqs.get_queue_url(QueueName=f"{stack.env['SCHEDULER_LOCAL_PREFIX']}-ready")["QueueUrl"]
    duplicate = Dispatch(str(job["job_id"]), "alice", at, at, 1)
    for _ in range(2):
        sqs.send_message(QueueUrl=queue_url, MessageBody=dispatch_to_body(duplicate, LOCAL_MESSAGE_KEY), DelaySeconds=3)

    # When all copies have been delivered
    receiver.wait_for(1, timeout=20)
    time.sleep(6)

    # Then the target saw the occurrence once
    assert len(receiver.calls) == 1


def test_a_killed_worker_is_restarted_and_the_job_still_fires(stack: LocalStack, receiver: Receiver) -> None:
    # Given a job due soon, and every worker process killed with SIGKILL
    at = once_in(5)
    submit(stack, receiver.url, at)
    for name in ("worker-1", "worker-2"):
        stack.kill(name)

    # Then the supervisor restarts them and the job fires once
    calls = receiver.wait_for(1, timeout=30)
    time.sleep(2)
    assert len(calls) == 1
    assert calls[0].at >= at.timestamp()


def test_a_failing_target_is_retried_with_the_same_key(stack: LocalStack) -> None:
    # Given a receiver that fails the first call with 503 and then succeeds
    receiver = Receiver(respond=lambda n, h: (503, {"Retry-After": "1"}) if n == 1 else (200, {})).start()
    try:
        at = once_in(3)
        job = submit(stack, receiver.url, at, retry={"max_attempts": 3, "initial_backoff_seconds": 1})

        # When it has been retried
        calls = receiver.wait_for(2, timeout=30)

        # Then both attempts carried the same occurrence key, and the run succeeded on attempt 2
        assert len(calls) == 2
        assert calls[0].headers["idempotency-key"] == calls[1].headers["idempotency-key"]
        assert [c.headers["x-scheduler-attempt"] for c in calls] == ["1", "2"]
        assert wait_for_run(stack, str(job["job_id"]), "SUCCEEDED", timeout=10)["attempts"] == 2
    finally:
        receiver.stop()


def test_tenants_are_isolated_and_auth_is_required(stack: LocalStack, receiver: Receiver) -> None:
    job = submit(stack, receiver.url, once_in(300))
    assert stack.call("GET", f"/v1/jobs/{job['job_id']}", token="t-bob")[0] == 404
    assert stack.call("DELETE", f"/v1/jobs/{job['job_id']}", token="t-bob")[0] == 404
    assert stack.call("GET", "/v1/jobs", token=None)[0] == 401
    assert stack.call("GET", "/v1/jobs", token="not-a-token")[0] == 401
    assert stack.call("GET", "/v1/health", token=None)[0] == 200
    status, listing, _ = stack.call("GET", "/v1/jobs?limit=100", token="t-bob")
    assert status == 200 and all(j["job_id"] != job["job_id"] for j in listing["jobs"])


def test_a_handler_target_runs_in_the_worker_and_writes_its_effect_once(
    stack: LocalStack, aws_endpoints: dict[str, str]
) -> None:
    # Given a job whose target is the example handler `payments.charge`, and the same occurrence triggered twice
    at = once_in(2)
    status, job, _ = stack.call("POST", "/v1/jobs", {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "handler", "name": "payments.charge"},
        "payload": {"account": "acct-42", "amount": "12.50", "currency": "EUR"},
    })  # fmt: skip
    assert status == 201, job

    # When it has run, Then it succeeded
    wait_for_run(stack, job["job_id"], "SUCCEEDED", timeout=20)

    # And exactly one payment item exists for its occurrence key
    dynamodb = local_client("dynamodb", aws_endpoints)
    table = f"{stack.env['SCHEDULER_LOCAL_PREFIX']}-example-payments"
    items = dynamodb.scan(TableName=table)["Items"]
    assert [i["PK"]["S"] for i in items] == [f"PAYMENT#{job['job_id']}:{rfc3339(at)}"]


def test_an_unknown_handler_name_is_refused_at_submit(stack: LocalStack) -> None:
    status, problem, _ = stack.call("POST", "/v1/jobs", {
        "schedule": {"type": "once", "delay_seconds": 60},
        "target": {"type": "handler", "name": "payments.refund"},
    })  # fmt: skip
    assert status == 422
    assert problem["errors"][0]["field"] == "target.name"
    assert "payments.charge" in problem["detail"]
