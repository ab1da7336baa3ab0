"""`GET /v1/operator/status`: every lane's load and the lag, for the tenants of the `operators` setting only, with
no job of any tenant in it."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoTimerStore
from scheduler.core.model.timefmt import minute_of, rfc3339
from scheduler.handlers.api_operator import OperatorStatus
from scheduler.provision import Resources

TENANT_A = "arn:aws:iam::111111111111:user/alice"
OPERATOR = "arn:aws:iam::333333333333:user/oncall"


def emf_line(at: datetime, **values: float) -> str:
    metrics = [{"Name": name, "Unit": "Count"} for name in values]
    meta = {"Timestamp": int(at.timestamp() * 1000), "CloudWatchMetrics": [
        {"Namespace": "Punctual", "Dimensions": [["service"]], "Metrics": metrics}]}  # fmt: skip
    return json.dumps({"_aws": meta, "service": "punctual", **values}) + "\n"


@pytest.fixture
def operators(env: Resources, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """OPERATOR is the one operator; the metrics come from EMF lines in a log folder, as on the local stack."""
    monkeypatch.setenv("SCHEDULER_OPERATORS", json.dumps([OPERATOR]))
    monkeypatch.setenv("SCHEDULER_METRICS_LOG_DIR", str(tmp_path))
    return tmp_path


def test_a_tenant_that_is_not_an_operator_gets_a_403_that_says_what_to_configure(
    operators: Path, api_call: Callable[..., Any], snapshot: Callable[[], Any]
) -> None:
    before = snapshot()

    response = api_call("GET", "/v1/operator/status", tenant=TENANT_A)

    assert response.status == 403
    assert response.header("Content-Type") == "application/problem+json"
    detail = response.body["detail"]
    assert detail.startswith("this principal is not an operator")
    assert TENANT_A in detail and "operators" in detail and "SCHEDULER_OPERATORS" in detail
    assert snapshot() == before


def test_nobody_is_an_operator_by_default(env: Resources, api_call: Callable[..., Any]) -> None:
    assert api_call("GET", "/v1/operator/status", tenant=OPERATOR).status == 403


def test_an_operator_sees_every_lanes_load_and_the_lag_and_no_job(
    operators: Path,
    env: Resources,
    api_call: Callable[..., Any],
    sqs_client: Any,
    dynamodb_client: Any,
    hook: tuple[str, list[str]],
) -> None:
    # Given a tenant's job, two messages waiting in the high lane and one dead letter
    url, _ = hook
    job = {"name": "alice-nightly-report", "schedule": {"type": "cron", "expression": "0 3 * * *"},
           "target": {"type": "http", "url": url}}  # fmt: skip
    created = api_call("POST", "/v1/jobs", job, tenant=TENANT_A)
    assert created.status == 201, created.body
    for body in ("one", "two"):
        sqs_client.send_message(QueueUrl=env.ready_queue_high_url, MessageBody=body)
    sqs_client.send_message(QueueUrl=env.dlq_url, MessageBody="dead")
    # ... a watermark ten minutes behind, and the sweeper's lag and a dead letter in the logs' metrics
    now = datetime.now(UTC)
    DynamoTimerStore(env.jobs_table, 1, dynamodb_client).init_watermark(minute_of(now) - timedelta(minutes=10))
    (operators / "sweeper.log").write_text(
        emf_line(now - timedelta(minutes=2), DispatchLagSeconds=600.0)
        + emf_line(now - timedelta(minutes=1), DispatchLagSeconds=30.0, DeadLetters=1.0)
        + emf_line(now - timedelta(hours=2), DispatchLagSeconds=9000.0)  # outside the window
    )

    # When the operator asks
    response = api_call("GET", "/v1/operator/status", tenant=OPERATOR)

    # Then every lane is there, high to low, with its depth
    assert response.status == 200, response.body
    status = OperatorStatus.model_validate(response.body)
    assert [(lane.lane, lane.queue) for lane in status.lanes] == [
        ("high", env.ready_queue_high_url.rsplit("/", 1)[-1]),
        ("normal", env.ready_queue_url.rsplit("/", 1)[-1]),
        ("low", env.ready_queue_low_url.rsplit("/", 1)[-1]),
    ]
    high = status.lanes[0]
    assert high.visible + high.in_flight == 2
    assert status.ready_queue is not None and status.ready_queue.visible + status.ready_queue.in_flight >= 2
    assert status.dead_letter_queue is not None and status.dead_letter_queue.visible == 1
    # ... the watermark's lag behind now, and the largest lag the sweeper reported in the last hour
    assert status.watermark == rfc3339(minute_of(now) - timedelta(minutes=10))
    assert status.dispatch_lag_seconds is not None and 600 <= status.dispatch_lag_seconds <= 660
    assert status.largest_lag_seconds == 600.0
    assert status.recent["DeadLetters"] == 1.0
    assert status.problems == []
    assert any("oldest message age" in note for note in status.notes)
    assert response.header("Cache-Control") == "no-store"
    # ... and nothing of the tenant or its job
    text = response.text
    for secret in (created.body["job_id"], job["name"], url, TENANT_A, "alice"):
        assert secret not in text, secret


def test_what_cannot_be_read_is_listed_and_the_rest_still_shown(
    operators: Path, env: Resources, api_call: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a dead-letter queue that does not exist (a misconfigured function)
    gone = env.dlq_url + "-gone"
    monkeypatch.setenv("SCHEDULER_DLQ_URL", gone)

    response = api_call("GET", "/v1/operator/status", tenant=OPERATOR)

    assert response.status == 200
    assert response.body["dead_letter_queue"] is None
    assert [p for p in response.body["problems"] if p.startswith(f"dead letter queue {gone}")]
    assert len(response.body["lanes"]) == 3
