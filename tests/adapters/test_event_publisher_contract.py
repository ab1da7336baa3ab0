"""EventPublisher contract: the same tests run against MemoryEventPublisher and EventBridgePublisher (an EventBridge
bus on the moto server, read back through a rule that targets an SQS queue), plus the EventBridge adapter's own
rules (batches of 10, retries of refused entries, failure when entries stay refused)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.eventbridge import EventBridgePublisher
from scheduler.adapters.memory import MemoryEventPublisher
from scheduler.core.errors import EventPublishFailed
from scheduler.core.execution.events import DETAIL_TYPES, EVENT_SOURCE, event_detail, event_id
from scheduler.core.model.job import RunState
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import OutcomeEvent

T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)


def outcome(n: int, state: RunState = RunState.SUCCEEDED) -> OutcomeEvent:
    key = f"job{n:04d}:{rfc3339(T0)}"
    return OutcomeEvent(
        event_id=event_id(key, 1, state),
        occurrence_key=key,
        job_id=f"job{n:04d}",
        tenant="tenant-a",
        scheduled_for=T0,
        state=state,
        fencing_token=1,
        attempts=1,
        finished_at=T0 + timedelta(seconds=2),
        result="HTTP 200" if state == RunState.SUCCEEDED else None,
        error=None if state == RunState.SUCCEEDED else "why",
    )


@dataclass
class BusUnderTest:
    name: str
    publisher: Any
    #: every event the bus delivered so far, as (detail-type, detail)
    delivered: Callable[[int], list[tuple[str, dict[str, Any]]]]


def _memory() -> BusUnderTest:
    publisher = MemoryEventPublisher()

    def delivered(expected: int) -> list[tuple[str, dict[str, Any]]]:
        return [(DETAIL_TYPES[e.state], event_detail(e)) for e in publisher.published]

    return BusUnderTest("memory", publisher, delivered)


def _eventbridge(sqs_client: Any, events_client: Any) -> BusUnderTest:
    bus = f"t{uuid.uuid4().hex[:10]}-events"
    events_client.create_event_bus(Name=bus)
    queue_url = sqs_client.create_queue(QueueName=f"{bus}-tap")["QueueUrl"]
    queue_arn = sqs_client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events_client.put_rule(Name=f"{bus}-tap", EventBusName=bus, EventPattern=json.dumps({"source": [EVENT_SOURCE]}))
    events_client.put_targets(Rule=f"{bus}-tap", EventBusName=bus, Targets=[{"Id": "tap", "Arn": queue_arn}])
    seen: list[tuple[str, dict[str, Any]]] = []

    def delivered(expected: int) -> list[tuple[str, dict[str, Any]]]:
        deadline = time.time() + 10
        while len(seen) < expected and time.time() < deadline:
            response = sqs_client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            for message in response.get("Messages", []):
                envelope = json.loads(message["Body"])
                assert envelope["source"] == EVENT_SOURCE
                seen.append((envelope["detail-type"], envelope["detail"]))
                sqs_client.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
        return sorted(seen, key=lambda item: item[1]["occurrence_key"])

    return BusUnderTest("eventbridge", EventBridgePublisher(bus, events_client), delivered)


@pytest.fixture(params=["memory", pytest.param("eventbridge", marks=pytest.mark.emulator)])
def bus(request: pytest.FixtureRequest) -> BusUnderTest:
    if request.param == "memory":
        return _memory()
    import boto3

    sqs_client = request.getfixturevalue("sqs_client")
    events_client = boto3.client("events", region_name=sqs_client.meta.region_name)
    return _eventbridge(sqs_client, events_client)


def test_each_event_is_delivered_with_its_detail_type_and_detail(bus: BusUnderTest) -> None:
    events = [outcome(1), outcome(2, RunState.DEAD), outcome(3, RunState.RECONCILING)]

    bus.publisher.publish(events)

    delivered = bus.delivered(3)
    assert [d[0] for d in delivered] == ["Occurrence Succeeded", "Occurrence Dead", "Occurrence Reconciling"]
    first = delivered[0][1]
    assert first == {
        "event_id": "job0001:2030-01-07T09:00:00Z/1/SUCCEEDED",
        "occurrence_key": "job0001:2030-01-07T09:00:00Z",
        "job_id": "job0001",
        "tenant": "tenant-a",
        "scheduled_for": "2030-01-07T09:00:00Z",
        "state": "SUCCEEDED",
        "fencing_token": 1,
        "attempts": 1,
        "finished_at": "2030-01-07T09:00:02Z",
        "error": None,
        "result": "HTTP 200",
    }


def test_more_than_a_batch_is_delivered_whole(bus: BusUnderTest) -> None:
    events = [outcome(n) for n in range(23)]

    bus.publisher.publish(events)

    assert [d[1]["occurrence_key"] for d in bus.delivered(23)] == [e.occurrence_key for e in events]


# -- the EventBridge adapter's own rules ---------------------------------------------------------------------


class ScriptedEvents:
    """A fake events client: refuses the entries named by `refuse(call_number, index)`."""

    def __init__(self, refuse: Callable[[int, int], bool]) -> None:
        self.refuse = refuse
        self.calls: list[list[dict[str, Any]]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803 - boto3's name
        self.calls.append(Entries)
        results = [
            {"ErrorCode": "ThrottlingException", "ErrorMessage": "slow down"}
            if self.refuse(len(self.calls), i)
            else {"EventId": uuid.uuid4().hex}
            for i in range(len(Entries))
        ]
        return {"FailedEntryCount": sum(1 for r in results if "ErrorCode" in r), "Entries": results}


def test_entries_go_in_batches_of_ten_to_the_named_bus() -> None:
    client = ScriptedEvents(lambda call, i: False)

    EventBridgePublisher("my-bus", client).publish([outcome(n) for n in range(21)])

    assert [len(c) for c in client.calls] == [10, 10, 1]
    entry = client.calls[0][0]
    assert (entry["EventBusName"], entry["Source"], entry["DetailType"]) == (
        "my-bus",
        "punctual.scheduler",
        "Occurrence Succeeded",
    )
    assert entry["Time"] == T0 + timedelta(seconds=2)


def test_refused_entries_are_sent_again_and_only_they() -> None:
    client = ScriptedEvents(lambda call, i: call == 1 and i in (1, 3))

    EventBridgePublisher("bus", client).publish([outcome(n) for n in range(5)])

    assert len(client.calls) == 2
    resent = [json.loads(e["Detail"])["job_id"] for e in client.calls[1]]
    assert resent == ["job0001", "job0003"]


def test_entries_that_stay_refused_raise_so_the_outbox_keeps_them() -> None:
    client = ScriptedEvents(lambda call, i: i == 0)

    with pytest.raises(EventPublishFailed, match="ThrottlingException"):
        EventBridgePublisher("bus", client).publish([outcome(1), outcome(2)])

    assert len(client.calls) == 3


def test_the_memory_bus_can_refuse() -> None:
    bus = MemoryEventPublisher()
    bus.failing = True
    with pytest.raises(EventPublishFailed):
        bus.publish([outcome(1)])
    assert bus.published == []
