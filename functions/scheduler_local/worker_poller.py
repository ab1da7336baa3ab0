"""Feeds the ready queues to the worker handler exactly as the Lambda event source mappings do: receive a batch,
invoke the handler with an SQS event, delete what succeeded, leave what it lists in `batchItemFailures` (their
visibility was set by the handler). Run several for several "containers".

On AWS each priority lane has its own event source mapping with its own maximum concurrency, so the lanes never
compete. Locally one poller serves all three, by priority with aging (`LaneScheduler`): each round takes one
batch from the highest lane that has messages, except that a lane left waiting for `aging_rounds` rounds goes
first. So a lane with visible messages is served at least once every `aging_rounds + 2` rounds, however busy the
lanes above it are: low-priority work waits, but is never starved.

Bounded recovery: the poller receives with the hold time (scheduler.core.execution.recovery) as the visibility, so a
worker killed even between the receive and the handler's first hold leaves its batch visible again within that
time. (On AWS the event source mapping receives with the queue's 6x visibility timeout, and the
handler's first instruction shortens it; locally nothing throttles the handler, so the 6x rule has nothing to
protect between the receive and the handler.)

Each poller handles a batch's records concurrently - the worker Lambda's own handler does (10 threads), as on AWS;
`ConcurrentBatch` (SCHEDULER_LOCAL_WORKER_THREADS threads) does it for a handler that would not - so one slow
target does not hold up the other nine. The supervisor runs several pollers and adds more while the queues are deep
(`scheduler_local.scaling`); SIGTERM makes a poller finish its batch and exit (how the supervisor scales down).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import boto3

from scheduler.core.execution.recovery import HoldConfig
from scheduler.handlers.local_invocation import LocalContext

REGION = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
LANES = ("high", "normal", "low")
#: Rounds a lane with waiting messages may be passed over before it goes first.
DEFAULT_AGING_ROUNDS = 4
#: Pause when every lane is empty (short polls, so that no lane waits behind another's long poll); it doubles
#: with each empty round up to the maximum, so idle pollers do not keep the emulator busy.
IDLE_SLEEP_SECONDS = 0.05
MAX_IDLE_SLEEP_SECONDS = 0.2
#: Records of one batch handled at once, by default (a batch is at most 10 messages).
DEFAULT_THREADS = 10


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


class ConcurrentBatch:
    """A batch handler with the worker Lambda's contract (SQS event in, `batchItemFailures` out) that runs the
    worker's record handler on the batch's records concurrently: a record whose handler raises (the handler's
    "keep this message", or an error) is reported as failed, as Powertools' batch processor reports it. The
    handler's metrics are flushed once per batch, from this thread, after every record finished. `around` wraps
    the whole batch as the handler wraps it (the worker holds the batch's messages meanwhile)."""

    def __init__(
        self,
        record_handler: Callable[[Any], Any],
        threads: int,
        flush: Callable[[], None] | None = None,
        keep: type[Exception] | None = None,
        around: Callable[[dict[str, Any]], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.record_handler = record_handler
        self.pool = ThreadPoolExecutor(max(1, threads), thread_name_prefix="record")
        self.flush = flush
        self.keep = keep
        self.around = around or (lambda event: nullcontext())

    def _one(self, record: dict[str, Any]) -> bool:
        from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

        try:
            self.record_handler(SQSRecord(record))
            return True
        except Exception as exc:
            if self.keep is None or not isinstance(exc, self.keep):
                traceback.print_exc(file=sys.stderr)
            return False

    def __call__(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        records = event["Records"]
        with self.around(event):
            handled = list(self.pool.map(self._one, records))
        if self.flush is not None:
            self.flush()
        return {
            "batchItemFailures": [
                {"itemIdentifier": record["messageId"]} for record, ok in zip(records, handled, strict=True) if not ok
            ]
        }


def batch_handler(threads: int) -> Callable[[dict[str, Any], Any], dict[str, Any]]:
    """The handler a poller feeds: the worker Lambda itself when it handles a batch's records concurrently (it
    does: `ConcurrentBatchProcessor`, as on AWS) or when one thread is asked for; otherwise its record handler on
    `threads` threads (`ConcurrentBatch`, for a worker handler that handles records one after another)."""
    from scheduler.handlers import worker

    if threads <= 1 or getattr(worker.processor, "threads", 1) > 1:
        return worker.lambda_handler

    @contextmanager
    def held(event: dict[str, Any]) -> Iterator[None]:
        # What worker.lambda_handler does around its records: hold the batch, let the records release theirs
        with worker.hold_batch(event) as batch:
            worker._held = batch
            try:
                yield
            finally:
                worker._held = None

    return ConcurrentBatch(worker.handle_record, threads, worker.metrics.flush_metrics, worker.KeepMessage, held)


def stop_on_sigterm() -> threading.Event:
    """SIGTERM sets the returned event: the poller finishes the batch in hand and exits (scaling down)."""
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    return stopping


def idle_sleep(empty_rounds: int) -> float:
    return float(min(MAX_IDLE_SLEEP_SECONDS, IDLE_SLEEP_SECONDS * 2 ** max(0, empty_rounds - 1)))


def main() -> None:
    threads = int(os.environ.get("SCHEDULER_LOCAL_WORKER_THREADS", str(DEFAULT_THREADS)))
    handler = batch_handler(threads)
    stopping = stop_on_sigterm()

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
    hold = HoldConfig().hold_seconds
    print(
        f"worker polling {', '.join(f'{lane}={url}' for lane, url in urls.items())}; hold {hold}s; {threads} threads",
        flush=True,
    )

    def poll(lane: str) -> int:
        return poll_once(sqs, urls[lane], arns[lane], handler, 0, hold)

    empty_rounds = 0
    while not stopping.is_set():
        try:
            if serve_round(scheduler, poll) is None:
                empty_rounds += 1
                time.sleep(idle_sleep(empty_rounds))
            else:
                empty_rounds = 0
        except Exception:
            traceback.print_exc(file=sys.stderr)  # the batch stays in the queue and comes back, as on Lambda
            time.sleep(1)
    print("worker stopping (SIGTERM): its last batch is done", flush=True)


if __name__ == "__main__":
    main()
