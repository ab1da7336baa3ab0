"""Chaos on the real local stack (issue 7): a few hundred occurrences, with the worker and sweeper processes
SIGKILLed at random moments (the supervisor restarts them, as Lambda would start new ones). At the end every
occurrence took effect exactly once at a receiver that applies each occurrence key once, and none is lost."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from harness import LocalStack, Receiver

from scheduler.core.keys import occurrence_key
from scheduler.core.timefmt import rfc3339

pytestmark = pytest.mark.system

ONE_SHOTS = 200
RATE_JOBS = 6
SEED = 20261129


@pytest.fixture(scope="module")
def chaos_stack(aws_endpoints: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {
        **aws_endpoints,
        # Short leases and visibility so a killed worker's occurrences come back within the test.
        "SCHEDULER_LEASE_SECONDS": "8",
        "SCHEDULER_LOCAL_VISIBILITY_TIMEOUT": "12",
        "SCHEDULER_BUCKET_LEASE_SECONDS": "6",
        "SCHEDULER_LOCAL_WORKERS": "2",
    }
    local = LocalStack(Path(tmp_path_factory.mktemp("chaos")), env).start()
    try:
        yield local
    finally:
        local.stop()


def explain(stack: LocalStack, key: str) -> str:
    """What the API knows of a missing occurrence: its job and its runs."""
    job_id = key.split(":")[0]
    _, job, _ = stack.call("GET", f"/v1/jobs/{job_id}")
    _, runs, _ = stack.call("GET", f"/v1/jobs/{job_id}/runs?limit=20")
    fields = ("state", "version", "schedule", "next_run_at", "last_dispatched_for", "misfire_skipped")
    history = [(r["scheduled_for"], r["state"], r["last_error"]) for r in runs["runs"]]
    return f"{key}: job { ({k: job.get(k) for k in fields}) }, runs {history}"


def test_every_occurrence_takes_effect_once_while_processes_are_killed(chaos_stack: LocalStack) -> None:
    rng = random.Random(SEED)
    receiver = Receiver().start()
    try:
        # Given a few hundred occurrences due over the next minute: one-shots and 5-second rates
        # (rate jobs first: a recurring job's first occurrence is never before its creation)
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=10)
        expected: set[str] = set()
        for _ in range(RATE_JOBS):
            first, end = start + timedelta(seconds=2), start + timedelta(seconds=42)
            status, job, _ = chaos_stack.call("POST", "/v1/jobs", {
                "schedule": {"type": "rate", "every_seconds": 5, "start_at": rfc3339(first), "end_at": rfc3339(end)},
                "target": {"type": "http", "url": receiver.url},
                # A killed worker's run keeps its lease for a while; with the default overlap policy (skip) the
                # next occurrence would rightly be SKIPPED. This test is about crashes, not overlap: allow it.
                "overlap_policy": "allow",
                "retry": {"max_attempts": 10, "initial_backoff_seconds": 1, "max_backoff_seconds": 2},
            })  # fmt: skip
            assert status == 201, job
            expected |= {occurrence_key(job["job_id"], first + timedelta(seconds=5 * k)) for k in range(9)}
        for i in range(ONE_SHOTS):
            at = start + timedelta(seconds=rng.uniform(0, 45))
            status, job, _ = chaos_stack.call("POST", "/v1/jobs", {
                "schedule": {"type": "once", "at": at.isoformat()},
                "target": {"type": "http", "url": receiver.url}, "payload": {"n": i},
                "retry": {"max_attempts": 10, "initial_backoff_seconds": 1, "max_backoff_seconds": 2},
            })  # fmt: skip
            assert status == 201, job
            expected.add(
                occurrence_key(
                    job["job_id"],
                    datetime.fromisoformat(at.isoformat()).replace(microsecond=at.microsecond // 1000 * 1000),
                )
            )

        # When workers and sweepers are SIGKILLed at random moments while the occurrences fall due
        kills: Counter[str] = Counter()
        chaos_until = start + timedelta(seconds=50)
        while datetime.now(UTC) < chaos_until:
            time.sleep(rng.uniform(1.0, 4.0))
            victim = rng.choice(["worker-1", "worker-2", "sweeper"])
            try:
                chaos_stack.kill(victim)
                kills[victim] += 1
            except (ProcessLookupError, FileNotFoundError, ValueError):
                pass  # it was already being restarted

        # Then, once the system has settled, every occurrence took effect - once - and none is lost
        deadline = time.time() + 120
        while time.time() < deadline and not expected <= {c.headers["idempotency-key"] for c in receiver.calls}:
            time.sleep(1)
        received = Counter(c.headers["idempotency-key"] for c in receiver.calls)
        missing = expected - set(received)
        assert not missing, f"{len(missing)} occurrences never took effect (kills: {dict(kills)}): " + "; ".join(
            explain(chaos_stack, key) for key in sorted(missing)[:3]
        )
        assert set(received) <= expected, set(received) - expected
        assert sum(kills.values()) >= 10
        duplicates = sum(n - 1 for n in received.values())
        # Re-deliveries are allowed (a worker killed after its call and before its ledger write): the receiver
        # applies each key once. Report them so a regression that multiplies them is visible in the log.
        print(f"chaos: {len(expected)} occurrences, {sum(kills.values())} kills {dict(kills)}, "
              f"{duplicates} re-deliveries absorbed by the key")  # fmt: skip
    finally:
        receiver.stop()
