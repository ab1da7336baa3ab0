"""Bounded recovery in the worker Lambda, against the moto ready queue: a worker that dies in the
middle of its batch leaves every record it held visible again within the hold time (20 s), not the queue's
visibility timeout (720 s); the records it had not reached then run, once."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.dispatch_message import dispatch_to_body
from scheduler.core.execution.executor import Executor
from scheduler.core.execution.recovery import HoldConfig
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch
from scheduler.handlers import worker
from scheduler.handlers.local_invocation import LocalContext
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from scheduler_local.worker_poller import to_event

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT = "arn:aws:iam::111111111111:user/alice"
HOLD = HoldConfig().hold_seconds


class WorkerDied(BaseException):
    """The process is killed at this instruction (not an Exception: nothing may catch it)."""


def receive(sqs: Any, queue_url: str, count: int, wait: float) -> list[dict[str, Any]]:
    arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + wait
    while len(got) < count and time.monotonic() < deadline:
        got += sqs.receive_message(
            QueueUrl=queue_url, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"]
        ).get("Messages", [])
        time.sleep(0.1)
    return list(to_event(got, arn)["Records"])


def test_a_worker_killed_mid_batch_leaves_its_records_visible_within_the_hold_time(
    env: Any, api_call: Any, hook: tuple[str, list[str]], sqs_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, calls = hook
    # Given a batch of four occurrences due now, received with the queue's visibility timeout (720 s)
    due = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=1)
    dispatches = []
    for _ in range(4):
        created = api_call("POST", "/v1/jobs", {"schedule": {"type": "once", "at": rfc3339(due)},
                                                "target": {"type": "http", "url": url}}, tenant=TENANT)  # fmt: skip
        assert created.status == 201, created.text
        dispatches.append(Dispatch(created.body["job_id"], TENANT, due, due, 1))
    for d in dispatches:
        sqs_client.send_message(QueueUrl=env.ready_queue_url, MessageBody=dispatch_to_body(d, LOCAL_MESSAGE_KEY))
    records = receive(sqs_client, env.ready_queue_url, 4, 10)
    assert len(records) == 4

    # When the worker dies while it runs the second record (after the first one's effect, before its delete)
    real_execute = Executor.execute
    started: list[str] = []

    def execute(self: Executor, dispatch: Dispatch, message: Any) -> Any:
        started.append(dispatch.key)
        if len(started) == 2:
            raise WorkerDied("SIGKILL")
        return real_execute(self, dispatch, message)

    monkeypatch.setattr(Executor, "execute", execute)
    died_at = time.monotonic()
    with pytest.raises(WorkerDied):
        worker.lambda_handler({"Records": records}, LocalContext("punctual-worker", 120))
    monkeypatch.setattr(Executor, "execute", real_execute)

    # Then nothing shows before the hold time, and every record of the batch shows again within it
    assert receive(sqs_client, env.ready_queue_url, 1, HOLD - 2 - (time.monotonic() - died_at)) == []
    again = receive(sqs_client, env.ready_queue_url, 4, 4)
    back_after = time.monotonic() - died_at
    assert len(again) == 4, f"{len(again)} of 4 back after {back_after:.1f}s"
    assert back_after < HOLD + 3

    # And delivered again, each occurrence takes effect once: the first is absorbed by the ledger
    assert worker.lambda_handler({"Records": again}, LocalContext("punctual-worker", 120)) == {"batchItemFailures": []}
    assert Counter(calls) == Counter({d.key: 1 for d in dispatches})
