"""Priority lanes on the local stack: an occurrence of each priority travels its own ready queue and fires once, on
time, through the poller that serves the lanes."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from harness import LocalStack, Receiver

from scheduler.core.model.timefmt import rfc3339

pytestmark = pytest.mark.system


def test_each_lane_delivers_its_occurrences_once_and_on_time(stack: LocalStack, receiver: Receiver) -> None:
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
    keys = {}
    for priority in ("high", "normal", "low"):
        body = {
            "schedule": {"type": "once", "at": rfc3339(at)},
            "target": {"type": "http", "url": receiver.url},
            "priority": priority,
        }
        status, job, _ = stack.call("POST", "/v1/jobs", body)
        assert status == 201 and job["priority"] == priority, job
        keys[f"{job['job_id']}:{rfc3339(at)}"] = priority

    receiver.wait_for(3, timeout=20)
    time.sleep(2)

    calls = Counter(c.headers["idempotency-key"] for c in receiver.calls)
    assert calls == Counter(dict.fromkeys(keys, 1))
    for call in receiver.calls:
        assert 0 <= call.at - at.timestamp() <= 2.5, keys[call.headers["idempotency-key"]]
