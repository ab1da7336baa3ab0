"""Dead letters on the local stack: an occurrence that keeps failing ends DEAD with its history in the DLQ;
redrive re-runs it under the same occurrence key and refuses occurrences that already succeeded."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta

import pytest
from harness import LocalStack, Receiver, local_client, wait_for_run

from scheduler.adapters.dispatch_message import dispatch_to_body
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from scheduler_local.emulators import ROOT

pytestmark = pytest.mark.system


def redrive(stack: LocalStack, *args: str) -> list[dict[str, object]]:
    result = subprocess.run(
        ["bash", "scripts/redrive", "--json", *args],
        cwd=ROOT, env={**os.environ, "SCHEDULER_STATE_DIR": str(stack.state_dir)},
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def test_a_dead_occurrence_is_dead_lettered_and_redrive_runs_it_once_more(stack: LocalStack) -> None:
    healthy = {"up": False}
    receiver = Receiver(respond=lambda n, h: (200, {}) if healthy["up"] else (500, {})).start()
    try:
        # Given a job whose target fails every time, with two attempts allowed
        at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
        status, job, _ = stack.call("POST", "/v1/jobs", {
            "schedule": {"type": "once", "at": rfc3339(at)},
            "target": {"type": "http", "url": receiver.url},
            "retry": {"max_attempts": 2, "initial_backoff_seconds": 1},
        })  # fmt: skip
        assert status == 201

        # When both attempts have failed
        dead = wait_for_run(stack, job["job_id"], "DEAD")

        # Then the run is DEAD with its history, and the DLQ holds it
        assert dead["attempts"] == 2
        assert len(dead["history"]) == 2
        key = f"{job['job_id']}:{rfc3339(at)}"
        listed = redrive(stack, "--dry-run")
        assert {"occurrence_key": key, "ledger_state": "DEAD", "action": "would redrive"}.items() <= next(
            line for line in listed if line["occurrence_key"] == key
        ).items()

        # When the target recovers and the DLQ is redriven
        healthy["up"] = True
        lines = redrive(stack)
        assert any(line["occurrence_key"] == key and line["action"] == "redriven" for line in lines)

        # Then the occurrence runs again with the same key and succeeds
        wait_for_run(stack, job["job_id"], "SUCCEEDED")
        keys = {c.headers["idempotency-key"] for c in receiver.calls}
        assert keys == {key}
        assert len(receiver.calls) == 3

        # And a second redrive finds nothing of it left to do
        assert not [line for line in redrive(stack) if line["occurrence_key"] == key]
    finally:
        receiver.stop()


def test_redrive_refuses_an_occurrence_that_already_succeeded(stack: LocalStack, receiver: Receiver) -> None:
    # Given an occurrence that succeeded, and a stale copy of it in the DLQ
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)
    _, job, _ = stack.call(
        "POST",
        "/v1/jobs",
        {"schedule": {"type": "once", "at": rfc3339(at)}, "target": {"type": "http", "url": receiver.url}},
    )
    wait_for_run(stack, job["job_id"], "SUCCEEDED")
    env = {k: v for k, v in (line.split("=", 1) for line in _exports(stack))}
    sqs = local_client("sqs", env)
    # (as the worker writes it: the dispatch carries its HMAC, or redrive would refuse it as planted)
    dispatch = Dispatch(str(job["job_id"]), "alice", at, at, 1, "scheduled")
    body = {"dispatch": json.loads(dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)), "history": []}
    sqs.send_message(QueueUrl=env["SCHEDULER_DLQ_URL"], MessageBody=json.dumps(body))

    # When redriving
    lines = redrive(stack)

    # Then it is refused and the target is not called again
    key = f"{job['job_id']}:{rfc3339(at)}"
    assert [line["action"] for line in lines if line["occurrence_key"] == key] == ["refused: SUCCEEDED"]
    time.sleep(2)
    assert len(receiver.calls) == 1


def _exports(stack: LocalStack) -> list[str]:
    lines = (stack.state_dir / "stack.env").read_text().splitlines()
    return [line.removeprefix("export ").replace("'", "") for line in lines if line.startswith("export ")]
