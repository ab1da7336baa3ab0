"""Backfill on the local stack: a past range of a recurring job runs once per occurrence, with the normal
occurrence keys, and its progress is visible over the API."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from harness import LocalStack, Receiver

from scheduler.core.model.timefmt import parse_rfc3339, rfc3339

pytestmark = pytest.mark.system


def test_a_backfill_runs_each_past_occurrence_once_and_reports_progress(stack: LocalStack, receiver: Receiver) -> None:
    # Given a job that runs every minute, and a range of four past minutes
    body = {"schedule": {"type": "cron", "expression": "* * * * *"}, "target": {"type": "http", "url": receiver.url}}
    status, job, _ = stack.call("POST", "/v1/jobs", body)
    assert status == 201, job
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    start = end - timedelta(minutes=4)

    # When it is backfilled
    status, backfill, headers = stack.call(
        "POST", f"/v1/jobs/{job['job_id']}/backfill", {"from": rfc3339(start), "to": rfc3339(end)}
    )
    assert status == 202, backfill
    assert backfill["total"] == 4

    # Then each of the four past occurrences reaches the target once, under its normal occurrence key
    expected = {f"{job['job_id']}:{rfc3339(start + timedelta(minutes=m))}" for m in range(4)}
    deadline = time.time() + 30
    while time.time() < deadline and not expected <= {c.headers["idempotency-key"] for c in receiver.calls}:
        time.sleep(0.2)
    time.sleep(2)  # a duplicate would show up now
    past = Counter(
        c.headers["idempotency-key"]
        for c in receiver.calls
        if parse_rfc3339(c.headers["x-scheduler-scheduled-for"]) < end
    )
    assert set(past) == expected
    assert set(past.values()) == {1}

    # And the backfill reports its progress as complete
    status, progress, _ = stack.call("GET", headers["Location"])
    assert status == 200
    assert (progress["state"], progress["dispatched"], progress["remaining"], progress["waves"]) == (
        "COMPLETED",
        4,
        0,
        1,
    )
    stack.call("DELETE", f"/v1/jobs/{job['job_id']}")
