"""What a careful user would try, reproduced on the local stack over real HTTP: a redrive that looped on an
occurrence dying again, a resume that ignored the misfire policy for what the look-ahead had queued, pauses that
re-sent the whole look-ahead, and buffer_one releasing its parked run only at the lease end."""

from __future__ import annotations

import itertools
import json
import os
import shlex
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
from harness import LocalStack, Receiver, local_client

from scheduler.core.model.timefmt import parse_rfc3339, rfc3339
from scheduler_local.emulators import ROOT

pytestmark = pytest.mark.system


def redrive(stack: LocalStack) -> list[dict[str, object]]:
    result = subprocess.run(
        ["bash", "scripts/redrive", "--json"],
        cwd=ROOT, env={**os.environ, "SCHEDULER_STATE_DIR": str(stack.state_dir)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def runs(stack: LocalStack, job_id: str) -> list[dict[str, object]]:
    _, body, _ = stack.call("GET", f"/v1/jobs/{job_id}/runs?limit=100")
    return list(body["runs"])


def wait_for(predicate: object, timeout: float, what: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.3)
    raise AssertionError(f"not within {timeout}s: {what}")


def ready_queue_delayed(stack: LocalStack) -> int:
    """Messages waiting out their delay in the normal lane (what a look-ahead re-send would add)."""
    env = dict(
        shlex.split(line.removeprefix("export "))[0].split("=", 1)
        for line in (stack.state_dir / "stack.env").read_text().splitlines()
        if "=" in line
    )
    url = env["SCHEDULER_READY_QUEUE_URL"]
    sqs = local_client("sqs", env)
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesDelayed"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessagesDelayed"])


def test_redrive_runs_a_dead_occurrence_once_more_and_stops(stack: LocalStack) -> None:
    # Given a receiver that always answers 400 and a one-shot job that died against it
    receiver = Receiver(respond=lambda n, h: (400, {})).start()
    try:
        body = {"schedule": {"type": "once", "delay_seconds": 2}, "target": {"type": "http", "url": receiver.url}}
        status, job, _ = stack.call("POST", "/v1/jobs", body)
        assert status == 201, job
        wait_for(lambda: [r for r in runs(stack, job["job_id"]) if r["state"] == "DEAD"], 60, "DEAD")
        assert len(receiver.calls) == 1

        # When the DLQ is redriven (it used to loop until --limit: 999 POSTs)
        lines = [line for line in redrive(stack) if str(line["occurrence_key"]).startswith(job["job_id"])]

        # Then the occurrence ran exactly once more and is DEAD again, back in the DLQ for the next command
        assert [line["action"] for line in lines] == ["redriven"]
        wait_for(lambda: len(receiver.calls) >= 2, 30, "the redriven attempt")
        wait_for(lambda: runs(stack, job["job_id"])[0]["state"] == "DEAD", 30, "DEAD again")
        time.sleep(3)
        assert len(receiver.calls) == 2
        assert len(runs(stack, job["job_id"])[0]["history"]) <= 6  # type: ignore[arg-type]
    finally:
        receiver.stop()


