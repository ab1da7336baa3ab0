"""Per-tenant execution budgets on the local stack: a tenant allowed one execution at a time never has two of its
occurrences at its target at once, each still runs once, and another tenant's occurrence due at the same instant
starts on time."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from harness import LocalStack, Receiver

from scheduler.core.model.timefmt import rfc3339

pytestmark = pytest.mark.system

SLOW_SECONDS = 2.0


def test_a_tenant_at_its_concurrency_waits_its_turn_and_others_start_on_time(stack: LocalStack) -> None:
    # Given carol (one execution at a time) with three slow occurrences, and alice with one, all due at one instant
    lock = threading.Lock()
    running = {"now": 0, "max": 0}
    carol_jobs: set[str] = set()

    def respond(n: int, headers: dict[str, str]) -> tuple[int, dict[str, str]]:
        if headers["x-scheduler-job-id"] in carol_jobs:
            with lock:
                running["now"] += 1
                running["max"] = max(running["max"], running["now"])
            time.sleep(SLOW_SECONDS)
            with lock:
                running["now"] -= 1
        return 200, {}

    receiver = Receiver(respond).start()
    try:
        at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5)
        body = {"schedule": {"type": "once", "at": rfc3339(at)}, "target": {"type": "http", "url": receiver.url}}
        for _ in range(3):
            status, job, _ = stack.call("POST", "/v1/jobs", body, token="t-carol")
            assert status == 201, job
            carol_jobs.add(job["job_id"])
        status, alice_job, _ = stack.call("POST", "/v1/jobs", body)
        assert status == 201, alice_job

        # When they fall due, then carol's run one after another, each once
        receiver.wait_for(4, timeout=60)
        time.sleep(SLOW_SECONDS + 1)  # a duplicate would show up now
    finally:
        receiver.stop()

    calls = Counter(c.headers["x-scheduler-job-id"] for c in receiver.calls)
    assert calls == Counter(dict.fromkeys([*carol_jobs, alice_job["job_id"]], 1))
    assert running["max"] == 1
    # And alice's, due at the same instant, did not wait behind them
    [alice_call] = [c for c in receiver.calls if c.headers["x-scheduler-job-id"] == alice_job["job_id"]]
    assert 0 <= alice_call.at - at.timestamp() <= 2.5
    carol_starts = sorted(c.at for c in receiver.calls if c.headers["x-scheduler-job-id"] in carol_jobs)
    assert carol_starts[-1] - carol_starts[0] >= 2 * SLOW_SECONDS - 0.1  # one at a time
