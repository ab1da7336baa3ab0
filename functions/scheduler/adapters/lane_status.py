"""The operator's view of the lanes: is dispatch keeping up, is work queueing, is anything failing or dead-lettered?

The numbers are the ones the CloudWatch dashboard shows, read with the clients given: the watermark (the oldest
minute not fully swept) from the jobs table, each lane's ready-queue depth and the dead-letter queue's from SQS.
The rest comes from a metrics source: on AWS CloudWatch (the application metrics' sums, the largest
`DispatchLagSeconds` and each ready queue's oldest-message age); on the local stack, where there is no CloudWatch,
the EMF lines (`_aws.CloudWatchMetrics`) its processes write to their logs, which carry no oldest-message age (SQS
cannot be asked for it without receiving messages).

`punctual status` (with the operator's credentials) and `GET /v1/operator/status` (with the api function's) both
read it here. It holds no job and no tenant: only the load of the lanes every tenant shares.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from scheduler.adapters.dynamodb import DynamoTimerStore
from scheduler.core.model.timefmt import minute_of, rfc3339
from scheduler.schema import METRICS_NAMESPACE, SERVICE_NAME

#: Namespace and dimension of the application metrics (what the handlers' Powertools metrics write).
NAMESPACE = METRICS_NAMESPACE
SERVICE = SERVICE_NAME
#: What is counted over the window, in the order the dashboard shows them.
RECENT_METRICS = ("OccurrencesDispatched", "Retries", "TargetFailures", "DeadLetters", "FencedWrites", "LeaseLost")
#: The sweeper's lag behind the watermark at each sweep (scheduler.core.sweep.sweeper): its largest value over the
#: window.
LAG_METRIC = "DispatchLagSeconds"
WINDOW = timedelta(hours=1)
#: Local log files that carry EMF lines (the api processes, the sweepers and each worker).
LOG_PATTERNS = ("worker-*.log", "sweeper.log", "sweeper-*.log", "api.log", "api-*.log")


@dataclass(frozen=True)
class QueueDepth:
    """One queue's messages: waiting to be received, received and not yet deleted, and delayed (not yet due)."""

    visible: int
    in_flight: int
    delayed: int
    oldest_age_seconds: float | None = None


@dataclass(frozen=True)
class Queues:
    """Where the lanes are: the jobs table (its watermark), each priority lane's ready queue (high to low) and the
    dead-letter queue they share."""

    jobs_table: str
    lanes: Mapping[str, str]
    dlq_url: str

    def queue_names(self) -> dict[str, str]:
        """Lane -> its queue's name (the last part of its URL: the `QueueName` dimension of SQS's metrics)."""
        return {lane: queue_name(url) for lane, url in self.lanes.items()}


def queue_name(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[-1]


@dataclass(frozen=True)
class Figures:
    """What a metrics source knows over the window: the sums of RECENT_METRICS, the largest LAG_METRIC (None: not
    reported in the window), and each lane's oldest-message age (absent: the source does not know)."""

    recent: dict[str, float]
    largest_lag_seconds: float | None
    ages: dict[str, float | None]
    source: str


class MetricsSource(Protocol):
    """Where the metrics come from (CloudWatch on AWS, the logs' EMF lines on the local stack)."""

    def figures(self, queue_names: Mapping[str, str], now: datetime) -> Figures: ...

    @property
    def label(self) -> str:
        """What it is, for a problem reading it."""
        ...

    @property
    def notes(self) -> tuple[str, ...]:
        """What it cannot tell, for the notes (e.g. that it has no oldest-message age)."""
        ...


@dataclass
class Status:
    """A snapshot; `problems` lists what could not be read (the rest is still shown)."""

    source: str
    checked_at: datetime
    watermark: datetime | None = None
    dispatch_lag_seconds: float | None = None
    #: The largest dispatch lag the sweeper reported over the window (the metric; None: unknown or none reported).
    largest_lag_seconds: float | None = None
    #: All priority lanes together (what waits to start), and each lane's own depth.
    ready_queue: QueueDepth | None = None
    lanes: dict[str, QueueDepth] = field(default_factory=dict)
    #: Each lane's queue name.
    queues: dict[str, str] = field(default_factory=dict)
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


# -- the local stack: EMF lines in its logs ------------------------------------------------------------------


def emf_values(lines: Iterable[str], names: Iterable[str], since: datetime) -> dict[str, list[float]]:
    """Every value of the named metrics in EMF lines stamped at or after `since`."""
    found: dict[str, list[float]] = {name: [] for name in names}
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
                if name in found:
                    value = record.get(name, 0)
                    found[name] += [float(v) for v in value] if isinstance(value, list) else [float(value)]
    return found


def log_lines(log_dir: Path) -> Iterator[str]:
    for pattern in LOG_PATTERNS:
        for path in sorted(log_dir.glob(pattern)):
            with path.open(errors="replace") as handle:
                yield from handle


@dataclass(frozen=True)
class LogMetrics:
    """The metrics the local stack's processes wrote as EMF lines into `log_dir`."""

    log_dir: Path
    label: str = "EMF metric lines"
    notes: tuple[str, ...] = ("oldest message age is a CloudWatch metric: not available on the local stack",)

    def figures(self, queue_names: Mapping[str, str], now: datetime) -> Figures:
        if not self.log_dir.is_dir():
            raise FileNotFoundError(f"no logs at {self.log_dir}")
        values = emf_values(log_lines(self.log_dir), (*RECENT_METRICS, LAG_METRIC), now - WINDOW)
        recent = {name: float(sum(values[name])) for name in RECENT_METRICS}
        lags = values[LAG_METRIC]
        return Figures(recent, max(lags) if lags else None, {}, f"EMF lines in {self.log_dir}, last hour")


# -- AWS: CloudWatch -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CloudWatchMetrics:
    """The application metrics and SQS's oldest-message ages, in one GetMetricData call."""

    cloudwatch: Any
    label: str = "CloudWatch metrics"
    notes: tuple[str, ...] = ()

    def figures(self, queue_names: Mapping[str, str], now: datetime) -> Figures:
        recent, lag, ages = cloudwatch_figures(self.cloudwatch, RECENT_METRICS, queue_names, now)
        return Figures(recent, lag, ages, "CloudWatch, last hour")


def _application_metric(name: str, period: int, stat: str, query_id: str) -> dict[str, Any]:
    dimensions = [{"Name": "service", "Value": SERVICE}]
    return {
        "Id": query_id,
        "MetricStat": {
            "Metric": {"Namespace": NAMESPACE, "MetricName": name, "Dimensions": dimensions},
            "Period": period,
            "Stat": stat,
        },
        "ReturnData": True,
    }


def cloudwatch_figures(
    cloudwatch: Any, names: Iterable[str], queue_names: Mapping[str, str], now: datetime
) -> tuple[dict[str, float], float | None, dict[str, float | None]]:
    """Sums of the application metrics over the window, the largest dispatch lag in it, and each ready queue's
    oldest-message age (the latest one-minute maximum), by lane, in one GetMetricData call. `queue_names` maps a
    lane to its queue's name."""
    names = list(names)
    window = int(WINDOW.total_seconds())
    queries = [_application_metric(name, window, "Sum", f"m{i}") for i, name in enumerate(names)]
    queries.append(_application_metric(LAG_METRIC, window, "Maximum", "lag"))
    queries += [
        {
            "Id": f"age_{lane}",
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/SQS",
                    "MetricName": "ApproximateAgeOfOldestMessage",
                    "Dimensions": [{"Name": "QueueName", "Value": name}],
                },
                "Period": 60,
                "Stat": "Maximum",
            },
            "ReturnData": True,
        }
        for lane, name in queue_names.items()
    ]
    response = cloudwatch.get_metric_data(
        MetricDataQueries=queries, StartTime=now - WINDOW, EndTime=now, ScanBy="TimestampDescending"
    )
    values: dict[str, list[float]] = {r["Id"]: list(r.get("Values", [])) for r in response["MetricDataResults"]}
    totals = {name: float(sum(values.get(f"m{i}", []))) for i, name in enumerate(names)}
    lags = values.get("lag", [])
    ages = {lane: values.get(f"age_{lane}", []) for lane in queue_names}
    return (
        totals,
        float(max(lags)) if lags else None,
        {lane: (float(found[0]) if found else None) for lane, found in ages.items()},
    )


