"""Completion events on an EventBridge bus (locally: the moto server's EventBridge)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import boto3

from scheduler.core.errors import EventPublishFailed
from scheduler.core.execution.events import DETAIL_TYPES, EVENT_SOURCE, PUBLISH_BATCH, event_detail
from scheduler.core.ports import OutcomeEvent

#: Entries PutEvents refused (throttled, internal errors) are sent again this many times before giving up.
PUT_ATTEMPTS = 3


class EventBridgePublisher:
    """`EventPublisher` on PutEvents: `source` "punctual.scheduler", `detail-type` "Occurrence Succeeded" (etc.),
    `detail.occurrence_key` and `detail.event_id` for consumers to dedupe on."""

    def __init__(self, bus_name: str, client: Any | None = None, source: str = EVENT_SOURCE) -> None:
        self.bus_name = bus_name
        self.source = source
        self.client: Any = client or boto3.client("events")

    def entry(self, event: OutcomeEvent) -> dict[str, Any]:
        return {
            "Source": self.source,
            "DetailType": DETAIL_TYPES[event.state],
            "Detail": json.dumps(event_detail(event), separators=(",", ":")),
            "EventBusName": self.bus_name,
            "Time": event.finished_at,
            # Resources must be ARNs; the occurrence is named in the detail instead.
        }

    def publish(self, events: Sequence[OutcomeEvent]) -> None:
        for start in range(0, len(events), PUBLISH_BATCH):
            pending = [self.entry(e) for e in events[start : start + PUBLISH_BATCH]]
            failures: list[dict[str, Any]] = []
            for _ in range(PUT_ATTEMPTS):
                response = self.client.put_events(Entries=pending)
                if not response.get("FailedEntryCount"):
                    failures = []
                    break
                # Results are positional: an entry with an ErrorCode was refused, the others were accepted.
                results = response.get("Entries", [])
                failures = [r for r in results if r.get("ErrorCode")]
                pending = [entry for entry, r in zip(pending, results, strict=False) if r.get("ErrorCode")]
                if not pending:
                    break
            if failures:
                codes = sorted({str(f.get("ErrorCode")) for f in failures})
                raise EventPublishFailed(f"{len(failures)} completion events refused by {self.bus_name}: {codes}")
