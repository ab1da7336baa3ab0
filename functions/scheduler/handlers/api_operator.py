"""The operator's view on the API: `GET /v1/operator/status`, every lane's load and the dispatch lag
(scheduler.adapters.lane_status, the reader behind `punctual status` too), for the tenants listed in the `operators`
setting only. It shows queue depths, the sweep watermark and the metrics every tenant's work adds up to, and no job
of any tenant.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from aws_lambda_powertools.event_handler import Response
from pydantic import BaseModel, Field

from scheduler.adapters import lane_status
from scheduler.adapters.lane_status import CloudWatchMetrics, LogMetrics, MetricsSource, Queues, Status
from scheduler.handlers import wiring
from scheduler.handlers.api_caller import metrics, tenant
from scheduler.handlers.api_problems import Problem
from scheduler.handlers.api_routes import route
from scheduler.handlers.api_views import json_response
from scheduler.settings import Settings


class QueueLoad(BaseModel):
    """One queue's messages (SQS's approximate counts)."""

    visible: int = Field(description="waiting to be received")
    in_flight: int = Field(description="received by a worker and not yet deleted")
    delayed: int = Field(description="sent ahead of their fire time, not yet due")
    oldest_age_seconds: float | None = Field(
        description="the oldest message's age (CloudWatch's latest one-minute maximum); null where unknown"
    )


class LaneLoad(QueueLoad):
    """A priority lane's ready queue."""

    lane: str = Field(description="high, normal or low")
    queue: str = Field(description="the queue's name")


class OperatorStatus(BaseModel):
    """Every lane's load and the dispatch lag: the figures of `punctual status` and the CloudWatch dashboard."""

    checked_at: str = Field(json_schema_extra={"format": "date-time"})
    watermark: str | None = Field(
        json_schema_extra={"format": "date-time"},
        description="the oldest minute not fully swept; null before the first sweep",
    )
    dispatch_lag_seconds: float | None = Field(description="how far the watermark is behind now (0 while ahead)")
    largest_lag_seconds: float | None = Field(
        description="the largest DispatchLagSeconds the sweeper reported over the window; null where unknown"
    )
    lanes: list[LaneLoad] = Field(description="each priority lane's ready queue, high to low")
    ready_queue: QueueLoad | None = Field(description="the lanes together (the oldest age is the oldest of all)")
    dead_letter_queue: QueueLoad | None = Field(description="the dead-letter queue the lanes share")
    recent: dict[str, float] = Field(
        description="sums over the window: OccurrencesDispatched, Retries, TargetFailures, DeadLetters, ..."
    )
    recent_source: str = Field(description="where `recent` came from (CloudWatch, or the local stack's logs)")
    window_seconds: int
    notes: list[str] = Field(description="what this deployment cannot tell")
    problems: list[str] = Field(description="what could not be read (the rest is still shown)")


NOT_AN_OPERATOR = (
    "this principal is not an operator: tenant '{tenant}' is not in the operators setting. The operator's view shows "
    "the load of every tenant's work, so only the tenants listed in `operators` (the CDK context; "
    "SCHEDULER_OPERATORS on the functions, a JSON list of tenant ids) may read it"
)


@route.get(
    "/v1/operator/status",
    summary="every lane's load and the dispatch lag (operators only; no job of any tenant)",
    description=(
        "Each priority lane's ready-queue depth and oldest message, the dead-letter queue, the sweep watermark's lag "
        "behind now and the last hour's metrics: what `punctual status` shows. Only the tenants listed in the "
        "`operators` setting may read it."
    ),
    responses={
        200: ("the lanes and the lag", OperatorStatus),
        403: "not an operator (the detail names the `operators` setting), or a principal that cannot be a tenant",
    },
)
def operator_status() -> Response[str]:
    who = tenant()
    container = wiring.container(metrics)
    settings = container.core.settings
    if who not in settings.operators:
        raise Problem(403, "Forbidden", NOT_AN_OPERATOR.format(tenant=who))
    status = lane_status.collect(
        queues_of(settings),
        dynamodb=container.clients.dynamodb,
        sqs=container.clients.sqs,
        metrics=metrics_source(settings),
        now=container.core.clock.now(),
        source=settings.stack_name or "this deployment",
    )
    return json_response(200, view(status), {"Cache-Control": "no-store"})


def queues_of(settings: Settings) -> Queues:
    lanes = {
        "high": settings.ready_queue_high_url,
        "normal": settings.ready_queue_url,
        "low": settings.ready_queue_low_url,
    }
    return Queues(settings.jobs_table, {lane: url for lane, url in lanes.items() if url}, settings.dlq_url)


def metrics_source(settings: Settings) -> MetricsSource:
    """The local stack's logs where the settings name them, else CloudWatch."""
    if settings.metrics_log_dir:
        return LogMetrics(Path(settings.metrics_log_dir))
    return CloudWatchMetrics(_cloudwatch())


@functools.cache
def _cloudwatch() -> Any:
    """The CloudWatch client, made on the first operator request and kept for the container's life."""
    return wiring.aws_client("cloudwatch")


def view(status: Status) -> dict[str, Any]:
    """The snapshot as the API shows it: each lane a row with its queue's name (the snapshot's other fields map
    one to one; what the model does not name, such as the deployment's name, is left out)."""
    body = status.to_json()
    body["lanes"] = [
        {"lane": lane, "queue": status.queues.get(lane, ""), **depth} for lane, depth in body["lanes"].items()
    ]
    return OperatorStatus.model_validate(body).model_dump(mode="json")