# -- the snapshot --------------------------------------------------------------------------------------------


def collect(
    queues: Queues, *, dynamodb: Any, sqs: Any, metrics: MetricsSource | None, now: datetime, source: str
) -> Status:
    """Read every figure it can; a source that fails is reported in `problems`, not fatal. Without a metrics
    source the metrics are left unknown (and a note says so)."""
    status = Status(source=source, checked_at=now, queues=queues.queue_names())
    try:
        watermark = DynamoTimerStore(queues.jobs_table, 1, dynamodb).watermark()
        status.watermark = watermark
        if watermark is None:
            status.notes.append("no watermark yet: the sweeper has not run against this table")
        else:
            status.dispatch_lag_seconds = dispatch_lag_seconds(watermark, now)
    except Exception as exc:
        status.problems.append(f"jobs table {queues.jobs_table}: {reason(exc)}")
    for lane, url in queues.lanes.items():
        try:
            status.lanes[lane] = queue_depth(sqs, url)
        except Exception as exc:
            status.problems.append(f"{lane} lane ready queue {url}: {reason(exc)}")
    if status.lanes:
        status.ready_queue = _total(status.lanes.values())
    try:
        status.dead_letter_queue = queue_depth(sqs, queues.dlq_url)
    except Exception as exc:
        status.problems.append(f"dead letter queue {queues.dlq_url}: {reason(exc)}")
    if metrics is None:
        status.notes.append("no metrics source: recent failures and the largest lag unknown")
        return status
    status.notes += metrics.notes
    try:
        figures = metrics.figures(status.queues, now)
    except FileNotFoundError as exc:
        status.notes.append(f"{exc}: recent failures unknown")
        return status
    except Exception as exc:
        status.problems.append(f"{metrics.label}: {reason(exc)}")
        return status
    status.recent, status.recent_source = figures.recent, figures.source
    status.largest_lag_seconds = figures.largest_lag_seconds
    if figures.ages:
        status.lanes = {lane: _aged(depth, figures.ages.get(lane)) for lane, depth in status.lanes.items()}
        if status.ready_queue is not None:
            known = [age for age in figures.ages.values() if age is not None]
            status.ready_queue = _aged(status.ready_queue, max(known) if known else None)
    return status


def _total(depths: Iterable[QueueDepth]) -> QueueDepth:
    depths = list(depths)
    return QueueDepth(sum(d.visible for d in depths), sum(d.in_flight for d in depths), sum(d.delayed for d in depths))


def _aged(depth: QueueDepth, age: float | None) -> QueueDepth:
    return QueueDepth(depth.visible, depth.in_flight, depth.delayed, age)


def reason(exc: Exception) -> str:
    """An AWS error's code and message (else the exception's text), for `problems`."""
    response: Mapping[str, Any] | None = getattr(exc, "response", None)
    if response and isinstance(response.get("Error"), Mapping):
        error = response["Error"]
        return f"{error.get('Code')}: {error.get('Message')}"
    return str(exc) or type(exc).__name__
