"""Completion events: every terminal outcome of an occurrence, published to an event bus through an outbox.

The ledger write that records a terminal outcome (SUCCEEDED, DEAD, SKIPPED, CANCELLED, RECONCILING) also appends
an outbox entry to the same item, so the outcome and the obligation to announce it are one atomic fact. Then:

1. the worker publishes right after its write and clears the entry (a conditional write: only what it
   published, never an outcome appended since);
2. every sweep drains what is left (`Outbox.drain`): a worker that died between its write and its publish, a
   bus that refused, an outcome recorded by the API (a resolved RECONCILING run). It leaves an item alone until
   its newest outcome is `OUTBOX_SETTLE` old: until then the worker that recorded it is still publishing it, and
   a drain in that moment would publish it a second time (the herd's drains found every outcome in flight).

Publishing is therefore at-least-once: a crash after the publish and before the clear publishes again. Every
event carries `occurrence_key` and `event_id`, so consumers dedupe.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from scheduler.core.errors import EventPublishFailed
from scheduler.core.model.job import RunState
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Clock, EventPublisher, Execution, Ledger, Metrics, OutboxEntry, OutcomeEvent

log = logging.getLogger(__name__)

#: The `source` of every completion event.
EVENT_SOURCE = "punctual.scheduler"
#: The `detail-type` of each terminal outcome.
DETAIL_TYPES: dict[RunState, str] = {
    RunState.SUCCEEDED: "Occurrence Succeeded",
    RunState.DEAD: "Occurrence Dead",
    RunState.SKIPPED: "Occurrence Skipped",
    RunState.CANCELLED: "Occurrence Cancelled",
    RunState.RECONCILING: "Occurrence Reconciling",
}
#: PutEvents takes at most 10 entries per call.
PUBLISH_BATCH = 10
#: Outbox partitions of the sparse index: spreads the index's write load (every outcome passes through it).
OUTBOX_SHARDS = 8
#: How old an item's newest outcome must be before the drain publishes it: well beyond a live worker's write,
#: publish (with its client's timeouts) and clear.
OUTBOX_SETTLE = timedelta(seconds=30)


def event_id(key: str, epoch: int, state: RunState) -> str:
    """The identity of one outcome of an occurrence. A given epoch reaches a given terminal state at most once
    (every terminal write is conditional on the epoch, or on the item not existing), so this is unique."""
    return f"{key}/{epoch}/{state.value}"


def outbox_entry(
    key: str, epoch: int, state: RunState, at: datetime, *, error: str | None = None, result: str | None = None
) -> OutboxEntry:
    return OutboxEntry(
        event_id(key, epoch, state),
        state,
        epoch,
        at,
        error[:1000] if error else None,
        result[:1000] if result else None,
    )


def outbox_shard(key: str) -> int:
    return int.from_bytes(hashlib.sha256(("outbox:" + key).encode()).digest()[:8], "big") % OUTBOX_SHARDS


def outcome_events(execution: Execution) -> list[OutcomeEvent]:
    """The completion events an execution's outbox stands for, oldest first."""
    return [
        OutcomeEvent(
            event_id=entry.event_id,
            occurrence_key=execution.key,
            job_id=execution.job_id,
            tenant=execution.tenant,
            scheduled_for=execution.scheduled_for,
            state=entry.state,
            fencing_token=entry.epoch,
            attempts=execution.attempts,
            finished_at=entry.at,
            error=entry.error,
            result=entry.result,
        )
        for entry in execution.outbox
    ]


def event_detail(event: OutcomeEvent) -> dict[str, Any]:
    """The event's `detail` (JSON)."""
    return {
        "event_id": event.event_id,
        "occurrence_key": event.occurrence_key,
        "job_id": event.job_id,
        "tenant": event.tenant,
        "scheduled_for": rfc3339(event.scheduled_for),
        "state": event.state.value,
        "fencing_token": event.fencing_token,
        "attempts": event.attempts,
        "finished_at": rfc3339(event.finished_at),
        "error": event.error,
        "result": event.result,
    }


@dataclass
class DrainReport:
    found: int = 0
    published: int = 0
    failed: int = 0


class Outbox:
    """Publishes the outbox of ledger items and clears what was published."""

    def __init__(
        self,
        ledger: Ledger,
        publisher: EventPublisher,
        metrics: Metrics,
        clock: Clock,
        settle: timedelta = OUTBOX_SETTLE,
    ) -> None:
        self.ledger = ledger
        self.publisher = publisher
        self.metrics = metrics
        self.clock = clock
        self.settle = settle

    def flush(self, execution: Execution | None) -> bool:
        """Publish one item's pending outcomes (right after the write that recorded them). Never raises: what
        is not published stays in the outbox for the sweeper's drain. Returns whether it was published."""
        if execution is None or not execution.outbox:
            return True
        try:
            self._publish_and_clear([execution])
        except Exception:  # the drain retries it; the caller's outcome stands either way
            log.warning("completion event not published; the sweeper will", extra={"occurrence_key": execution.key})
            self.metrics.count("CompletionEventFailures", len(execution.outbox))
            return False
        return True

    def drain(self, limit: int) -> DrainReport:
        """Publish what the workers left in the outbox (every sweep). Never raises."""
        report = DrainReport()
        try:
            pending = self.ledger.pending_outbox(limit)
        except Exception:
            log.exception("outbox not readable")
            return report
        report.found = sum(len(e.outbox) for e in pending)
        self.metrics.count("OutboxBacklog", report.found)
        settled = self.clock.now() - self.settle
        pending = [e for e in pending if e.outbox[-1].at <= settled]  # the rest: their workers are publishing them
        for start in range(0, len(pending), PUBLISH_BATCH):
            chunk = pending[start : start + PUBLISH_BATCH]
            try:
                report.published += self._publish_and_clear(chunk)
            except Exception:
                log.exception("outbox drain: publish failed", extra={"keys": [e.key for e in chunk]})
                count = sum(len(e.outbox) for e in chunk)
                report.failed += count
                self.metrics.count("CompletionEventFailures", count)
        return report

    def _publish_and_clear(self, executions: Sequence[Execution]) -> int:
        """Publish, then clear. Do not reorder: clearing first would lose an event if the publish then failed."""
        events = [event for execution in executions for event in outcome_events(execution)]
        for start in range(0, len(events), PUBLISH_BATCH):
            self.publisher.publish(events[start : start + PUBLISH_BATCH])
        for execution in executions:
            self.ledger.clear_outbox(execution.key, execution.outbox)
        self.metrics.count("CompletionEventsPublished", len(events))
        return len(events)


__all__ = [
    "DETAIL_TYPES",
    "EVENT_SOURCE",
    "DrainReport",
    "EventPublishFailed",
    "Outbox",
    "event_detail",
    "event_id",
    "outbox_entry",
    "outbox_shard",
    "outcome_events",
]
