"""The emulator fidelity contract: every SQS behaviour the protocol relies on, asserted against the emulator the
local stack and the test suite run on (ministack, pinned; or whatever AWS_ENDPOINT_URL_SQS names), as SQS
documents it. The local stack's lateness and exactly-once tests mean something only if the emulator keeps these,
so an emulator upgrade (or a switch) that breaks one fails here, by name, rather than as a flaky system test.

Which part of the protocol relies on what:
- per-message DelaySeconds (SendMessageBatch): the sweeper hands a dispatch over up to 15 minutes early and SQS
  holds it until a second before it is due;
- visibility timeout, ChangeMessageVisibility (+Batch): the worker hides a message it keeps (retry backoff, early
  arrival, a live lease elsewhere) for exactly as long as it wants, and an invocation that dies leaves its
  messages to come back after the timeout;
- ApproximateReceiveCount: the worker counts attempts by it; redrive to the DLQ at maxReceiveCount is the last
  line of defence for a poison message;
- MessageGroupId on a standard queue (fair queues) is accepted and does not order or block;
- FIFO ordering and deduplication: the `sqs` target's FIFO queues (the occurrence key as deduplication id);
- message attributes round trip (occurrence_key, tenant), MD5s (boto3 checks them);
- queue counts (visible / in flight / delayed): the sweeper's back-pressure and the operators' metrics;
- long polling returns as soon as a message arrives, and waits when there is none.

Intervals are short (1-3 s) but every assertion about "not yet" leaves the emulator a margin, and every "by now"
waits past the documented instant, so a loaded machine slows this test down without making it flaky.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

pytestmark = pytest.mark.emulator


@pytest.fixture
def new_queue(sqs_client: Any) -> Iterator[Callable[..., str]]:
    """Create queues with unique names (attributes as SQS takes them); delete them after the test."""
    created: list[str] = []

    def make(fifo: bool = False, **attributes: str) -> str:
        name = f"fid-{uuid.uuid4().hex[:12]}" + (".fifo" if fifo else "")
        if fifo:
            attributes["FifoQueue"] = "true"
        url: str = sqs_client.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        created.append(url)
        return url

    yield make
    for url in created:
        sqs_client.delete_queue(QueueUrl=url)


def receive(sqs: Any, url: str, wait: int = 0, n: int = 10, **extra: Any) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=n,
        WaitTimeSeconds=wait,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
        **extra,
    ).get("Messages", [])
    return messages


def receive_until(sqs: Any, url: str, count: int, timeout: float, **extra: Any) -> list[dict[str, Any]]:
    """Receive (short polls) until `count` messages arrived or `timeout` passed."""
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += receive(sqs, url, **extra)
        if len(got) < count:
            time.sleep(0.05)
    return got


def counts(sqs: Any, url: str) -> tuple[int, int, int]:
    """(visible, in flight, delayed)."""
    names = [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
    visible, hidden, delayed = (int(attributes[name]) for name in names)
    return visible, hidden, delayed


def arn_of(sqs: Any, url: str) -> str:
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return arn


def bodies(messages: list[dict[str, Any]]) -> list[str]:
    return [m["Body"] for m in messages]


def test_per_message_delay_holds_each_message_until_its_own_delay(sqs_client: Any, new_queue: Any) -> None:
    # Given a standard queue and a batch whose messages have different DelaySeconds (the sweeper's send)
    url = new_queue()
    sent = time.monotonic()
    response = sqs_client.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "now", "MessageBody": "now", "DelaySeconds": 0},
            {"Id": "two", "MessageBody": "two", "DelaySeconds": 2},
        ],
    )
    assert sorted(ok["Id"] for ok in response["Successful"]) == ["now", "two"]
    assert not response.get("Failed")

    # Then the undelayed one is there at once and the delayed one is counted as delayed, not visible
    first = receive(sqs_client, url)
    assert bodies(first) == ["now"]
    if time.monotonic() - sent < 1.5:  # a loaded machine may take long enough for the delay to end
        assert counts(sqs_client, url) == (0, 1, 1)
        assert receive(sqs_client, url) == []
    # And the delayed one arrives after its delay, not before
    later = receive_until(sqs_client, url, 1, timeout=10)
    assert bodies(later) == ["two"]
    assert time.monotonic() - sent >= 2.0 - 0.05


def test_a_received_message_is_hidden_for_the_visibility_timeout_then_comes_back_counted(
    sqs_client: Any, new_queue: Any
) -> None:
    # Given a queue with a 2 s visibility timeout and one message, received once
    url = new_queue(VisibilityTimeout="2")
    sqs_client.send_message(QueueUrl=url, MessageBody="m")
    (first,) = receive(sqs_client, url)
    received = time.monotonic()
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    assert int(first["Attributes"]["SentTimestamp"]) > 0
    assert int(first["Attributes"]["ApproximateFirstReceiveTimestamp"]) >= int(first["Attributes"]["SentTimestamp"])

    # Then it is in flight (not visible) until the timeout ends
    if time.monotonic() - received < 1.5:
        assert receive(sqs_client, url) == []
        assert counts(sqs_client, url) == (0, 1, 0)
    # And it comes back after it (never before), with a new receipt handle and its receive count at 2
    (again,) = receive_until(sqs_client, url, 1, timeout=10)
    assert time.monotonic() - received >= 2.0 - 0.05
    assert again["MessageId"] == first["MessageId"]
    assert again["ReceiptHandle"] != first["ReceiptHandle"]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert (
        again["Attributes"]["ApproximateFirstReceiveTimestamp"]
        == first["Attributes"]["ApproximateFirstReceiveTimestamp"]
    )


def test_receive_may_override_the_queues_visibility_timeout(sqs_client: Any, new_queue: Any) -> None:
    url = new_queue(VisibilityTimeout="60")
    sqs_client.send_message(QueueUrl=url, MessageBody="m")
    assert len(receive(sqs_client, url, VisibilityTimeout=1)) == 1
    assert len(receive_until(sqs_client, url, 1, timeout=10)) == 1


def test_change_message_visibility_shortens_and_extends_the_hiding(sqs_client: Any, new_queue: Any) -> None:
    # Given two messages received from a queue with a long visibility timeout
    url = new_queue(VisibilityTimeout="60")
    sqs_client.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "a"}, {"Id": "b", "MessageBody": "b"}]
    )
    got = {m["Body"]: m for m in receive_until(sqs_client, url, 2, timeout=5)}
    assert sorted(got) == ["a", "b"]

    # When the worker keeps "a" for 0 s (release now) and "b" for 2 s (a retry backoff)
    sqs_client.change_message_visibility(QueueUrl=url, ReceiptHandle=got["a"]["ReceiptHandle"], VisibilityTimeout=0)
    sqs_client.change_message_visibility(QueueUrl=url, ReceiptHandle=got["b"]["ReceiptHandle"], VisibilityTimeout=2)
    changed = time.monotonic()

    # Then "a" is visible at once, "b" only after its 2 s - long before the queue's 60 s
    assert bodies(receive(sqs_client, url)) == ["a"]
    (b,) = receive_until(sqs_client, url, 1, timeout=10)
    assert b["Body"] == "b"
    assert time.monotonic() - changed >= 2.0 - 0.05
    assert b["Attributes"]["ApproximateReceiveCount"] == "2"


def test_change_message_visibility_extends_past_the_queues_timeout(sqs_client: Any, new_queue: Any) -> None:
    # Given a message received from a queue with a 1 s visibility timeout
    url = new_queue(VisibilityTimeout="1")
    sqs_client.send_message(QueueUrl=url, MessageBody="m")
    (m,) = receive(sqs_client, url)
    # When its visibility is extended to 3 s (a long-running execution's heartbeat)
    sqs_client.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=3)
    changed = time.monotonic()
    time.sleep(1.5)
    # Then it is still hidden after the queue's own timeout, and back after the extension
    if time.monotonic() - changed < 2.5:
        assert receive(sqs_client, url) == []
    assert len(receive_until(sqs_client, url, 1, timeout=10)) == 1
    assert time.monotonic() - changed >= 3.0 - 0.05


def test_change_message_visibility_batch_sets_each_entry_and_reports_a_bad_handle(
    sqs_client: Any, new_queue: Any
) -> None:
    # Given three received messages
    url = new_queue(VisibilityTimeout="60")
    sqs_client.send_message_batch(QueueUrl=url, Entries=[{"Id": x, "MessageBody": x} for x in "abc"])
    got = {m["Body"]: m for m in receive_until(sqs_client, url, 3, timeout=5)}
    assert sorted(got) == ["a", "b", "c"]
    # And "c" deleted, so its receipt handle no longer names a message in flight
    sqs_client.delete_message(QueueUrl=url, ReceiptHandle=got["c"]["ReceiptHandle"])

    # When one ChangeMessageVisibilityBatch releases "a", hides "b" for 2 s and names "c"
    response = sqs_client.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "a", "ReceiptHandle": got["a"]["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "b", "ReceiptHandle": got["b"]["ReceiptHandle"], "VisibilityTimeout": 2},
            {"Id": "c", "ReceiptHandle": got["c"]["ReceiptHandle"], "VisibilityTimeout": 0},
        ],
    )
    changed = time.monotonic()
    # Then "a" and "b" succeed; "c" does not come back, whatever the batch says of it
    assert {"a", "b"} <= {ok["Id"] for ok in response.get("Successful", [])}
    assert bodies(receive(sqs_client, url)) == ["a"]
    (b,) = receive_until(sqs_client, url, 1, timeout=10)
    assert b["Body"] == "b" and time.monotonic() - changed >= 2.0 - 0.05
    time.sleep(0.3)
    assert receive(sqs_client, url) == []


def test_a_deleted_message_never_comes_back(sqs_client: Any, new_queue: Any) -> None:
    url = new_queue(VisibilityTimeout="1")
    sqs_client.send_message_batch(QueueUrl=url, Entries=[{"Id": x, "MessageBody": x} for x in "ab"])
    got = receive_until(sqs_client, url, 2, timeout=5)
    response = sqs_client.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)]
    )
    assert len(response["Successful"]) == 2
    time.sleep(1.5)
    assert receive(sqs_client, url) == []
    assert counts(sqs_client, url) == (0, 0, 0)


def test_redrive_moves_a_message_to_the_dlq_at_max_receive_count(sqs_client: Any, new_queue: Any) -> None:
    # Given a queue that redrives to a DLQ after 2 receives (the ready queue's policy, smaller)
    dlq = new_queue()
    url = new_queue(
        VisibilityTimeout="1",
        RedrivePolicy=json.dumps({"deadLetterTargetArn": arn_of(sqs_client, dlq), "maxReceiveCount": "2"}),
    )
    attributes = {"occurrence_key": {"DataType": "String", "StringValue": "job#2030-01-07T09:00:00Z"}}
    sqs_client.send_message(QueueUrl=url, MessageBody="poison", MessageAttributes=attributes)

    # When a worker receives it twice and never deletes it
    for expected in ("1", "2"):
        (m,) = receive_until(sqs_client, url, 1, timeout=10)
        assert m["Attributes"]["ApproximateReceiveCount"] == expected

    # Then, once its visibility ends, it is not delivered a third time (SQS moves it on that receive attempt)
    time.sleep(1.2)
    assert receive_until(sqs_client, url, 1, timeout=2) == []
    # But lands in the DLQ, body and attributes intact
    (dead,) = receive_until(sqs_client, dlq, 1, timeout=10)
    assert dead["Body"] == "poison"
    assert dead["MessageAttributes"]["occurrence_key"]["StringValue"] == "job#2030-01-07T09:00:00Z"
    assert counts(sqs_client, url) == (0, 0, 0)


def test_message_attributes_and_md5s_round_trip(sqs_client: Any, new_queue: Any) -> None:
    # Given a message with the dispatch's attributes (string, number, binary) and a non-ASCII body
    url = new_queue()
    body = json.dumps({"job_id": "j1", "payload": {"name": "café ✓"}}, ensure_ascii=False)
    response = sqs_client.send_message(
        QueueUrl=url,
        MessageBody=body,
        MessageAttributes={
            "occurrence_key": {"DataType": "String", "StringValue": "j1#2030-01-07T09:00:00Z"},
            "tenant": {"DataType": "String", "StringValue": "tenant-a"},
            "attempt": {"DataType": "Number", "StringValue": "3"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )
    assert response["MD5OfMessageBody"] == hashlib.md5(body.encode()).hexdigest()
    assert response["MD5OfMessageAttributes"]
    # Then it comes back exactly (boto3 itself verifies the MD5s of body and attributes on receive)
    (m,) = receive(sqs_client, url)
    assert m["Body"] == body
    assert m["MD5OfBody"] == response["MD5OfMessageBody"]
    assert m["MD5OfMessageAttributes"] == response["MD5OfMessageAttributes"]
    attributes = m["MessageAttributes"]
    assert attributes["occurrence_key"] == {"DataType": "String", "StringValue": "j1#2030-01-07T09:00:00Z"}
    assert attributes["tenant"]["StringValue"] == "tenant-a"
    assert attributes["attempt"] == {"DataType": "Number", "StringValue": "3"}
    assert attributes["blob"] == {"DataType": "Binary", "BinaryValue": b"\x00\x01"}
    # And a receive that asks for one attribute by name gets only that one
    sqs_client.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
    (named,) = sqs_client.receive_message(QueueUrl=url, MessageAttributeNames=["tenant"])["Messages"]
    assert set(named["MessageAttributes"]) == {"tenant"}


def test_message_group_id_on_a_standard_queue_neither_orders_nor_blocks(sqs_client: Any, new_queue: Any) -> None:
    # Given a standard queue used as a fair queue: every message carries its tenant as MessageGroupId
    url = new_queue(VisibilityTimeout="60")
    response = sqs_client.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": str(i), "MessageBody": str(i), "MessageGroupId": "tenant-a"} for i in range(5)],
    )
    assert len(response["Successful"]) == 5
    # Then all five are delivered at once, while the others of their group are in flight (no FIFO blocking)
    assert sorted(bodies(receive_until(sqs_client, url, 5, timeout=5))) == ["0", "1", "2", "3", "4"]


def test_queue_counts_follow_visible_in_flight_and_delayed(sqs_client: Any, new_queue: Any) -> None:
    url = new_queue(VisibilityTimeout="60")
    sqs_client.send_message_batch(
        QueueUrl=url,
        Entries=[
            *({"Id": f"v{i}", "MessageBody": "visible"} for i in range(4)),
            *({"Id": f"d{i}", "MessageBody": "delayed", "DelaySeconds": 60} for i in range(3)),
        ],
    )
    assert counts(sqs_client, url) == (4, 0, 3)
    got = receive(sqs_client, url, n=3)
    assert len(got) == 3 and set(bodies(got)) == {"visible"}
    assert counts(sqs_client, url) == (1, 3, 3)
    sqs_client.delete_message(QueueUrl=url, ReceiptHandle=got[0]["ReceiptHandle"])
    assert counts(sqs_client, url) == (1, 2, 3)


def test_receive_returns_at_most_max_number_of_messages(sqs_client: Any, new_queue: Any) -> None:
    url = new_queue()
    for start in range(0, 25, 10):
        sqs_client.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(start, min(start + 10, 25))],
        )
    batches = [receive(sqs_client, url, n=10) for _ in range(6)]
    assert all(len(batch) <= 10 for batch in batches)
    assert len(batches[0]) >= 1
    assert sorted(int(b) for batch in batches for b in bodies(batch)) == list(range(25))


def test_long_polling_returns_as_soon_as_a_message_arrives(sqs_client: Any, new_queue: Any) -> None:
    # Given a worker long-polling an empty queue for up to 10 s
    url = new_queue()
    threading.Timer(1.0, lambda: sqs_client.send_message(QueueUrl=url, MessageBody="late")).start()
    started = time.monotonic()
    got = receive(sqs_client, url, wait=10)
    waited = time.monotonic() - started
    # Then the receive returns with the message about when it was sent, not at the end of the wait
    assert bodies(got) == ["late"]
    assert 0.8 <= waited < 5.0


def test_long_polling_waits_on_an_empty_queue(sqs_client: Any, new_queue: Any) -> None:
    url = new_queue()
    started = time.monotonic()
    assert receive(sqs_client, url, wait=2) == []
    assert time.monotonic() - started >= 1.8


def test_fifo_delivers_a_group_in_order_and_one_batch_at_a_time(sqs_client: Any, new_queue: Any) -> None:
    # Given a FIFO queue with two groups of five messages each
    url = new_queue(fifo=True, VisibilityTimeout="2")
    for group in ("g1", "g2"):
        for i in range(5):
            sqs_client.send_message(
                QueueUrl=url, MessageBody=f"{group}-{i}", MessageGroupId=group, MessageDeduplicationId=f"{group}-{i}"
            )
    # When a consumer receives what it can without deleting
    first = receive_until(sqs_client, url, 10, timeout=3)
    # Then each group comes in its send order, and nothing more arrives while they are in flight
    for group in ("g1", "g2"):
        assert [b for b in bodies(first) if b.startswith(group)] == [f"{group}-{i}" for i in range(5)]
    assert receive(sqs_client, url) == []


def test_fifo_keeps_the_order_of_a_group_after_a_visibility_timeout(sqs_client: Any, new_queue: Any) -> None:
    # Given a FIFO group whose first two messages were received and not deleted (an invocation that died)
    url = new_queue(fifo=True, VisibilityTimeout="1")
    for i in range(4):
        sqs_client.send_message(QueueUrl=url, MessageBody=str(i), MessageGroupId="g", MessageDeduplicationId=str(i))
    head = receive(sqs_client, url, n=2)
    assert bodies(head) == ["0", "1"]
    # While they are in flight, the rest of their group is held back
    assert receive(sqs_client, url) == []
    # Then after the timeout the group is redelivered from its head, in order
    again = receive_until(sqs_client, url, 4, timeout=10)
    assert bodies(again) == ["0", "1", "2", "3"]
    assert [m["Attributes"]["ApproximateReceiveCount"] for m in again[:2]] == ["2", "2"]


def test_fifo_deduplicates_by_id_and_by_content(sqs_client: Any, new_queue: Any) -> None:
    # Given a FIFO queue (the sqs target: the occurrence key is the deduplication id)
    url = new_queue(fifo=True)
    first = sqs_client.send_message(
        QueueUrl=url, MessageBody="one", MessageGroupId="g", MessageDeduplicationId="job#2030-01-07T09:00:00Z"
    )
    # When the same occurrence is sent again (a retried delivery), even with another body
    second = sqs_client.send_message(
        QueueUrl=url, MessageBody="one again", MessageGroupId="g", MessageDeduplicationId="job#2030-01-07T09:00:00Z"
    )
    # Then SQS accepts it (no error: the sender cannot tell) but keeps one message, the first
    assert second["MessageId"] and "SequenceNumber" in first
    got = receive_until(sqs_client, url, 2, timeout=1.5)
    assert bodies(got) == ["one"]
    assert got[0]["Attributes"]["MessageDeduplicationId"] == "job#2030-01-07T09:00:00Z"
    assert got[0]["Attributes"]["MessageGroupId"] == "g"

    # And with content-based deduplication the body's hash is the id
    content = new_queue(fifo=True, ContentBasedDeduplication="true")
    for _ in range(2):
        sqs_client.send_message(QueueUrl=content, MessageBody="same", MessageGroupId="g")
    sqs_client.send_message(QueueUrl=content, MessageBody="other", MessageGroupId="g")
    assert bodies(receive_until(sqs_client, content, 3, timeout=1.5)) == ["same", "other"]


def test_a_fifo_queue_without_a_deduplication_id_refuses_the_message(sqs_client: Any, new_queue: Any) -> None:
    url = new_queue(fifo=True)
    with pytest.raises(ClientError) as raised:
        sqs_client.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert "Deduplication" in str(raised.value) or raised.value.response["Error"]["Code"].startswith("InvalidParameter")
