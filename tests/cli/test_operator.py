"""Configuration (where the API and the stack are), progress lines, and the operator status built from the
same metrics as the dashboard. No network."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from punctual_cli.client import BearerAuth, SigV4Auth
from punctual_cli.config import connection, read_stack_file, resolve_api_url
from punctual_cli.progress import Progress
from punctual_cli.status import RECENT_METRICS, QueueDepth, Status, dispatch_lag_seconds, render
from scheduler.adapters.lane_status import LogMetrics

pytestmark = pytest.mark.usefixtures("no_network")

NOW = datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC)


def write_stack_env(state_dir: Path, api_url: str) -> None:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "stack.env").write_text(
        f"export SCHEDULER_API_URL={api_url}\nexport SCHEDULER_DLQ_URL='http://127.0.0.1:5000/123/p-dlq'\n"
    )


def test_the_stack_file_is_read_from_json_or_from_shell_exports(tmp_path: Path) -> None:
    write_stack_env(tmp_path, "http://127.0.0.1:9999")
    assert read_stack_file(tmp_path) == {
        "SCHEDULER_API_URL": "http://127.0.0.1:9999",
        "SCHEDULER_DLQ_URL": "http://127.0.0.1:5000/123/p-dlq",
    }
    (tmp_path / "stack.json").write_text(json.dumps({"SCHEDULER_API_URL": "http://127.0.0.1:7777"}))
    assert read_stack_file(tmp_path) == {"SCHEDULER_API_URL": "http://127.0.0.1:7777"}
    assert read_stack_file(tmp_path / "nowhere") is None


def test_the_api_url_comes_from_the_flag_then_the_stack_then_the_environment_then_the_local_stack(
    tmp_path: Path,
) -> None:
    write_stack_env(tmp_path, "http://127.0.0.1:9999")
    outputs = {"ApiUrl": "https://abc.execute-api.eu-west-1.amazonaws.com/prod/"}
    env = {"PUNCTUAL_API_URL": "http://env:1"}

    assert resolve_api_url("http://flag:1", outputs, env, tmp_path)[0] == "http://flag:1"
    assert resolve_api_url(None, outputs, env, tmp_path)[0] == outputs["ApiUrl"]
    assert resolve_api_url(None, None, env, tmp_path)[0] == "http://env:1"
    assert resolve_api_url(None, None, {}, tmp_path)[0] == "http://127.0.0.1:9999"
    assert resolve_api_url(None, None, {}, tmp_path / "none")[0] == "http://127.0.0.1:8080"


def test_bearer_locally_and_sigv4_for_an_execute_api_host(tmp_path: Path) -> None:
    class Session:
        region_name = "us-east-1"

    local = connection(api=None, token=None, aws=False, state_dir=tmp_path, environ={"PUNCTUAL_TOKEN": "t-bob"})
    assert isinstance(local.auth, BearerAuth)
    assert local.auth.token == "t-bob"
    assert local.api_url == "http://127.0.0.1:8080"

    remote = connection(api="https://abc.execute-api.eu-west-1.amazonaws.com/prod", token=None, aws=False,
                        state_dir=tmp_path, session=Session(), environ={})  # fmt: skip
    assert isinstance(remote.auth, SigV4Auth)
    assert remote.auth.region == "eu-west-1"

    forced = connection(api="https://api.example.com", token=None, aws=True, state_dir=tmp_path, session=Session(),
                        environ={})  # fmt: skip
    assert isinstance(forced.auth, SigV4Auth)
    assert forced.auth.region == "us-east-1"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_in_a_log_is_a_line_per_interval_and_one_at_the_end() -> None:
    clock, stream = FakeClock(), io.StringIO()
    progress = Progress("submitting", stream, 100, interval=2.0, clock=clock)

    for i in range(100):
        clock.now = i * 0.1  # 10 s in all
        progress.advance("failed" if i % 10 == 0 else "created")
    progress.finish()

    lines = stream.getvalue().splitlines()
    assert 4 <= len(lines) <= 6
    assert lines[-1].startswith("submitting: 100/100 (100%) - 90 created, 10 failed")
    assert "\r" not in stream.getvalue()


def test_progress_on_a_terminal_redraws_one_line() -> None:
    clock, stream = FakeClock(), Terminal()
    progress = Progress("redriving", stream, 3, approximate=True, clock=clock)

    for i in range(5):  # more than the approximate total: the total follows
        clock.now = i * 1.0
        progress.advance("redriven")
    progress.finish()

    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert text.rstrip("\n").split("\r")[-1].startswith("\x1b[Kredriving: 5/~5 (100%) - 5 redriven")


def emf(at: datetime, namespace: str = "Punctual", **values: float | list[float]) -> str:
    return json.dumps({
        "_aws": {"Timestamp": int(at.timestamp() * 1000), "CloudWatchMetrics": [
            {"Namespace": namespace, "Dimensions": [["service"]], "Metrics": [{"Name": n, "Unit": "Count"}
                                                                              for n in values]}]},
        "service": "punctual", **values,
    })  # fmt: skip


def test_recent_counts_are_summed_from_emf_lines_within_the_window(tmp_path: Path) -> None:
    lines = [
        "worker polling http://127.0.0.1:1/q",
        emf(NOW - timedelta(hours=2), DeadLetters=5.0),  # outside the window
        emf(NOW - timedelta(minutes=10), Retries=[1.0, 1.0], TargetFailures=2.0),
        emf(NOW - timedelta(minutes=5), DeadLetters=1.0, FencedWrites=1.0),
        emf(NOW - timedelta(minutes=5), namespace="Other", DeadLetters=9.0),
        '{"level": "INFO", "message": "not a metric"}',
        '{"_aws": broken',
    ]

    (tmp_path / "worker-1.log").write_text("\n".join(lines) + "\n")

    totals = LogMetrics(tmp_path).figures({}, NOW).recent

    assert totals == {"OccurrencesDispatched": 0.0, "Retries": 2.0, "TargetFailures": 2.0, "DeadLetters": 1.0,
                      "FencedWrites": 1.0, "LeaseLost": 0.0}  # fmt: skip


def test_dispatch_lag_is_zero_while_the_watermark_is_ahead() -> None:
    assert dispatch_lag_seconds(datetime(2026, 1, 5, 9, 5, tzinfo=UTC), NOW) == 0.0
    assert dispatch_lag_seconds(datetime(2026, 1, 5, 8, 57, tzinfo=UTC), NOW) == 180.0


def test_the_status_view_says_what_it_knows_and_what_it_cannot() -> None:
    status = Status(
        source="local stack (.local)",
        checked_at=NOW,
        watermark=datetime(2026, 1, 5, 9, 5, tzinfo=UTC),
        dispatch_lag_seconds=0.0,
        ready_queue=QueueDepth(3, 1, 12),
        lanes={"high": QueueDepth(0, 0, 0), "normal": QueueDepth(1, 1, 2), "low": QueueDepth(2, 0, 10)},
        dead_letter_queue=None,
        recent={"DeadLetters": 1.0, "FencedWrites": 0.0},
        recent_source="EMF lines in .local/logs, last hour",
        notes=["oldest message age is a CloudWatch metric: not available on the local stack"],
        problems=["dead letter queue http://x: AWS.SimpleQueueService.NonExistentQueue: gone"],
    )

    text = render(status)

    assert "dispatch lag       0s (watermark 2026-01-05T09:05:00Z, 5m00s ahead of now)" in text
    assert "ready queue        3 waiting, 1 in flight, 12 delayed; oldest message n/a" in text
    assert "  low lane         2 waiting, 0 in flight, 10 delayed; oldest message n/a" in text
    assert "dead-letter queue  unknown" in text
    assert "last hour          DeadLetters 1, FencedWrites 0\n" in text
    assert "metrics from       EMF lines in .local/logs, last hour" in text
    assert "not available on the local stack" in text
    assert "could not read dead letter queue" in text
    assert status.to_json()["watermark"] == "2026-01-05T09:05:00Z"


def test_status_counts_the_metrics_the_dashboard_shows() -> None:
    from punctual_cdk.environment import METRICS_NAMESPACE, SERVICE_NAME
    from punctual_cdk.metrics import APPLICATION_METRICS
    from punctual_cli import status

    assert set(RECENT_METRICS) <= set(APPLICATION_METRICS)
    assert (status.NAMESPACE, status.SERVICE) == (METRICS_NAMESPACE, SERVICE_NAME)


class FakeAws:
    """dynamodb, sqs and cloudwatch clients answering what `status` asks on AWS; records GetMetricData."""

    def __init__(self) -> None:
        self.metric_queries: list[dict[str, object]] = []

    def get_item(self, **kwargs: object) -> dict[str, object]:
        return {"Item": {"PK": {"S": "WATERMARK"}, "SK": {"S": "WATERMARK"}, "minute_ms": {"N": "1767607020000"}}}

    def get_queue_attributes(self, QueueUrl: str, AttributeNames: list[str]) -> dict[str, object]:  # noqa: N803
        depth = {"dlq": "4", "high": "1", "low": "7"}.get(QueueUrl.rsplit("-", 1)[-1], "10")
        return {"Attributes": {"ApproximateNumberOfMessages": depth, "ApproximateNumberOfMessagesNotVisible": "2",
                               "ApproximateNumberOfMessagesDelayed": "0"}}  # fmt: skip

    def get_metric_data(self, **kwargs: object) -> dict[str, object]:
        queries = kwargs["MetricDataQueries"]
        assert isinstance(queries, list)
        self.metric_queries = queries
        results = [{"Id": q["Id"], "Values": [3.0, 2.0] if q["Id"] == "m3" else []} for q in queries]
        ages = {"age_high": [5.0], "age_normal": [42.0, 17.0], "age_low": []}  # newest first; low has none
        for result in results:
            result["Values"] = ages.get(str(result["Id"]), result["Values"])
        return {"MetricDataResults": results}


def test_on_aws_status_reads_cloudwatch_for_failures_and_the_oldest_message_age() -> None:
    from punctual_cli.config import Deployment
    from punctual_cli.status import collect

    # Given a deployed stack whose dead letters metric summed 5 in the last hour
    aws = FakeAws()

    class Session:
        region_name = "eu-west-1"

        def client(self, service: str) -> FakeAws:
            return aws

    deployment = Deployment("jobs", "executions", "https://sqs.eu-west-1.amazonaws.com/1/punctual-ready",
                            "https://sqs.eu-west-1.amazonaws.com/1/punctual-dlq", on_aws=True, session=Session(),
                            description="stack punctual",
                            lane_queue_urls={"high": "https://sqs.eu-west-1.amazonaws.com/1/punctual-high",
                                             "low": "https://sqs.eu-west-1.amazonaws.com/1/punctual-low"})  # fmt: skip

    # When the status is collected (the watermark minute is 09:57, three minutes behind 10:00:30)
    status = collect(deployment, datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC) + timedelta(hours=1))

    # Then the lag comes from the watermark, the depths from SQS, the rest from CloudWatch
    assert status.dispatch_lag_seconds == 180.0
    # (every priority lane counted, each with its own oldest message; the total shows the oldest of all)
    assert status.lanes == {"high": QueueDepth(1, 2, 0, 5.0), "normal": QueueDepth(10, 2, 0, 42.0),
                            "low": QueueDepth(7, 2, 0, None)}  # fmt: skip
    assert status.ready_queue == QueueDepth(18, 6, 0, 42.0)
    assert status.dead_letter_queue == QueueDepth(4, 2, 0, None)
    assert status.recent["DeadLetters"] == 5.0
    assert status.problems == []
    stats = [q["MetricStat"] for q in aws.metric_queries]  # type: ignore[index]
    assert {s["Metric"]["MetricName"] for s in stats[:-3]} == {*RECENT_METRICS, "DispatchLagSeconds"}  # type: ignore[index]
    assert all(s["Metric"]["Dimensions"] == [{"Name": "service", "Value": "punctual"}] for s in stats[:-3])  # type: ignore[index]
    queues = [s["Metric"]["Dimensions"][0]["Value"] for s in stats[-3:]]  # type: ignore[index]
    assert queues == ["punctual-high", "punctual-ready", "punctual-low"]


def test_a_deployed_stack_is_found_through_its_outputs() -> None:
    from punctual_cli.config import aws_deployment
    from punctual_cli.definition import UsageError

    class Session:
        region_name = "eu-west-1"

    outputs = {
        "JobsTableName": "p-jobs",
        "ExecutionsTableName": "p-exec",
        "ReadyQueueUrl": "https://q/ready",
        "DeadLetterQueueUrl": "https://q/dlq",
    }

    deployment = aws_deployment("punctual-prod", Session(), outputs)
    assert deployment.ready_queues() == {"normal": "https://q/ready"}  # a stack from before the lanes
    with_lanes = aws_deployment(
        "p", Session(), {**outputs, "ReadyQueueHighUrl": "https://q/h", "ReadyQueueLowUrl": "https://q/l"}
    )
    assert list(with_lanes.ready_queues().items()) == [
        ("high", "https://q/h"),
        ("normal", "https://q/ready"),
        ("low", "https://q/l"),
    ]

    assert (deployment.jobs_table, deployment.executions_table, deployment.dlq_url) == (
        "p-jobs",
        "p-exec",
        "https://q/dlq",
    )
    assert deployment.on_aws and deployment.log_dir is None
    with pytest.raises(UsageError, match="no output DeadLetterQueueUrl: is it a punctual stack"):
        aws_deployment("other", Session(), {k: v for k, v in outputs.items() if k != "DeadLetterQueueUrl"})


def test_without_a_local_stack_the_operator_commands_say_how_to_get_one(tmp_path: Path) -> None:
    from tests.cli.fakes import run

    result = run("--state-dir", str(tmp_path), "status")

    assert result.code == 2
    assert "start one with scripts/dev" in result.err
