"""The worker Lambda: SQS event source mapping with partial batch responses (docs/design.md §3.4).

A message the executor wants kept (retry backoff, early arrival, someone else's live lease) has its visibility
changed and is reported in `batchItemFailures`, so SQS keeps it and delivers it again when it is due. A body
that is not a dispatch goes straight to the DLQ and is acknowledged, so it cannot poison the batch.

A message may carry several occurrences (`scheduler.core.execution.packing`): they run at once on a pool shared by the
batch, and the message is acknowledged once each is recorded, final, or sent again as a message of its own.

While the invocation runs, the batch is held for a short hold time only (`scheduler.core.execution.recovery`): one
ChangeMessageVisibilityBatch when it arrives, renewed by a heartbeat, so a worker that dies leaves its records
visible again within the hold time (20 s), not the queue's visibility timeout.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from scheduler import schema
from scheduler.adapters.dispatch_message import MalformedMessage, UnauthenticatedMessage, dispatches_from_body
from scheduler.adapters.sqs import SqsMessage
from scheduler.adapters.threads import SharedTaskPool
from scheduler.core.execution.packing import MessageRunner
from scheduler.core.execution.recovery import HeldBatch
from scheduler.core.ports import Dispatch
from scheduler.handlers import wiring

logger = wiring.handler_logger()
metrics = Metrics()
#: Records of one batch handled at once (the event source mapping's batch size is at most this; see infra).
RECORD_THREADS = 10
#: Runs the occurrences of the batch's messages that carry several (beside the record threads).
occurrences = SharedTaskPool(schema.WORKER_OCCURRENCE_THREADS, name="occurrence")


class ConcurrentBatchProcessor(BatchProcessor):
    """Handles the records of a batch concurrently, one thread each, results in record order. Each record runs
    the same protocol as a Lambda of its own: two copies of one occurrence key in one batch race on the ledger's
    conditional claim exactly as two invocations do (one claims, the other finds it running and is kept)."""

    def __init__(self, threads: int, **options: Any) -> None:
        super().__init__(**options)
        self.threads = threads

    def process(self) -> list[tuple[Any, ...]]:
        if self.threads <= 1 or len(self.records) <= 1:
            return super().process()
        with ThreadPoolExecutor(max_workers=min(self.threads, len(self.records)), thread_name_prefix="record") as pool:
            return list(pool.map(self._process_record, self.records))


# A batch whose every record is kept (all early, all waiting for a retry or a tenant's slot) is a normal outcome,
# not an error: report the items, do not fail the invocation (that would count as a Lambda error and alarm).
processor = ConcurrentBatchProcessor(RECORD_THREADS, event_type=EventType.SQS, raise_on_entire_batch_failure=False)


#: The batch this invocation holds (bounded recovery); a record leaves it before its own visibility is set.
_held: HeldBatch | None = None


class KeepMessage(Exception):
    """Report the record as failed so SQS keeps it (its visibility was already set)."""


def hold_batch(event: dict[str, Any]) -> HeldBatch:
    """The event's records, held for the hold time while this invocation lives (renewed in the background)."""
    container = wiring.container(metrics)
    records = event.get("Records") or []
    messages = {
        r["messageId"]: (container.queue.queue_url_of(r.get("eventSourceARN") or ""), r["receiptHandle"])
        for r in records
    }
    keys = {
        r["messageId"]: ((r.get("messageAttributes") or {}).get("occurrence_key") or {}).get("stringValue")
        for r in records
    }
    return container.held_batch(messages, keys)


def release(record: SQSRecord) -> None:
    """The record is settled: the batch's renewals leave it alone from now on."""
    if _held is not None:
        _held.release(record.message_id)


def bind(dispatch: Dispatch) -> None:
    """Per thread: the records (and the occurrences of a message) run concurrently, each logging its own."""
    logger.thread_safe_append_keys(job_id=dispatch.job_id, occurrence_key=dispatch.key)


def runner() -> MessageRunner:
    container = wiring.container(metrics)
    return container.core.message_runner(container.executor(wiring.instance_id()), pool=occurrences, bind=bind)


def handle_record(record: SQSRecord) -> str:
    container = wiring.container(metrics)
    try:
        accept_unsigned = container.core.settings.accept_unsigned_messages
        dispatches = dispatches_from_body(record.body, container.message_key, accept_unsigned=accept_unsigned)
    except MalformedMessage as exc:
        # Forged or planted (no HMAC, or a wrong one) or unreadable: never run; kept in the DLQ for an operator,
        # where redrive refuses it too (it checks the same HMAC).
        forged = isinstance(exc, UnauthenticatedMessage)
        what = "unauthenticated" if forged else "malformed"
        logger.error(f"{what} message sent to the DLQ", extra={"message_id": record.message_id, "error": str(exc)})
        container.queue.client.send_message(
            QueueUrl=container.core.settings.dlq_url,
            MessageBody=json.dumps({what: record.body[:200_000], "error": str(exc)}),
        )
        metrics.add_metric(name="DeadLetters", unit="Count", value=1)
        if forged:
            metrics.add_metric(name="UnauthenticatedMessages", unit="Count", value=1)
        return what
    receive_count = int(record.attributes.approximate_receive_count or 1)
    # The message's own lane: its visibility is changed on the queue it came from.
    queue_url = container.queue.queue_url_of(record.event_source_arn or "")
    message = SqsMessage(container.queue.client, queue_url, record.receipt_handle, receive_count)
    # The lease's renewals change the message's visibility through the client that gives up fast (wiring).
    renewing = replace(message, client=container.clients.renewal_sqs or container.queue.client)
    outcome = runner().run(dispatches, renewing)
    if outcome.ack:
        return outcome.reason
    release(record)
    message.extend_visibility(outcome.hide_seconds)
    raise KeepMessage(f"{outcome.reason}: back in {outcome.hide_seconds}s")


@wiring.lambda_context(logger)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    global _held
    with hold_batch(event) as held:
        _held = held
        try:
            response = process_partial_response(
                event=event, record_handler=handle_record, processor=processor, context=context
            )
        finally:
            _held = None
    return dict(response)
