"""The sweeper Lambda: triggered every minute by EventBridge; one sweep per invocation (docs/design.md §3.3)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from scheduler.core.model.timefmt import rfc3339
from scheduler.handlers import prescaling, wiring

logger = wiring.handler_logger()
metrics = Metrics()


def sweep_once(remaining_ms: int, owner: str) -> dict[str, Any]:
    """Run one sweep that stops before `remaining_ms` runs out; returns its report."""
    container = wiring.container(metrics)
    deadline = datetime.now(UTC) + timedelta(milliseconds=remaining_ms)
    report = container.core.sweeper(owner).sweep(deadline)
    summary = {
        "dispatched": report.dispatched,
        "buckets_done": report.buckets_done,
        "buckets_busy": report.buckets_busy,
        "late_drained": report.late_drained,
        "watermark": rfc3339(report.watermark) if report.watermark else None,
        "dispatch_lag_seconds": report.lag_seconds,
        "stopped_early": report.stopped_early,
        "outbox_backlog": report.outbox_backlog,
        "completion_events_published": report.events_published,
        "backfill_dispatched": report.backfill_dispatched,
        **prescaling.after_sweep(container),
    }
    logger.info("sweep finished", extra=summary)
    return summary


@wiring.lambda_context(logger)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    owner = f"sweeper/{context.aws_request_id or uuid.uuid4().hex}"
    return sweep_once(context.get_remaining_time_in_millis(), owner)
