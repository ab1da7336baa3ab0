"""`punctual status`: is dispatch keeping up, is work queueing, is anything failing or dead-lettered?

The figures are read by `scheduler.adapters.lane_status` (the same reader behind `GET /v1/operator/status`), here
with the operator's own credentials: the watermark from the jobs table and queue depths from SQS, both here and on
AWS; the failure counts, the largest dispatch lag and the oldest-message ages from CloudWatch on AWS, and locally
from the EMF lines the local stack's processes write to their logs (which carry no oldest-message age).
"""

from __future__ import annotations

from datetime import UTC, datetime

from punctual_cli.config import Deployment
from punctual_sdk.models import OperatorStatus, QueueLoad
from scheduler.adapters.lane_status import (
    LAG_METRIC,
    NAMESPACE,
    RECENT_METRICS,
    SERVICE,
    WINDOW,
    CloudWatchMetrics,
    LogMetrics,
    MetricsSource,
    QueueDepth,
    Queues,
    Status,
    dispatch_lag_seconds,
    queue_depth,
)
from scheduler.adapters.lane_status import collect as collect_lanes
from scheduler.core.model.timefmt import minute_of, rfc3339

__all__ = [
    "LAG_METRIC",
    "NAMESPACE",
    "RECENT_METRICS",
    "SERVICE",
    "WINDOW",
    "QueueDepth",
    "Status",
    "collect",
    "dispatch_lag_seconds",
    "from_operator_view",
    "queue_depth",
    "render",
]


def collect(deployment: Deployment, now: datetime | None = None) -> Status:
    """The deployment's lanes and lag (scheduler.adapters.lane_status), read with the operator's credentials:
    metrics from CloudWatch on AWS, from the local stack's logs locally."""
    metrics: MetricsSource | None
    if deployment.on_aws:
        metrics = CloudWatchMetrics(deployment.client("cloudwatch"))
    else:
        metrics = LogMetrics(deployment.log_dir) if deployment.log_dir is not None else None
    queues = Queues(deployment.jobs_table, deployment.ready_queues(), deployment.dlq_url)
    return collect_lanes(
        queues,
        dynamodb=deployment.client("dynamodb"),
        sqs=deployment.client("sqs"),
        metrics=metrics,
        now=now or datetime.now(UTC),
        source=deployment.description,
    )


def from_operator_view(view: OperatorStatus, source: str) -> Status:
    """The API's operator view (`GET /v1/operator/status`, read by `punctual status --via-api`) as the snapshot
    `collect` makes: the same figures, read by the api function with its own grants."""

    def depth(load: QueueLoad) -> QueueDepth:
        return QueueDepth(load.visible, load.in_flight, load.delayed, load.oldest_age_seconds)

    return Status(
        source=source,
        checked_at=view.checked_at,
        watermark=view.watermark,
        dispatch_lag_seconds=view.dispatch_lag_seconds,
        largest_lag_seconds=view.largest_lag_seconds,
        ready_queue=depth(view.ready_queue) if view.ready_queue else None,
        lanes={lane.lane: depth(lane) for lane in view.lanes},
        queues={lane.lane: lane.queue for lane in view.lanes},
        dead_letter_queue=depth(view.dead_letter_queue) if view.dead_letter_queue else None,
        recent=dict(view.recent),
        recent_source=view.recent_source,
        notes=list(view.notes),
        problems=list(view.problems),
    )


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def render(status: Status) -> str:
    """The human view: one line per figure, then notes and what could not be read."""
    rows: list[tuple[str, str]] = []
    if status.watermark is not None and status.dispatch_lag_seconds is not None:
        ahead = (status.watermark - minute_of(status.checked_at)).total_seconds()
        where = f"{_duration(ahead)} ahead of now" if ahead > 0 else "behind now"
        rows.append(
            (
                "dispatch lag",
                f"{_duration(status.dispatch_lag_seconds)} (watermark {rfc3339(status.watermark)}, {where})",
            )
        )
    else:
        rows.append(("dispatch lag", "unknown"))
    queues: list[tuple[str, QueueDepth | None, bool]] = [("ready queue", status.ready_queue, True)]
    if len(status.lanes) > 1:
        queues += [(f"  {lane} lane", depth, True) for lane, depth in status.lanes.items()]
    queues.append(("dead-letter queue", status.dead_letter_queue, False))
    for label, depth, aged in queues:
        if depth is None:
            rows.append((label, "unknown"))
            continue
        text = f"{depth.visible} waiting, {depth.in_flight} in flight, {depth.delayed} delayed"
        if aged:
            age = _duration(depth.oldest_age_seconds) if depth.oldest_age_seconds is not None else "n/a"
            text += f"; oldest message {age}"
        rows.append((label, text))
    largest = status.largest_lag_seconds
    rows.append(("largest lag, 1 h", _duration(largest) if largest is not None else "unknown"))
    if status.recent:
        rows.append(("last hour", ", ".join(f"{name} {value:g}" for name, value in status.recent.items())))
        rows.append(("metrics from", status.recent_source))
    else:
        rows.append(("last hour", "unknown"))
    width = max(len(label) for label, _ in rows)
    lines = [f"punctual status: {status.source} at {rfc3339(status.checked_at)}"]
    lines += [f"  {label:<{width}}  {text}" for label, text in rows]
    lines += [f"  note: {note}" for note in status.notes]
    lines += [f"  could not read {problem}" for problem in status.problems]
    return "\n".join(lines)
