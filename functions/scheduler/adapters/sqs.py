"""The SQS ready queue and its dead-letter queue."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3

from scheduler.adapters.dispatch_message import dispatch_to_body, message_to_body
from scheduler.core.execution.packing import PackingConfig, pack
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch, Execution

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

MAX_DELAY_SECONDS = 900
BATCH = 10
#: The largest body of a message that carries several occurrences: 10 of them stay under SQS's 256 KiB a request.
MAX_PACKED_BYTES = 24 * 1024
SEND_ATTEMPTS = 4


class QueueSendFailed(RuntimeError):
    """Some messages were not accepted after retries; the caller re-runs its step (sends are idempotent in
    effect: the ledger absorbs the duplicates)."""


def send_batch(client: Any, queue_url: str, entries: Mapping[str, dict[str, Any]]) -> list[str]:
    """One SendMessageBatch of `entries` (by entry id), the refused entries tried again up to SEND_ATTEMPTS times in
    all. Returns the message ids SQS gave them; raises QueueSendFailed if some stay refused."""
    pending = dict(entries)
    sent: list[str] = []
    response: dict[str, Any] = {}
    for _ in range(SEND_ATTEMPTS):
        response = client.send_message_batch(QueueUrl=queue_url, Entries=list(pending.values()))
        for ok in response.get("Successful", []):
            pending.pop(ok["Id"], None)
            sent.append(ok.get("MessageId", ""))
        if not pending:
            return sent
    failed = response.get("Failed", [])
    raise QueueSendFailed(f"{len(pending)} messages not accepted: {failed[:3]}")


def delay_seconds(fire_at: datetime, now: datetime) -> int:
    """Whole seconds SQS should hold the message: rounded down, so the message arrives at most a second
    early and the worker waits out the rest (never starts early, keeps sub-second precision)."""
    return max(0, min(MAX_DELAY_SECONDS, math.floor((fire_at - now).total_seconds())))


class SqsReadyQueue:
    """The ready queues: one per priority lane (`lanes`: priority -> queue URL; a lane without a URL uses
    `queue_url`, the normal lane), and the DLQ they share. Standard queues used as SQS fair queues: every message
    carries its tenant as `MessageGroupId`."""

    def __init__(
        self,
        queue_url: str,
        dlq_url: str,
        client: SQSClient | None = None,
        lanes: Mapping[str, str] | None = None,
        *,
        message_key: bytes,
        packing: PackingConfig | None = None,
    ) -> None:
        self.queue_url = queue_url
        #: How occurrences share messages (scheduler.core.execution.packing; one a message with `occurrences=1`).
        self.packing = packing or PackingConfig()
        #: Every body sent carries an HMAC under this key (scheduler.adapters.dispatch_message.dispatch_to_body).
        self.message_key = message_key
        self.dlq_url = dlq_url
        self.client: Any = client or boto3.client("sqs")
        self.lanes = {priority: url for priority, url in (lanes or {}).items() if url}

    def lane_url(self, priority: str) -> str:
        return self.lanes.get(priority, self.queue_url)

    def queue_url_of(self, queue_arn: str) -> str:
        """The URL of the lane a message came from (its event source ARN), for visibility changes."""
        name = queue_arn.rsplit(":", 1)[-1]
        for url in (self.queue_url, *self.lanes.values()):
            if url.rstrip("/").rsplit("/", 1)[-1] == name:
                return url
        return self.queue_url

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        by_lane: dict[str, list[tuple[list[Dispatch], str]]] = {}
        for message in pack(dispatches, self.packing):
            by_lane.setdefault(self.lane_url(message[0].priority), []).extend(self._bodies(message))
        for url, lane in by_lane.items():
            self._send(url, lane, now)

    def _bodies(self, message: list[Dispatch]) -> list[tuple[list[Dispatch], str]]:
        """`message` as it is sent, each part with its body: halved until each body is at most MAX_PACKED_BYTES
        (job copies can be 4 KiB), so that 10 of them fit one request."""
        body = message_to_body(message, self.message_key)
        if len(message) == 1 or len(body) <= MAX_PACKED_BYTES:
            return [(message, body)]
        half = len(message) // 2
        return self._bodies(message[:half]) + self._bodies(message[half:])

    def _send(self, queue_url: str, messages: Sequence[tuple[list[Dispatch], str]], now: datetime) -> None:
        started = time.monotonic()
        for start in range(0, len(messages), BATCH):
            # Each request's delays from the time it is made: a long send must not land its last messages late.
            at = now + timedelta(seconds=time.monotonic() - started)
            pending = {
                str(i): {
                    "Id": str(i),
                    "MessageBody": body,
                    # A message lands with its first (earliest) occurrence; the others at most the spread early.
                    "DelaySeconds": delay_seconds(m[0].send_at, at),
                    # SQS fair queues: the tenant is the message group, so a tenant with a backlog in flight
                    # does not raise the dwell time of the others' messages (standard queues: no ordering).
                    "MessageGroupId": m[0].tenant,
                    "MessageAttributes": {
                        "occurrence_key": {"DataType": "String", "StringValue": m[0].key},
                        "tenant": {"DataType": "String", "StringValue": m[0].tenant},
                        **({"occurrences": {"DataType": "Number", "StringValue": str(len(m))}} if len(m) > 1 else {}),
                    },
                }
                for i, (m, body) in enumerate(messages[start : start + BATCH])
            }
            send_batch(self.client, queue_url, pending)

    def dead_letter(self, dispatch: Dispatch, execution: Execution) -> None:
        body = {
            "dispatch": json.loads(dispatch_to_body(replace(dispatch, job_copy=None), self.message_key)),
            "state": execution.state.value,
            "attempts": execution.attempts,
            "last_error": execution.last_error,
            "history": [entry.view() for entry in execution.history],
            "dead_at": rfc3339(execution.finished_at) if execution.finished_at else None,
        }
        self.client.send_message(
            QueueUrl=self.dlq_url,
            MessageBody=json.dumps(body, separators=(",", ":"), default=str),
            MessageAttributes={"occurrence_key": {"DataType": "String", "StringValue": dispatch.key}},
        )


@dataclass(eq=False)
class SqsMessage:
    """MessageControl for one message of a Lambda SQS event."""

    client: Any
    queue_url: str
    receipt_handle: str
    receive_count: int

    def extend_visibility(self, seconds: int) -> None:
        self.client.change_message_visibility(
            QueueUrl=self.queue_url, ReceiptHandle=self.receipt_handle, VisibilityTimeout=seconds
        )


class SqsBatchVisibility:
    """BatchVisibility for one batch of a Lambda SQS event: ChangeMessageVisibilityBatch, up to 10 entries per
    request and lane. `messages` maps each message id to its (queue URL, receipt handle)."""

    def __init__(self, client: Any, messages: Mapping[str, tuple[str, str]]) -> None:
        self.client = client
        self.messages = dict(messages)

    def hold(self, message_ids: Sequence[str], seconds: int) -> list[str]:
        by_queue: dict[str, list[str]] = {}
        for message_id in message_ids:
            by_queue.setdefault(self.messages[message_id][0], []).append(message_id)
        refused: list[str] = []
        for queue_url, ids in by_queue.items():
            for start in range(0, len(ids), BATCH):
                chunk = ids[start : start + BATCH]
                response = self.client.change_message_visibility_batch(
                    QueueUrl=queue_url,
                    Entries=[
                        {"Id": str(n), "ReceiptHandle": self.messages[mid][1], "VisibilityTimeout": seconds}
                        for n, mid in enumerate(chunk)
                    ],
                )
                refused += [chunk[int(failed["Id"])] for failed in response.get("Failed", [])]
        return refused
