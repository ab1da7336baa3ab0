"""The test scheduler's AWS side: moto's DynamoDB and SQS, the project's tables and queues on them, the worker that
takes ready-queue messages as the worker Lambda does, and what the virtual clock needs to know of them (when the
next message becomes visible, which sweeps can find something)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from scheduler.adapters.codec import BACKFILL_PK, backfill_from_item, timer_from_item
from scheduler.adapters.dispatch_message import MalformedMessage, dispatches_from_body
from scheduler.adapters.sqs import SqsMessage
from scheduler.core.execution.executor import Executor
from scheduler.core.execution.packing import MessageRunner
from scheduler.core.model.job import BackfillState
from scheduler.core.model.timefmt import minute_of
from scheduler.handlers import wiring
from scheduler.provision import Resources, provision
from scheduler.settings import Settings

REGION = "us-east-1"
ONE_MINUTE = timedelta(minutes=1)
#: Messages the worker takes at one virtual instant at most: more means one keeps coming back at once (a loop).
MAX_AT_ONE_INSTANT = 10_000


@dataclass(frozen=True)
class Pending:
    """What the sweeps have still to find: the earliest bucket minute with timers at or after the watermark, and
    whether something needs a sweep every minute (a timer in the late lane, a running backfill)."""

    earliest: datetime | None
    every_minute: bool


@dataclass
class Moto:
    """moto's clients (on AWS's own endpoints, so that AWS_ENDPOINT_URL_* in the environment cannot send them to a
    real or emulated service) and the resources of one test scheduler."""

    dynamodb: Any
    sqs: Any
    events: Any
    resources: Resources | None = None

    @classmethod
    @contextmanager
    def started(cls) -> Iterator[Moto]:
        """moto's mock for the block (inside a test's own `mock_aws` it shares that one's state)."""
        import boto3
        from moto import mock_aws

        with mock_aws():

            def make(service: str) -> Any:
                return boto3.client(  # type: ignore[call-overload]
                    service,
                    region_name=REGION,
                    endpoint_url=f"https://{service}.{REGION}.amazonaws.com",
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",
                )

            yield cls(make("dynamodb"), make("sqs"), make("events"))

    def provision(self) -> Resources:
        """The tables and queues, created by the project's own provisioning under a prefix of their own."""
        self.resources = provision(f"punctual-test-{uuid.uuid4().hex[:8]}", self.dynamodb, self.sqs, events=self.events)
        return self.resources

    def worker(self, container: wiring.AwsContainer, executor: Executor) -> Worker:
        return Worker(self, container, container.core.message_runner(executor))

    # -- what the clock needs to know -------------------------------------------------------------------------

    def _queue(self, url: str) -> Any:
        from moto.sqs.models import sqs_backends

        path = urlsplit(url).path.strip("/").split("/")
        return sqs_backends[path[0]][REGION].queues[path[1]]

    def lanes(self) -> list[str]:
        r = self.resources
        assert r is not None
        return [url for url in (r.ready_queue_high_url, r.ready_queue_url, r.ready_queue_low_url) if url]

    def next_landing(self, now: datetime) -> datetime | None:
        """When the next ready-queue message becomes visible (its delay or visibility timeout runs out), if later
        than `now`. moto keeps both in milliseconds; a message is visible once the clock is past them."""
        at_ms = now.timestamp() * 1000
        later = [
            ready
            for url in self.lanes()
            for message in self._queue(url)._messages
            if (ready := max(message.visible_at, message.delayed_until)) >= at_ms
        ]
        if not later:
            return None
        return datetime.fromtimestamp((min(later) + 1) / 1000, UTC)

    def pending(self, settings: Settings, watermark: datetime | None) -> Pending:
        """Read the jobs table for the timers, late timers and backfills the sweeps have to deal with."""
        request: dict[str, Any] = {
            "TableName": settings.jobs_table,
            "FilterExpression": "begins_with(PK, :due) OR begins_with(PK, :late) OR PK = :backfill",
            "ExpressionAttributeValues": {
                ":due": {"S": "DUE#"},
                ":late": {"S": "LATE#"},
                ":backfill": {"S": BACKFILL_PK},
            },
        }
        earliest: datetime | None = None
        every_minute = False
        while True:
            page = self.dynamodb.scan(**request)
            for item in page.get("Items", []):
                kind = item["PK"]["S"]
                if kind.startswith("LATE#"):
                    every_minute = True
                elif kind == BACKFILL_PK:
                    every_minute |= backfill_from_item(item).state == BackfillState.RUNNING
                else:
                    minute = minute_of(timer_from_item(item).due_at)
                    if (watermark is None or minute >= watermark) and (earliest is None or minute < earliest):
                        earliest = minute
            if not page.get("LastEvaluatedKey"):
                return Pending(earliest, every_minute)
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def next_useful_sweep(
        self, next_sweep: datetime, container: wiring.AwsContainer, settings: Settings
    ) -> datetime | None:
        """The first sweep instant (a minute boundary, not before `next_sweep`) at which a sweep finds something:
        the next one while a late timer or a backfill waits; else the first whose look-ahead reaches the earliest
        timer's bucket; None when there is nothing to find."""
        pending = self.pending(settings, container.core.stores.timers.watermark())
        if pending.every_minute:
            return next_sweep
        if pending.earliest is None:
            return None
        first = pending.earliest - timedelta(seconds=settings.lookahead_seconds)
        return max(next_sweep, _ceil_minute(first))

    def skip_empty_minutes(self, at: datetime, container: wiring.AwsContainer, settings: Settings) -> None:
        """Before the sweep at `at`: move the watermark over the buckets the sweeps skipped since the last one would
        have found empty (up to the earliest bucket with timers), as those sweeps would have."""
        timers = container.core.stores.timers
        mark = timers.watermark()
        reach = minute_of(at - ONE_MINUTE + timedelta(seconds=settings.lookahead_seconds)) + ONE_MINUTE
        earliest = self.pending(settings, mark).earliest
        target = reach if earliest is None else min(reach, earliest)
        if mark is None or target > mark:
            timers.advance_watermark(target)

    def dead_letters(self, dlq_url: str) -> list[dict[str, Any]]:
        """The DLQ's bodies, read from moto without receiving them."""
        found: list[dict[str, Any]] = []
        for message in self._queue(dlq_url)._messages:
            try:
                found.append(json.loads(message.body))
            except ValueError:
                found.append({"body": message.body})
        return found


