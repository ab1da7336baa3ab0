"""A bulk pause killed mid-way (SIGKILL of the api process, which the local stack restarts), then the same request
retried with the same Idempotency-Key until DONE: every labelled job ends PAUSED, changed once, every job counted
once, and no other job changed."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import uuid
from http.client import HTTPException
from typing import Any

import pytest
from harness import LocalStack, Receiver, local_client

from scheduler.core.jobs.bulk import operation_id

pytestmark = pytest.mark.system

JOBS = 300
OTHERS = 25
BATCH = 25


def create_jobs(stack: LocalStack, receiver: Receiver, labels: dict[str, str], count: int) -> list[str]:
    job = {"schedule": {"type": "rate", "every_seconds": 3600}, "target": {"type": "http", "url": receiver.url}}
    ids: list[str] = []
    for start in range(0, count, BATCH):
        items = [{"job": {**job, "labels": labels}} for _ in range(min(BATCH, count - start))]
        status, body, _ = stack.call("POST", "/v1/jobs/batch", {"items": items})
        assert status == 200, body
        assert all(r["status"] == 201 for r in body["results"]), body
        ids += [r["job"]["job_id"] for r in body["results"]]
    return ids


def listed(stack: LocalStack, label: str) -> dict[str, tuple[str, int]]:
    """Every job with the label: job id -> (state, version)."""
    found: dict[str, tuple[str, int]] = {}
    cursor = ""
    while True:
        status, body, _ = stack.call("GET", f"/v1/jobs?label={label}&limit=100&cursor={cursor}")
        assert status == 200, body
        found.update({j["job_id"]: (j["state"], j["version"]) for j in body["jobs"]})
        cursor = body["next_cursor"]
        if not cursor:
            return found


def processed(stack: LocalStack, dynamodb: Any, key: str) -> int:
    """Jobs the operation has counted so far, read from its item in the jobs table (not through the api, which
    is busy with it)."""
    table = json.loads((stack.state_dir / "stack.json").read_text())["SCHEDULER_JOBS_TABLE"]
    item = dynamodb.get_item(
        TableName=table, Key={"PK": {"S": "OP#alice"}, "SK": {"S": operation_id("alice", key)}}, ConsistentRead=True
    ).get("Item")
    if item is None:
        return 0
    document = json.loads(item["document"]["S"])
    return int(document["changed"]) + int(document["unchanged"]) + len(document["failed"])


def bulk_pause(stack: LocalStack, run: str, key: str) -> tuple[int, Any]:
    body = {"action": "pause", "selector": {"labels": {"bulk-run": run}}}
    return stack.call("POST", "/v1/jobs/bulk", body, headers={"Idempotency-Key": key})[:2]


def test_a_bulk_pause_killed_mid_way_finishes_on_retry_with_every_job_paused_once(
    stack: LocalStack, receiver: Receiver, aws_endpoints: dict[str, str]
) -> None:
    # Given 300 labelled jobs and some others, one of them with another value of the label
    run = uuid.uuid4().hex[:12]
    labelled = create_jobs(stack, receiver, {"bulk-run": run}, JOBS)
    others = create_jobs(stack, receiver, {"bulk-other": run}, OTHERS)
    others += create_jobs(stack, receiver, {"bulk-run": f"{run}x"}, 1)
    key = f"bulk-{run}"

    # When the api process is killed while the first request works through the jobs
    first: list[BaseException | tuple[int, Any]] = []

    def first_request() -> None:
        try:
            first.append(bulk_pause(stack, run, key))
        except (urllib.error.URLError, HTTPException, ConnectionError, TimeoutError) as exc:
            first.append(exc)

    thread = threading.Thread(target=first_request, daemon=True)
    thread.start()
    dynamodb = local_client("dynamodb", aws_endpoints)
    deadline = time.time() + 30
    while time.time() < deadline and processed(stack, dynamodb, key) < 50:  # some pages done, not all
        time.sleep(0.05)
    time.sleep(0.2)  # into the next page: some of its jobs changed, its checkpoint not yet written
    for pid_file in (stack.state_dir / "pids").glob("api*.pid"):  # every api process: the port is shared
        stack.kill(pid_file.stem)
    counted = processed(stack, dynamodb, key)
    thread.join(30)
    assert first and isinstance(first[0], BaseException), f"the kill did not interrupt the request: {first}"
    assert 0 < counted < JOBS, counted

    # Then the same request, retried until DONE, reports every job changed once
    answer: Any = None
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            status, answer = bulk_pause(stack, run, key)
        except (urllib.error.URLError, HTTPException, ConnectionError, TimeoutError):
            time.sleep(0.5)  # the api is restarting
            continue
        assert status in (200, 202), answer
        if status == 200:
            break
    assert answer is not None and answer["state"] == "DONE", answer
    assert (answer["matched"], answer["changed"], answer["unchanged"], answer["failed"]) == (JOBS, JOBS, 0, [])

    # And every labelled job is PAUSED at its second version (paused once); no other job changed
    jobs = listed(stack, f"bulk-run:{run}")
    assert jobs == {job_id: ("PAUSED", 2) for job_id in labelled}
    for job_id in others:
        status, body, _ = stack.call("GET", f"/v1/jobs/{job_id}")
        assert (status, body["state"], body["version"]) == (200, "ACTIVE", 1), body
    status, progress, _ = stack.call("GET", f"/v1/operations/{answer['operation_id']}")
    assert (status, progress) == (200, answer)
    assert stack.call("GET", f"/v1/operations/{answer['operation_id']}", token="t-bob")[0] == 404
