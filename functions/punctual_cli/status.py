"""The operator's view: is dispatch keeping up, is work queueing, is anything failing or dead-lettered?

The numbers are the ones the CloudWatch dashboard shows. The watermark (the oldest minute not fully swept)
is read from the jobs table and queue depths from SQS, both here and on AWS. Oldest-message age and the
failure counts are CloudWatch metrics on AWS; locally there is no CloudWatch, so the counts are summed from
the EMF lines (`_aws.CloudWatchMetrics`) the processes write to their logs, and the age is not available
(SQS cannot be asked for it without receiving messages).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from punctual_cli.config import Deployment
from scheduler.adapters.dynamodb import DynamoTimerStore
from scheduler.core.timefmt import minute_of, rfc3339

#: Namespace and dimension of the application metrics (infra/metrics.py, infra/environment.py).
NAMESPACE = "Punctual"
SERVICE = "punctual"
#: What `status` counts over the window, in the order the dashboard shows them.
RECENT_METRICS = ("OccurrencesDispatched", "Retries", "TargetFailures", "DeadLetters", "FencedWrites", "LeaseLost")
WINDOW = timedelta(hours=1)
#: Local log files that carry EMF lines (the api, the sweeper and each worker).
LOG_PATTERNS = ("worker-*.log", "sweeper.log", "api.log")


@dataclass(frozen=True)
class QueueDepth:
    visible: int
    in_flight: int
    delayed: int
    oldest_age_seconds: float | None = None


@dataclass
class Status:
    """A snapshot; `problems` lists what could not be read (the rest is still shown)."""

    source: str
    checked_at: datetime
    watermark: datetime | None = None
    dispatch_lag_seconds: float | None = None
    #: All priority lanes together (what waits to start), and each lane's own depth.
    ready_queue: QueueDepth | None = None
    lanes: dict[str, QueueDepth] = field(default_factory=dict)
    dead_letter_queue: QueueDepth | None = None
    recent: dict[str, float] = field(default_factory=dict)
    recent_source: str = ""
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["checked_at"] = rfc3339(self.checked_at)
        body["watermark"] = rfc3339(self.watermark) if self.watermark else None
        body["window_seconds"] = int(WINDOW.total_seconds())
        return body


def dispatch_lag_seconds(watermark: datetime, now: datetime) -> float:
    """How far the oldest minute not fully swept is behind now; 0 while the sweeper is ahead (as the sweeper
    reports `DispatchLagSeconds`)."""
    return max(0.0, (minute_of(now) - watermark).total_seconds())


def queue_depth(sqs: Any, queue_url: str) -> QueueDepth:
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return QueueDepth(
        int(attributes.get("ApproximateNumberOfMessages", 0)),
        int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
        int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
    )


def emf_totals(lines: Iterable[str], names: Iterable[str], since: datetime) -> dict[str, float]:
    """Sum the values of the named metrics in EMF lines stamped at or after `since`."""
    wanted = set(names)
    totals = dict.fromkeys(names, 0.0)
    since_ms = since.timestamp() * 1000
    for line in lines:
        if '"_aws"' not in line:
            continue
        try:
            record = json.loads(line)
            meta = record["_aws"]
            if float(meta["Timestamp"]) < since_ms:
                continue
            directives = meta["CloudWatchMetrics"]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            continue
        for directive in directives:
            if directive.get("Namespace") != NAMESPACE:
                continue
            for metric in directive.get("Metrics", []):
                name = metric.get("Name")
                if name in wanted:
                    value = record.get(name, 0)
                    totals[name] += sum(float(v) for v in value) if isinstance(value, list) else float(value)
    return totals


def log_lines(log_dir: Path) -> Iterable[str]:
    for pattern in LOG_PATTERNS:
        for path in sorted(log_dir.glob(pattern)):
            with path.open(errors="replace") as handle:
                yield from handle


def cloudwatch_figures(
    cloudwatch: Any, names: Iterable[str], queue_names: Mapping[str, str], now: datetime
) -> tuple[dict[str, float], dict[str, float | None]]:
    """Sums of the application metrics over the window, and each ready queue's oldest-message age (the latest
    one-minute maximum), by lane, in one GetMetricData call. `queue_names` maps a lane to its queue's name."""
    names = list(names)
    queries: list[dict[str, Any]] = [
        {
            "Id": f"m{i}",
            "MetricStat": {
                "Metric": {
                    "Namespace": NAMESPACE,
                    "MetricName": name,
                    "Dimensions": [{"Name": "service", "Value": SERVICE}],
                },
                "Period": int(WINDOW.total_seconds()),
                "Stat": "Sum",
            },
            "ReturnData": True,
        }
        for i, name in enumerate(names)
    ]
    queries += [
        {
            "Id": f"age_{lane}",
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/SQS",
                    "MetricName": "ApproximateAgeOfOldestMessage",
                    "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
                },
                "Period": 60,
                "Stat": "Maximum",
            },
            "ReturnData": True,
        }
        for lane, queue_name in queue_names.items()
    ]
    response = cloudwatch.get_metric_data(
        MetricDataQueries=queries, StartTime=now - WINDOW, EndTime=now, ScanBy="TimestampDescending"
    )
    values: dict[str, list[float]] = {r["Id"]: list(r.get("Values", [])) for r in response["MetricDataResults"]}
    totals = {name: float(sum(values.get(f"m{i}", []))) for i, name in enumerate(names)}
    ages = {lane: values.get(f"age_{lane}", []) for lane in queue_names}
    return totals, {lane: (float(found[0]) if found else None) for lane, found in ages.items()}