def _ceil_minute(when: datetime) -> datetime:
    minute = minute_of(when)
    return minute if minute == when else minute + ONE_MINUTE


class Worker:
    """The worker Lambda's part (`scheduler.handlers.worker.handle_record`) on each visible ready-queue message:
    read the dispatch (its HMAC checked), run its occurrences through the executor, delete it when acknowledged,
    else set its visibility to the executor's backoff so SQS delivers it again then."""

    def __init__(self, moto: Moto, container: wiring.AwsContainer, runner: MessageRunner) -> None:
        self.moto, self.container, self.runner = moto, container, runner

    def drain(self) -> int:
        """Handle every message visible now, lane by lane; returns how many."""
        handled = 0
        for url in self.moto.lanes():
            while True:
                got = self.moto.sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0, AttributeNames=["All"]
                ).get("Messages", [])
                if not got:
                    break
                for message in got:
                    self._handle(url, message)
                handled += len(got)
                if handled > MAX_AT_ONE_INSTANT:
                    raise RuntimeError(
                        f"more than {MAX_AT_ONE_INSTANT} messages at one virtual instant: a message keeps coming "
                        "back at once (a receiver or handler that never lets its occurrence finish?)"
                    )
        return handled

    def _handle(self, url: str, message: dict[str, Any]) -> None:
        settings = self.container.core.settings
        sqs = self.moto.sqs
        try:
            dispatches = dispatches_from_body(
                message["Body"], self.container.message_key, accept_unsigned=settings.accept_unsigned_messages
            )
        except MalformedMessage as exc:
            sqs.send_message(
                QueueUrl=settings.dlq_url, MessageBody=json.dumps({"malformed": message["Body"], "error": str(exc)})
            )
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            return
        receive_count = int((message.get("Attributes") or {}).get("ApproximateReceiveCount", "1"))
        control = SqsMessage(sqs, url, message["ReceiptHandle"], receive_count)
        outcome = self.runner.run(dispatches, control)
        if outcome.ack:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        else:
            control.extend_visibility(outcome.hide_seconds)
