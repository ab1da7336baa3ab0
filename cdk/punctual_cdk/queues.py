"""The ready queues (one per priority lane) and their dead-letter queue, sized from `scheduler.schema.READY_LANES`."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from scheduler.schema import READY_LANES, READY_QUEUE, QueueSchema

#: The maximum. The default (4 days) would silently drop dispatched occurrences if the workers were
#: down for longer, which breaks the "an accepted job is never lost" promise; retention costs nothing.
READY_QUEUE_RETENTION = Duration.days(14)
#: SQS-managed keys (SSE-SQS): encrypted at rest with no key policy to maintain, and senders (the
#: sweeper, the API) need no KMS permissions.
ENCRYPTION = sqs.QueueEncryption.SQS_MANAGED


class Queues(Construct):
    """The ready queues (standard; the sweeper and the API send, the worker consumes), one per priority lane, and
    the DLQ they share. `ready_queue` is the `normal` lane (the ready queue from before lanes existed)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        schema: QueueSchema = READY_QUEUE,
        lanes: Mapping[str, QueueSchema] = READY_LANES,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = _build_dead_letter_queue(self, schema)
        self.lanes: dict[str, sqs.Queue] = {
            priority: _build_ready_queue(self, lane, self.dead_letter_queue) for priority, lane in lanes.items()
        }
        self.ready_queue = self.lanes["normal"]


def _build_dead_letter_queue(scope: Construct, schema: QueueSchema) -> sqs.Queue:
    return sqs.Queue(
        scope,
        "DeadLetter",
        encryption=ENCRYPTION,
        enforce_ssl=True,
        retention_period=Duration.days(schema.dlq_retention_days),
    )


def _build_ready_queue(scope: Construct, schema: QueueSchema, dead_letter_queue: sqs.Queue) -> sqs.Queue:
    return sqs.Queue(
        scope,
        schema.logical_name,
        encryption=ENCRYPTION,
        enforce_ssl=True,
        # 6x the worker timeout (AWS guidance for event source mappings), so a batch that is retried
        # after a throttle does not become visible again while a worker still holds it.
        visibility_timeout=Duration.seconds(schema.visibility_timeout_seconds),
        retention_period=READY_QUEUE_RETENTION,
        # Receives include the worker's deliberate hand-backs (a live lease elsewhere, retry backoff),
        # hence the generous count; occurrences that exhaust their retries are dead-lettered explicitly.
        dead_letter_queue=sqs.DeadLetterQueue(max_receive_count=schema.max_receive_count, queue=dead_letter_queue),
    )
