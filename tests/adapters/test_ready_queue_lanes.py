"""The priority lanes on SQS (moto): each dispatch goes to its lane's queue; a lane without a queue falls back to
the normal one; the worker finds a message's lane from its event source ARN; the local poller drains high first
and still serves low within its bound."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.dispatch_message import dispatches_from_body
from scheduler.adapters.sqs import SqsReadyQueue
from scheduler.core.execution.packing import PackingConfig
from scheduler.core.ports import Dispatch
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from scheduler_local.worker_poller import LaneScheduler, poll_once, serve_round

pytestmark = pytest.mark.emulator

NOW = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


def dispatch(n: int, priority: str) -> Dispatch:
    return Dispatch(f"job{n:03d}", "tenant-a", NOW, NOW, 1, "scheduled", priority)  # type: ignore[arg-type]


@pytest.fixture
def lanes(sqs_client: Any) -> dict[str, str]:
    prefix = f"lanes{uuid.uuid4().hex[:8]}"
    return {
        lane: sqs_client.create_queue(QueueName=f"{prefix}-{lane}")["QueueUrl"] for lane in ("high", "normal", "low")
    }


def lane_queue(sqs_client: Any, lanes: dict[str, str]) -> SqsReadyQueue:
    """The ready queue with its three lanes (`normal` is the default queue)."""
    return SqsReadyQueue(
        lanes["normal"],
        "unused",
        sqs_client,
        lanes={"high": lanes["high"], "low": lanes["low"]},
        message_key=LOCAL_MESSAGE_KEY,
    )


def drain(sqs_client: Any, url: str) -> list[Dispatch]:
    out: list[Dispatch] = []
    while batch := sqs_client.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        out += [d for m in batch for d in dispatches_from_body(m["Body"], LOCAL_MESSAGE_KEY)]
        sqs_client.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)]
        )
    return out


def test_each_dispatch_goes_to_its_lane(sqs_client, lanes) -> None:
    queue = lane_queue(sqs_client, lanes)
    sent = [dispatch(n, ("high", "normal", "low")[n % 3]) for n in range(25)]

    queue.send(sent, NOW)

    for lane, url in lanes.items():
        received = drain(sqs_client, url)
        assert sorted(d.job_id for d in received) == sorted(d.job_id for d in sent if d.priority == lane)
        assert {d.priority for d in received} == {lane}


def test_a_lane_without_a_queue_uses_the_normal_one(sqs_client, lanes) -> None:
    queue = SqsReadyQueue(
        lanes["normal"], "unused", sqs_client, lanes={"high": "", "low": lanes["low"]}, message_key=LOCAL_MESSAGE_KEY
    )

    queue.send([dispatch(1, "high"), dispatch(2, "low")], NOW)

    assert [d.job_id for d in drain(sqs_client, lanes["normal"])] == ["job001"]
    assert [d.job_id for d in drain(sqs_client, lanes["low"])] == ["job002"]


def test_a_messages_lane_is_found_from_its_event_source_arn(sqs_client, lanes) -> None:
    queue = lane_queue(sqs_client, lanes)
    for url in lanes.values():
        arn = sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        assert queue.queue_url_of(arn) == url
    assert queue.queue_url_of("arn:aws:sqs:us-east-1:123456789012:unknown") == lanes["normal"]


def test_the_local_poller_drains_high_first_and_still_serves_low(sqs_client, lanes) -> None:
    # Given 30 high, 30 normal and 10 low messages waiting (an occurrence each)
    queue = lane_queue(sqs_client, lanes)
    queue.packing = PackingConfig(occurrences=1)
    queue.send([dispatch(n, "high") for n in range(30)], NOW)
    queue.send([dispatch(n, "normal") for n in range(30, 60)], NOW)
    queue.send([dispatch(n, "low") for n in range(60, 70)], NOW)
    arns = {
        lane: sqs_client.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for lane, url in lanes.items()
    }
    handled: list[str] = []

    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        handled.extend(d.priority for r in event["Records"] for d in dispatches_from_body(r["body"], LOCAL_MESSAGE_KEY))
        return {"batchItemFailures": []}

    # When the poller runs its rounds (aging after 2 rounds passed over)
    scheduler = LaneScheduler(["high", "normal", "low"], aging_rounds=2)
    served = []
    while lane := serve_round(scheduler, lambda name: poll_once(sqs_client, lanes[name], arns[name], handler, 0)):
        served.append(lane)

    # Then everything was handled once; high went first, and low got a batch before high was drained
    assert sorted(handled) == sorted(["high"] * 30 + ["normal"] * 30 + ["low"] * 10)
    assert served[0] == "high"
    assert "low" in served[: 2 + 3]
    assert handled.index("low") < len(handled) - handled[::-1].index("high") - 1


def test_a_message_held_back_by_its_tenants_budget_is_delayed_until_then(sqs_client, lanes) -> None:
    # (DelaySeconds counts from `now`: the later of the fire time and the budget's release)
    queue = SqsReadyQueue(lanes["normal"], "unused", sqs_client, message_key=LOCAL_MESSAGE_KEY)
    sent: list[list[dict[str, Any]]] = []
    real = sqs_client.send_message_batch

    class Spy:
        def __getattr__(self, name: str) -> Any:
            return getattr(sqs_client, name)

        def send_message_batch(self, **kwargs: Any) -> Any:
            sent.append(kwargs["Entries"])
            return real(**kwargs)

    queue.client = Spy()
    on_time = dispatch(1, "normal")
    held = dispatch(2, "normal").deferred_to(NOW + timedelta(seconds=42, milliseconds=500))

    queue.send([on_time, held], NOW)

    assert [e["DelaySeconds"] for e in sent[0]] == [0, 42]


def test_every_message_carries_its_tenant_as_its_fair_queue_message_group(sqs_client, lanes) -> None:
    # SQS fair queues (standard queues) tell tenants apart by MessageGroupId: a tenant with a backlog in flight is
    # a noisy neighbour whose messages go after the quiet tenants'.
    queue = lane_queue(sqs_client, lanes)
    sent = [replace(dispatch(n, ("high", "normal")[n % 2]), tenant=f"tenant-{n % 3}") for n in range(8)]

    queue.send(sent, NOW)

    groups: dict[str, str] = {}
    for url in lanes.values():
        while batch := sqs_client.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, MessageSystemAttributeNames=["MessageGroupId"]
        ).get("Messages", []):
            for m in batch:
                for d in dispatches_from_body(m["Body"], LOCAL_MESSAGE_KEY):
                    groups[d.job_id] = m["Attributes"]["MessageGroupId"]
                sqs_client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert groups == {d.job_id: d.tenant for d in sent}