def test_a_resume_runs_what_fell_due_while_paused_and_pausing_resends_nothing(
    stack: LocalStack, receiver: Receiver
) -> None:
    # Given a job every 2 s with run_all, running for a few seconds (its 5-minute look-ahead is queued)
    body = {
        "schedule": {"type": "rate", "every_seconds": 2},
        "target": {"type": "http", "url": receiver.url},
        "misfire_policy": "run_all",  # and the default overlap policy, skip: the catch-up runs one after another
    }
    status, job, _ = stack.call("POST", "/v1/jobs", body, token="t-bob")
    assert status == 201, job
    job_id = job["job_id"]
    time.sleep(8)

    # When it is paused for 10 s and resumed
    delayed_before = ready_queue_delayed(stack)
    status, paused, _ = stack.call("POST", f"/v1/jobs/{job_id}/pause", token="t-bob")
    assert status == 200, paused
    # (a pause used to re-send the whole look-ahead: ~150 messages for this job)
    assert ready_queue_delayed(stack) <= delayed_before + 3
    paused_at = datetime.now(UTC)
    time.sleep(10)
    status, resumed, _ = stack.call("POST", f"/v1/jobs/{job_id}/resume", token="t-bob")
    assert status == 200, resumed
    resumed_at = datetime.now(UTC)
    time.sleep(6)
    stack.call("DELETE", f"/v1/jobs/{job_id}", token="t-bob")

    # Then every occurrence that fell due while paused ran (run_all), none recorded SKIPPED "job paused"
    _, body, _ = stack.call("GET", f"/v1/jobs/{job_id}/runs?limit=100", token="t-bob")
    history = {parse_rfc3339(str(r["scheduled_for"])): r for r in body["runs"]}
    missed = [at for at in history if paused_at + timedelta(seconds=1) < at < resumed_at - timedelta(seconds=1)]
    assert len(missed) >= 3, {rfc3339(k): v["state"] for k, v in history.items()}
    assert all(history[at]["state"] == "SUCCEEDED" for at in missed), [
        (history[at]["state"], history[at].get("last_error")) for at in missed
    ]
    assert not [r for r in body["runs"] if r.get("last_error") == "job paused" and r["state"] == "SKIPPED"]


def test_buffer_one_starts_its_parked_run_when_the_running_one_finishes(stack: LocalStack) -> None:
    # Given a job every 2 s with buffer_one whose target takes 6 s
    receiver = Receiver(respond=lambda n, h: (time.sleep(6), (200, {}))[1]).start()
    try:
        end = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=16)
        body = {
            "schedule": {"type": "rate", "every_seconds": 2, "end_at": rfc3339(end)},
            "target": {"type": "http", "url": receiver.url, "timeout_seconds": 20},
            "overlap_policy": "buffer_one",
        }
        status, job, _ = stack.call("POST", "/v1/jobs", body)
        assert status == 201, job
        time.sleep(32)

        # Then the runs were serial: each started right after the one before it finished (6 s), none waited
        # for a lease to end (it used to start 60 s later, after later runs), and at most one was parked at a time
        starts = sorted(call.at for call in receiver.calls)
        assert len(starts) >= 3, starts
        gaps = [b - a for a, b in itertools.pairwise(starts)]
        assert all(5.5 <= gap <= 9 for gap in gaps), gaps
        history = runs(stack, job["job_id"])
        assert not [r for r in history if r["state"] == "RETRY_WAIT"]
    finally:
        receiver.stop()


def test_allow_starts_overlapping_runs_on_time_and_in_order(stack: LocalStack) -> None:
    # Given a job every 2 s with overlap allowed whose target takes 5 s (so two or three runs overlap)
    receiver = Receiver(respond=lambda n, h: (time.sleep(5), (200, {}))[1]).start()
    try:
        start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=4)
        body = {
            "schedule": {"type": "rate", "every_seconds": 2, "start_at": rfc3339(start),
                         "end_at": rfc3339(start + timedelta(seconds=12))},
            "target": {"type": "http", "url": receiver.url, "timeout_seconds": 20},
            "overlap_policy": "allow",
        }  # fmt: skip
        status, job, _ = stack.call("POST", "/v1/jobs", body)
        assert status == 201, job
        wait_for(lambda: len(receiver.calls) >= 6, 40, "six overlapping runs")

        # Then each run started about on time, while the runs before it were still going (the local workers
        # handle a batch's records concurrently, as the worker Lambda does), and in the order of their times
        calls = sorted(receiver.calls, key=lambda call: call.at)
        scheduled = [parse_rfc3339(call.headers["x-scheduler-scheduled-for"]) for call in calls]
        assert scheduled == sorted(scheduled), scheduled
        late = [call.at - at.timestamp() for call, at in zip(calls, scheduled, strict=True)]
        assert all(-0.2 <= lateness <= 2.5 for lateness in late), late
        # (two pollers at least, each busy with its batch while its target runs: the second run starts beside the
        # first at once; a third waits at most until the pollers scale up or one frees, inside the bound above)
        assert calls[1].at - calls[0].at < 5, "the second run waited for the first to finish"
    finally:
        receiver.stop()
