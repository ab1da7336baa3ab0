"""The operator's view of the lanes (scheduler.adapters.lane_status): queue depths read from the SQS emulator, the
watermark from DynamoDB Local, and the metrics from CloudWatch (a recording fake) or the local stack's EMF lines."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from scheduler.adapters.dynamodb import DynamoTimerStore
from scheduler.adapters.lane_status import (
    CloudWatchMetrics,
    LogMetrics,
    QueueDepth,
    Queues,
    collect,
)
from scheduler.core.model.timefmt import minute_of
from scheduler.provision import Resources

NOW = datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)


def queues_of(resources: Resources) -> Queues:
    lanes = {"high": resources.ready_queue_high_url, "normal": resources.ready_queue_url,
             "low": resources.ready_queue_low_url}  # fmt: skip
    return Queues(resources.jobs_table, lanes, resources.dlq_url)


def test_depths_come_from_sqs_and_the_lag_from_the_watermark(
    resources: Resources, sqs_client: Any, dynamodb_client: Any
) -> None:
    # Given two messages waiting in the normal lane, one received from the low lane, one dead letter
    for body in ("a", "b"):
        sqs_client.send_message(QueueUrl=resources.ready_queue_url, MessageBody=body)
    sqs_client.send_message(QueueUrl=resources.ready_queue_low_url, MessageBody="c")
    received = sqs_client.receive_message(QueueUrl=resources.ready_queue_low_url, VisibilityTimeout=60)
    assert len(received["Messages"]) == 1
    sqs_client.send_message(QueueUrl=resources.dlq_url, MessageBody="dead")
    # ... and a watermark three minutes behind now
    now = datetime.now(UTC)
    DynamoTimerStore(resources.jobs_table, 1, dynamodb_client).init_watermark(minute_of(now) - timedelta(minutes=3))

    # When the lanes are read (without a metrics source)
    status = collect(queues_of(resources), dynamodb=dynamodb_client, sqs=sqs_client, metrics=None, now=now,
                     source="test")  # fmt: skip

    # Then each lane has its own depth, the total is theirs together, and the lag is the watermark's
    assert status.lanes == {"high": QueueDepth(0, 0, 0), "normal": QueueDepth(2, 0, 0), "low": QueueDepth(0, 1, 0)}
    assert status.ready_queue == QueueDepth(2, 1, 0)
    assert status.dead_letter_queue == QueueDepth(1, 0, 0)
    assert status.queues["high"] == resources.ready_queue_high_url.rsplit("/", 1)[-1]
    assert status.watermark == minute_of(now) - timedelta(minutes=3)
    assert status.dispatch_lag_seconds == 180.0
    assert status.problems == []
    assert any("no metrics source" in note for note in status.notes)


def test_a_table_never_swept_has_no_watermark_and_a_missing_queue_is_a_problem(
    resources: Resources, sqs_client: Any, dynamodb_client: Any
) -> None:
    queues = Queues(resources.jobs_table, {"normal": resources.ready_queue_url + "-gone"}, resources.dlq_url)

    status = collect(queues, dynamodb=dynamodb_client, sqs=sqs_client, metrics=None, now=NOW, source="test")

    assert status.watermark is None and status.dispatch_lag_seconds is None
    assert any("no watermark yet" in note for note in status.notes)
    assert status.lanes == {} and status.ready_queue is None
    assert [p for p in status.problems if p.startswith("normal lane ready queue")]
    assert status.dead_letter_queue == QueueDepth(0, 0, 0)


def emf_line(at: datetime, **values: float | list[float]) -> str:
    metrics = [{"Name": name, "Unit": "Count"} for name in values]
    meta = {"Timestamp": int(at.timestamp() * 1000), "CloudWatchMetrics": [
        {"Namespace": "Punctual", "Dimensions": [["service"]], "Metrics": metrics}]}  # fmt: skip
    return json.dumps({"_aws": meta, "service": "punctual", **values}) + "\n"


class NoAws:
    """Clients for the tests that are only about the metrics: the table and queues answer as empty."""

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        return {}

    def get_queue_attributes(self, **kwargs: Any) -> dict[str, Any]:
        return {"Attributes": {}}


QUEUES = Queues("jobs", {"high": "https://sqs/1/p-high", "normal": "https://sqs/1/p-ready"}, "https://sqs/1/p-dlq")


def test_on_the_local_stack_the_metrics_are_the_emf_lines_of_the_last_hour(tmp_path: Path) -> None:
    (tmp_path / "sweeper.log").write_text(
        emf_line(NOW - timedelta(minutes=5), DispatchLagSeconds=[12.0, 75.0])
        + emf_line(NOW - timedelta(hours=2), DispatchLagSeconds=900.0, DeadLetters=4.0)  # outside the window
        + "not a metric line\n"
    )
    # a second sweeper process (SCHEDULER_LOCAL_SWEEPERS=2) writes its own log
    (tmp_path / "sweeper-2.log").write_text(emf_line(NOW - timedelta(minutes=2), OccurrencesDispatched=4.0))
    (tmp_path / "worker-1.log").write_text(emf_line(NOW - timedelta(minutes=1), Retries=2.0, DeadLetters=1.0))
    (tmp_path / "api-2.log").write_text(emf_line(NOW - timedelta(minutes=1), OccurrencesDispatched=3.0))

    status = collect(QUEUES, dynamodb=NoAws(), sqs=NoAws(), metrics=LogMetrics(tmp_path), now=NOW, source="local")

    assert status.largest_lag_seconds == 75.0
    assert status.recent["DeadLetters"] == 1.0 and status.recent["Retries"] == 2.0
    assert status.recent["OccurrencesDispatched"] == 7.0
    assert status.recent_source == f"EMF lines in {tmp_path}, last hour"
    assert all(depth.oldest_age_seconds is None for depth in status.lanes.values())
    assert any("oldest message age" in note for note in status.notes)


def test_without_logs_the_metrics_are_unknown_and_said_to_be(tmp_path: Path) -> None:
    status = collect(QUEUES, dynamodb=NoAws(), sqs=NoAws(), metrics=LogMetrics(tmp_path / "none"), now=NOW,
                     source="local")  # fmt: skip

    assert status.recent == {} and status.largest_lag_seconds is None
    assert any(note.startswith(f"no logs at {tmp_path / 'none'}") for note in status.notes)
    assert status.problems == []


class FakeCloudWatch:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.queries: list[dict[str, Any]] = []

    def get_metric_data(self, **kwargs: Any) -> dict[str, Any]:
        if self.fail:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not allowed"}}, "GetMetricData")
        self.queries = kwargs["MetricDataQueries"]
        values = {"lag": [30.0, 240.0], "age_high": [5.0, 9.0], "age_normal": [], "m3": [1.0, 2.0]}
        return {"MetricDataResults": [{"Id": q["Id"], "Values": values.get(q["Id"], [])} for q in self.queries]}


def test_on_aws_cloudwatch_gives_the_largest_lag_and_each_lanes_oldest_message() -> None:
    cloudwatch = FakeCloudWatch()

    status = collect(QUEUES, dynamodb=NoAws(), sqs=NoAws(), metrics=CloudWatchMetrics(cloudwatch), now=NOW,
                     source="aws")  # fmt: skip

    assert status.largest_lag_seconds == 240.0
    assert status.lanes["high"].oldest_age_seconds == 5.0  # the newest one-minute maximum
    assert status.lanes["normal"].oldest_age_seconds is None
    assert status.ready_queue is not None and status.ready_queue.oldest_age_seconds == 5.0
    assert status.recent["DeadLetters"] == 3.0
    lag = next(q for q in cloudwatch.queries if q["Id"] == "lag")["MetricStat"]
    assert (lag["Metric"]["MetricName"], lag["Stat"], lag["Period"]) == ("DispatchLagSeconds", "Maximum", 3600)
    ages = [q["MetricStat"]["Metric"]["Dimensions"] for q in cloudwatch.queries if q["Id"].startswith("age_")]
    assert ages == [[{"Name": "QueueName", "Value": "p-high"}], [{"Name": "QueueName", "Value": "p-ready"}]]


def test_a_metrics_source_that_fails_is_a_problem_not_an_error() -> None:
    status = collect(QUEUES, dynamodb=NoAws(), sqs=NoAws(), metrics=CloudWatchMetrics(FakeCloudWatch(fail=True)),
                     now=NOW, source="aws")  # fmt: skip

    assert status.problems == ["CloudWatch metrics: AccessDenied: not allowed"]
    assert set(status.lanes) == {"high", "normal"}
