"""Feeds the ready queues to the worker handler exactly as the Lambda event source mappings do: receive a batch,
invoke the handler with an SQS event, delete what succeeded, leave what it lists in `batchItemFailures` (their
visibility was set by the handler). Run several for several "containers".

On AWS each priority lane has its own event source mapping with its own maximum concurrency, so the lanes never
compete. Locally one poller serves all three, by priority with aging (`LaneScheduler`): each round takes one
batch from the highest lane that has messages, except that a lane left waiting for `aging_rounds` rounds goes
first. So a lane with visible messages is served at least once every `aging_rounds + 2` rounds, however busy the
lanes above it are: low-priority work waits, but is never starved.

Bounded recovery: the poller receives with the hold time (`lease + margin`, scheduler.core.recovery) as the
visibility, so a worker killed even between the receive and the handler's first hold leaves its batch visible
again within that time. (On AWS the event source mapping receives with the queue's 6x visibility timeout, and the
handler's first instruction shortens it; locally nothing throttles the handler, so the 6x rule has nothing to
protect between the receive and the handler.)
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import boto3

from scheduler.core.recovery import HoldConfig
from scheduler_local.lambda_context import LocalContext

REGION = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
LANES = ("high", "normal", "low")
#: Rounds a lane with waiting messages may be passed over before it goes first.
DEFAULT_AGING_ROUNDS = 4
#: Pause when every lane is empty (short polls, so that no lane waits behind another's long poll).
IDLE_SLEEP_SECONDS = 0.05


def to_event(messages: list[dict[str, Any]], queue_arn: str) -> dict[str, Any]:
    records = []
    for m in messages:
        attributes = {k: str(v) for k, v in (m.get("Attributes") or {}).items()}
        records.append(
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": attributes,
                "messageAttributes": {
                    k: {"stringValue": v.get("StringValue"), "dataType": v.get("DataType", "String")}
                    for k, v in (m.get("MessageAttributes") or {}).items()
                },
                "md5OfBody": m.get("MD5OfBody", ""),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": REGION,
            }
        )
    return {"Records": records}


def poll_once(
    sqs: Any, queue_url: str, queue_arn: str, handler: Any, wait_seconds: int, visibility: int | None = None
) -> int:
    """One batch from one queue through the handler; returns how many messages it received. `visibility`: the
    receive's visibility timeout (None: the queue's)."""
    response = sqs.receive_message(
        QueueUrl=queue_url,
        MaxNumberOfMessages=10,
        WaitTimeSeconds=wait_seconds,
        AttributeNames=["All"],
        MessageAttributeNames=["All"],
        **({"VisibilityTimeout": visibility} if visibility is not None else {}),
    )
    messages = response.get("Messages", [])
    if not messages:
        return 0
    result = handler(to_event(messages, queue_arn), LocalContext("punctual-worker", 120))
    failed = {f["itemIdentifier"] for f in (result or {}).get("batchItemFailures", [])}
    done = [
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
        for i, m in enumerate(messages)
        if m["MessageId"] not in failed
    ]
    if done:
        sqs.delete_message_batch(QueueUrl=queue_url, Entries=done)
    return len(messages)


@dataclass
class LaneScheduler:
    """Which lane to poll, in which order, round after round: priority order, except that a lane passed over for
    `aging_rounds` rounds goes first (the one waiting longest, if several). A lane found empty, or served,
    stops waiting."""

    lanes: Sequence[str]
    aging_rounds: int = DEFAULT_AGING_ROUNDS
    round: int = 0
    last_served: dict[str, int] = field(default_factory=dict)

    def order(self) -> list[str]:
        """The lanes to try this round, first to last; the round ends at the first that yields messages."""
        self.round += 1
        waited = {lane: self.round - self.last_served.get(lane, 0) for lane in self.lanes}
        aged = sorted((lane for lane in self.lanes if waited[lane] > self.aging_rounds), key=lambda lane: -waited[lane])
        return aged + [lane for lane in self.lanes if lane not in aged]

    def served(self, lane: str) -> None:
        """The lane was polled and yielded messages, or was found empty: nothing in it waits on us."""
        self.last_served[lane] = self.round


def serve_round(scheduler: LaneScheduler, poll: Callable[[str], int]) -> str | None:
    """One round: poll lanes in the scheduler's order until one yields messages. Returns that lane, or None."""
    for lane in scheduler.order():
        received = poll(lane)
        scheduler.served(lane)
        if received:
            return lane
    return None


def hold_seconds() -> int:
    """The hold time of the handlers' configuration (the worker's lease plus the margin)."""
    from scheduler.settings import Settings

    return HoldConfig(lease=timedelta(seconds=Settings().lease_seconds)).hold_seconds


def main() -> None:
    from scheduler.handlers.worker import lambda_handler

    urls = {
        "high": os.environ.get("SCHEDULER_READY_QUEUE_HIGH_URL", ""),
        "normal": os.environ["SCHEDULER_READY_QUEUE_URL"],
        "low": os.environ.get("SCHEDULER_READY_QUEUE_LOW_URL", ""),
    }
    urls = {lane: url for lane, url in urls.items() if url}
    sqs = boto3.client("sqs")
    arns = {
        lane: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for lane, url in urls.items()
    }
    scheduler = LaneScheduler(
        [lane for lane in LANES if lane in urls],
        int(os.environ.get("SCHEDULER_LANE_AGING_ROUNDS", str(DEFAULT_AGING_ROUNDS))),
    )
    hold = hold_seconds()
    print(f"worker polling {', '.join(f'{lane}={url}' for lane, url in urls.items())}; hold {hold}s", flush=True)

    def poll(lane: str) -> int:
        return poll_once(sqs, urls[lane], arns[lane], lambda_handler, 0, hold)

    while True:
        try:
            if serve_round(scheduler, poll) is None:
                time.sleep(IDLE_SLEEP_SECONDS)
        except Exception:
            traceback.print_exc(file=sys.stderr)  # the batch stays in the queue and comes back, as on Lambda
            time.sleep(1)


if __name__ == "__main__":
    main()
