"""`punctual dlq list|redrive`: the redrive of `scheduler.ops.redrive`, pointed at a local or deployed stack.

Listing is a dry run of the redrive (each message is read, matched with its ledger state, and made visible
again), so `list` shows exactly what `redrive` would do.
"""

from __future__ import annotations

from collections.abc import Callable

from punctual_cli.config import Deployment
from punctual_cli.status import queue_depth
from scheduler.adapters.dynamodb import DynamoLedger
from scheduler.adapters.sqs import SqsReadyQueue
from scheduler.ops.redrive import RedriveLine, SqsDeadLetters, redrive


def dead_letter_count(deployment: Deployment) -> int:
    """Messages in the DLQ (approximate: SQS counts are eventually consistent)."""
    depth = queue_depth(deployment.client("sqs"), deployment.dlq_url)
    return depth.visible + depth.in_flight


def run_redrive(
    deployment: Deployment,
    *,
    dry_run: bool,
    limit: int,
    purge_refused: bool = False,
    progress: Callable[[RedriveLine], None] = lambda line: None,
) -> list[RedriveLine]:
    """Redrive (or with `dry_run`, only list) up to `limit` dead letters; `progress` sees each one."""
    sqs = deployment.client("sqs")
    key = deployment.message_key()
    return redrive(
        SqsDeadLetters(deployment.dlq_url, sqs, message_key=key),
        DynamoLedger(deployment.executions_table, deployment.client("dynamodb")),
        SqsReadyQueue(
            deployment.ready_queue_url, deployment.dlq_url, sqs, lanes=deployment.lane_queue_urls, message_key=key
        ),
        dry_run=dry_run,
        limit=limit,
        purge_refused=purge_refused,
        progress=progress,
    )


def outcome_of(line: RedriveLine) -> str:
    """A short outcome for progress counts: redriven, would redrive, refused, unreadable."""
    return line.action.split(":", 1)[0].split(" (", 1)[0]
