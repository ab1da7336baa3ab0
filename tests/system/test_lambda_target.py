"""A `lambda` target on the local stack: the worker invokes a function that the local AWS emulator (ministack)
runs with its own Python 3.12 interpreter - no Docker, no AWS account (docs/targets.md, "Locally")."""

from __future__ import annotations

import io
import time
import uuid
import zipfile
from typing import Any

import pytest
from harness import LocalStack, local_client

pytestmark = pytest.mark.system

HANDLER = """
import json

def handler(event, context):
    if event["payload"].get("fail"):
        raise RuntimeError("card declined")
    return {"charged": event["payload"]["amount"], "key": event["occurrence_key"]}
"""


def create_function(aws_endpoints: dict[str, str], name: str) -> None:
    client = local_client("lambda", aws_endpoints)
    code = io.BytesIO()
    with zipfile.ZipFile(code, "w") as archive:
        archive.writestr("app.py", HANDLER)
    client.create_function(
        FunctionName=name,
        Runtime="python3.12",
        Role="arn:aws:iam::000000000000:role/charge-cards",
        Handler="app.handler",
        Code={"ZipFile": code.getvalue()},
    )


def runs_when_finished(stack: LocalStack, job_id: str, timeout: float = 60) -> list[dict[str, Any]]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        _, body, _ = stack.call("GET", f"/v1/jobs/{job_id}/runs")
        finished = [r for r in body["runs"] if r["state"] in ("SUCCEEDED", "DEAD")]
        if finished:
            return finished
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish a run within {timeout}s")


def test_a_lambda_target_runs_on_the_local_stack_and_its_error_is_the_runs(
    stack: LocalStack, aws_endpoints: dict[str, str]
) -> None:
    # Given a function in the local emulator that charges a card, or raises when told to
    name = f"charge-cards-{uuid.uuid4().hex[:8]}"
    create_function(aws_endpoints, name)

    # When one job calls it with a payload it accepts and another with one it refuses
    jobs = {}
    for label, payload in (("ok", {"amount": 42}), ("fail", {"amount": 1, "fail": True})):
        body = {
            "schedule": {"type": "once", "delay_seconds": 1},
            "target": {"type": "lambda", "function_name": name},
            "payload": payload,
            "retry": {"max_attempts": 1},
        }
        status, job, _ = stack.call("POST", "/v1/jobs", body)
        assert status == 201, job
        jobs[label] = job["job_id"]

    # Then the first run succeeded, and the second is DEAD with the function's error in its history
    [ok] = runs_when_finished(stack, jobs["ok"])
    assert ok["state"] == "SUCCEEDED", ok
    [failed] = runs_when_finished(stack, jobs["fail"])
    assert failed["state"] == "DEAD", failed
    assert "raised an error (Unhandled): Runtime.HandlerError: card declined" in failed["last_error"], failed
