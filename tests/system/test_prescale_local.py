"""Pre-scaling on the local stack, end to end: a herd scheduled minutes ahead is forecast, the sweeper's pre-scaler
raises the pollers, and the supervisor grows the worker pool *before* the herd is even in the ready queue (the
look-ahead is shorter than the pre-scaler's lead here), so the herd starts with the pool already grown."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from harness import LocalStack, Receiver

from scheduler.core.model.timefmt import rfc3339

pytestmark = [pytest.mark.system, pytest.mark.load_tolerant]

HERD = 40


@pytest.fixture
def prescaled_stack(aws_endpoints: dict[str, str], tmp_path: Path) -> Iterator[LocalStack]:
    env = {
        **aws_endpoints,
        "SCHEDULER_LOCAL_PRESCALE": "true",
        "SCHEDULER_LOOKAHEAD_SECONDS": "20",  # the herd reaches SQS only 20-80 s before it is due
        "SCHEDULER_PRESCALE_LEAD_SECONDS": "150",  # the pool grows 150 s before the herd's minute
        "SCHEDULER_PRESCALE_SECONDS_PER_OCCURRENCE": "3",  # 40 in one second: 40 invocations, 4 pollers, 2 extra
        "SCHEDULER_LOCAL_WORKERS": "1",
        "SCHEDULER_LOCAL_MAX_WORKERS": "3",
        "SCHEDULER_TENANT_DISPATCH_RATE": "0",
    }
    local = LocalStack(tmp_path / "stack", env).start()
    try:
        yield local
    finally:
        local.stop()


def scaled(stack: LocalStack) -> list[dict[str, Any]]:
    """The supervisor's "worker pollers scaled" lines, in order."""
    out = []
    for line in stack.log.read_text(errors="replace").splitlines():
        if '"worker pollers scaled"' in line:
            out.append(json.loads(line[line.index("{") :]))
    return out


def test_a_herd_scheduled_minutes_ahead_starts_with_the_pool_already_grown(
    prescaled_stack: LocalStack, receiver: Receiver
) -> None:
    stack = prescaled_stack
    # Given a herd due in three minutes, at one second
    due = (datetime.now(UTC) + timedelta(seconds=180)).replace(microsecond=0)
    body = {"schedule": {"type": "once", "at": rfc3339(due)}, "target": {"type": "http", "url": receiver.url}}
    for _ in range(HERD):
        status, _, _ = stack.call("POST", "/v1/jobs", body)
        assert status == 201

    # When time passes until shortly before the herd can be in the ready queue (due - look-ahead - its minute)
    grown_at = None
    while datetime.now(UTC) < due - timedelta(seconds=85):
        lines = scaled(stack)
        if grown_at is None and any(line["to"] > 1 and line["forecast_floor"] > 1 for line in lines):
            grown_at = datetime.now(UTC)
        time.sleep(1)

    # Then the pool grew on the forecast alone: nothing of the herd was queued yet (not even delayed)
    # (a sweep that ran while the herd was still being created may have forecast part of it first)
    lines = scaled(stack)
    assert grown_at is not None, lines
    grown = [line for line in lines if line["to"] > 1]
    assert max(line["forecast_floor"] for line in grown) == 3, grown
    assert all(line["visible"] + line["in_flight"] + line["delayed"] == 0 for line in grown), grown
    assert grown_at < due - timedelta(seconds=85)

    # And the herd starts, every occurrence once, none early
    calls = receiver.wait_for(HERD, timeout=240)
    assert len(calls) == HERD
    assert all(call.at >= due.timestamp() - 0.001 for call in calls)
    keys = [call.headers["idempotency-key"] for call in calls]
    assert len(set(keys)) == HERD
