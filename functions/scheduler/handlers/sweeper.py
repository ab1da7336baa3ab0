"""The sweeper Lambda: triggered every minute by EventBridge (a tick); one sweep per invocation (docs/design.md §3.3).

A tick first decides its fan-out (scheduler.core.capacity.fan_out) and starts that many more sweeps of the same
function beside itself (asynchronous invokes, `scheduler.adapters.sweep_launchers`); those sweep buckets only and
never start others.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from scheduler.adapters.sweep_launchers import helper_of
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import HelperSweep
from scheduler.handlers import prescaling, wiring

logger = wiring.handler_logger()
metrics = Metrics()


def sweep_once(remaining_ms: int, owner: str, helper: HelperSweep | None = None) -> dict[str, Any]:
    """Run one sweep that stops before `remaining_ms` runs out; returns its report. `helper`: a fan-out sweep."""
    container = wiring.container(metrics)
    deadline = datetime.now(UTC) + timedelta(milliseconds=remaining_ms)
    fan_out = container.fan_out()
    if helper is None:
        decision = fan_out.start(owner, container.core.stores.timers.watermark())
        sweeps, fan_out_summary = decision.sweeps, {"fan_out": decision.sweeps, "fan_out_reason": decision.reason}
        if decision.sweeps > 1:
            fan_out_summary["fan_out_due_in_window"] = decision.due_in_window
    else:
        sweeps, fan_out_summary = helper.sweeps, {"fan_out_of": helper.tick, "fan_out_index": helper.index}
    report = container.core.sweeper(owner).sweep(deadline, buckets_only=helper is not None)
    asked = fan_out.finish(report.stopped_early, sweeps)
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
        **fan_out_summary,
        **({"fan_out_asked": asked} if asked else {}),
        **(prescaling.after_sweep(container) if helper is None else {}),
    }
    logger.info("sweep finished", extra=summary)
    return summary


@wiring.lambda_context(logger)
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    owner = f"sweeper/{context.aws_request_id or uuid.uuid4().hex}"
    return sweep_once(context.get_remaining_time_in_millis(), owner, helper_of(event))