def collect(deployment: Deployment, now: datetime | None = None) -> Status:
    """Read every figure it can; a source that fails is reported in `problems`, not fatal."""
    now = now or datetime.now(UTC)
    status = Status(source=deployment.description, checked_at=now)
    try:
        watermark = DynamoTimerStore(deployment.jobs_table, 1, deployment.client("dynamodb")).watermark()
        status.watermark = watermark
        if watermark is None:
            status.notes.append("no watermark yet: the sweeper has not run against this table")
        else:
            status.dispatch_lag_seconds = dispatch_lag_seconds(watermark, now)
    except Exception as exc:
        status.problems.append(f"jobs table {deployment.jobs_table}: {_reason(exc)}")
    sqs = deployment.client("sqs")
    lanes = deployment.ready_queues()
    for lane, url in lanes.items():
        try:
            status.lanes[lane] = queue_depth(sqs, url)
        except Exception as exc:
            status.problems.append(f"{lane} lane ready queue {url}: {_reason(exc)}")
    if status.lanes:
        status.ready_queue = _total(status.lanes.values())
    try:
        status.dead_letter_queue = queue_depth(sqs, deployment.dlq_url)
    except Exception as exc:
        status.problems.append(f"dead letter queue {deployment.dlq_url}: {_reason(exc)}")
    if deployment.on_aws:
        try:
            names = {lane: url.rstrip("/").rsplit("/", 1)[-1] for lane, url in lanes.items()}
            totals, ages = cloudwatch_figures(deployment.client("cloudwatch"), RECENT_METRICS, names, now)
            status.recent, status.recent_source = totals, "CloudWatch, last hour"
            status.lanes = {lane: _aged(depth, ages.get(lane)) for lane, depth in status.lanes.items()}
            if status.ready_queue is not None:
                known = [age for age in ages.values() if age is not None]
                status.ready_queue = _aged(status.ready_queue, max(known) if known else None)
        except Exception as exc:
            status.problems.append(f"CloudWatch metrics: {_reason(exc)}")
    else:
        status.notes.append("oldest message age is a CloudWatch metric: not available on the local stack")
        if deployment.log_dir is not None and deployment.log_dir.is_dir():
            status.recent = emf_totals(log_lines(deployment.log_dir), RECENT_METRICS, now - WINDOW)
            status.recent_source = f"EMF lines in {deployment.log_dir}, last hour"
        else:
            status.notes.append(f"no logs at {deployment.log_dir}: recent failures unknown")
    return status


def _total(depths: Iterable[QueueDepth]) -> QueueDepth:
    depths = list(depths)
    return QueueDepth(sum(d.visible for d in depths), sum(d.in_flight for d in depths), sum(d.delayed for d in depths))


def _aged(depth: QueueDepth, age: float | None) -> QueueDepth:
    return QueueDepth(depth.visible, depth.in_flight, depth.delayed, age)


def _reason(exc: Exception) -> str:
    response: Mapping[str, Any] | None = getattr(exc, "response", None)
    if response and isinstance(response.get("Error"), Mapping):
        error = response["Error"]
        return f"{error.get('Code')}: {error.get('Message')}"
    return str(exc) or type(exc).__name__


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
