"""Every command against the local stack over real HTTP, run in this process as `punctual ...` would run.

Alice (t-alice) and Bob (t-bob) are two tenants. Jobs fire at a local receiver."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness import LocalStack, Receiver

from scheduler_local.emulators import free_port
from tests.cli.fakes import Result, run

pytestmark = pytest.mark.system


def cli(stack: LocalStack, *argv: str, token: str = "t-alice") -> Result:
    return run("--api", stack.base, "--token", token, "--state-dir", str(stack.state_dir), *argv)


def until(check: Callable[[], Any], timeout: float = 30, what: str = "the condition") -> Any:
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen within {timeout}s")


def latest_run(stack: LocalStack, job_id: str, state: str) -> dict[str, Any] | None:
    runs = cli(stack, "--json", "runs", job_id).json()["runs"]
    return runs[0] if runs and runs[0]["state"] == state else None


def test_submit_get_and_runs_after_the_job_fired(stack: LocalStack, receiver: Receiver) -> None:
    # Given a job submitted with flags, due in two seconds
    submitted = cli(stack, "--json", "submit", "--in", "2s", "--url", receiver.url, "--name", "charge",
                    "--payload", '{"charge": "card-42"}', "--max-attempts", "3")  # fmt: skip
    assert submitted.code == 0, submitted.err
    job = submitted.json()
    assert job["name"] == "charge" and job["retry"]["max_attempts"] == 3

    # When it fires
    calls = receiver.wait_for(1, timeout=20)
    succeeded = until(lambda: latest_run(stack, job["job_id"], "SUCCEEDED"), what="a SUCCEEDED run")

    # Then the receiver got the payload under the run's occurrence key
    assert json.loads(calls[0].body) == {"charge": "card-42"}
    assert calls[0].headers["idempotency-key"] == succeeded["occurrence_key"]
    # And get and runs say so for people
    shown = cli(stack, "get", job["job_id"])
    assert shown.code == 0 and job["job_id"] in shown.out and "http POST " + receiver.url in shown.out
    history = cli(stack, "runs", job["job_id"])
    assert succeeded["occurrence_key"] in history.out and "SUCCEEDED" in history.out
    # And a run that is not RECONCILING cannot be resolved: a conflict, exit 4
    resolved = cli(stack, "resolve", succeeded["occurrence_key"], "--outcome", "succeeded")
    assert resolved.code == 4
    assert "not RECONCILING" in resolved.err


def test_edit_with_a_stale_if_match_is_a_conflict(stack: LocalStack, receiver: Receiver) -> None:
    # Given a weekday job in Berlin, at version 1
    job = cli(stack, "--json", "submit", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin", "--url", receiver.url,
              "--idempotency-key", f"edit-{time.time()}").json()  # fmt: skip
    assert job["version"] == 1

    # When it is edited at version 1, and then edited again claiming version 1
    first = cli(stack, "--json", "edit", job["job_id"], "--cron", "30 8 * * 1-5", "--if-match", "1")
    stale = cli(stack, "edit", job["job_id"], "--set", "name=late", "--if-match", "1")

    # Then the first applies (keeping the zone) and the second is refused with exit 4, saying the version
    assert first.code == 0, first.err
    assert first.json()["version"] == 2
    assert first.json()["schedule"] == {"type": "cron", "expression": "30 8 * * 1-5", "timezone": "Europe/Berlin"}
    assert stale.code == 4
    assert "version 2" in stale.err
    after = cli(stack, "--json", "get", job["job_id"]).json()
    assert (after["version"], after.get("name")) == (2, None)  # the refused edit changed nothing


def test_another_tenants_job_is_not_found(stack: LocalStack, receiver: Receiver) -> None:
    job = cli(stack, "--json", "submit", "--in", "1h", "--url", receiver.url).json()

    for argv in (["get", job["job_id"]], ["cancel", job["job_id"]], ["runs", job["job_id"]],
                 ["edit", job["job_id"], "--set", "name=mine"]):  # fmt: skip
        result = cli(stack, *argv, token="t-bob")
        assert result.code == 3, (argv, result.err)
        assert "no job" in result.err
    bobs = cli(stack, "--json", "list", "--all", token="t-bob").json()["jobs"]
    assert job["job_id"] not in {j["job_id"] for j in bobs}
    assert cli(stack, "--json", "get", job["job_id"]).json()["state"] == "ACTIVE"  # untouched


def test_pause_resume_trigger_cancel_and_list(stack: LocalStack, receiver: Receiver) -> None:
    job_id = cli(stack, "--json", "submit", "--cron", "0 0 1 1 *", "--url", receiver.url, "--name", "yearly").json()[
        "job_id"
    ]

    assert "paused job" in cli(stack, "pause", job_id).out
    paused = until(lambda: job_id in cli(stack, "list", "--state", "PAUSED", "--all").out, what="listed as PAUSED")
    assert paused
    assert cli(stack, "trigger", job_id).code == 4  # a paused job cannot be triggered

    assert "resumed job" in cli(stack, "resume", job_id).out
    triggered = cli(stack, "--json", "trigger", job_id)
    assert triggered.code == 0
    calls = receiver.wait_for(1, timeout=20)
    assert calls[0].headers["idempotency-key"] == triggered.json()["occurrence_key"]

    cancelled = cli(stack, "--json", "cancel", job_id)
    assert cancelled.json()["state"] == "CANCELLED"
    assert cli(stack, "cancel", job_id).code == 0  # idempotent


def test_bulk_submit_from_jsonl_and_a_rerun_replays(stack: LocalStack, receiver: Receiver, tmp_path: Path) -> None:
    # Given five definitions in a JSONL file
    path = tmp_path / "jobs.jsonl"
    path.write_text("".join(
        json.dumps({"name": f"bulk-{i}", "schedule": {"type": "once", "delay_seconds": 3600},
                    "target": {"type": "http", "url": receiver.url}, "payload": {"n": i}}) + "\n"
        for i in range(5)
    ))  # fmt: skip
    prefix = f"bulk-{time.time()}"

    # When it is submitted, and submitted again with the same key prefix (as after an interruption)
    first = cli(stack, "--json", "submit", "--file", str(path), "--idempotency-key", prefix)
    again = cli(stack, "--json", "submit", "--file", str(path), "--idempotency-key", prefix)

    # Then five jobs were created once, with progress on stderr; the re-run replays the same five
    assert first.code == 0, first.err
    created = [json.loads(line) for line in first.out.splitlines()]
    replayed = [json.loads(line) for line in again.out.splitlines()]
    assert [c["line"] for c in created] == [1, 2, 3, 4, 5]
    assert not any(c["replayed"] for c in created)
    assert all(r["replayed"] for r in replayed)
    assert [r["job_id"] for r in replayed] == [c["job_id"] for c in created]
    assert "submitting: 5/5 (100%) - 5 created" in first.err
    for c in created:
        assert cli(stack, "--json", "get", c["job_id"]).json()["name"] == f"bulk-{c['line'] - 1}"


def test_dlq_list_and_redrive_on_an_empty_dead_letter_queue(stack: LocalStack) -> None:
    listed = cli(stack, "dlq", "list")
    dry = cli(stack, "--json", "dlq", "redrive", "--dry-run")
    redriven = cli(stack, "dlq", "redrive")

    assert (listed.code, dry.code, redriven.code) == (0, 0, 0)
    assert "the dead-letter queue is empty" in listed.out
    assert dry.out == ""
    assert "0 dead letters" in redriven.err


def test_a_dead_occurrence_shows_in_status_and_dlq_and_redrive_runs_it_again(stack: LocalStack) -> None:
    healthy = {"up": False}
    receiver = Receiver(respond=lambda n, h: (200, {}) if healthy["up"] else (500, {})).start()
    try:
        # Given a job whose only attempt fails
        job = cli(stack, "--json", "submit", "--in", "1s", "--url", receiver.url, "--max-attempts", "1").json()
        dead = until(lambda: latest_run(stack, job["job_id"], "DEAD"), what="a DEAD run")

        # When the operator looks
        status = until(lambda: _status_with_dead_letter(stack), what="a dead letter in status")
        listed = until(lambda: _listed(stack, dead["occurrence_key"]), what="the dead letter in dlq list")

        # Then status shows the dead letter (queue depth and the DeadLetters metric from the EMF logs)
        assert status["dead_letter_queue"]["visible"] + status["dead_letter_queue"]["in_flight"] >= 1
        assert status["recent"]["DeadLetters"] >= 1
        assert status["watermark"] is not None
        assert any("oldest message age" in note for note in status["notes"])
        # And dlq list shows it, DEAD, to be redriven
        assert "DEAD" in listed and "would redrive" in listed

        # When the target recovers and the DLQ is redriven
        healthy["up"] = True
        redriven = cli(stack, "--json", "dlq", "redrive")

        # Then it runs again under the same key and succeeds
        lines = [json.loads(line) for line in redriven.out.splitlines()]
        assert {"occurrence_key": dead["occurrence_key"], "action": "redriven"}.items() <= next(
            line for line in lines if line["occurrence_key"] == dead["occurrence_key"]
        ).items()
        assert "redriving:" in redriven.err
        until(lambda: latest_run(stack, job["job_id"], "SUCCEEDED"), what="SUCCEEDED after the redrive")
        assert {c.headers["idempotency-key"] for c in receiver.calls} == {dead["occurrence_key"]}
    finally:
        receiver.stop()


def _status_with_dead_letter(stack: LocalStack) -> dict[str, Any] | None:
    result = cli(stack, "--json", "status")
    assert result.code == 0, result.err
    body: dict[str, Any] = result.json()
    depth = body["dead_letter_queue"]
    if depth["visible"] + depth["in_flight"] >= 1 and body["recent"]["DeadLetters"] >= 1:
        return body
    return None


def _listed(stack: LocalStack, key: str) -> str | None:
    result = cli(stack, "dlq", "list")
    return result.out if key in result.out else None


def test_status_for_people(stack: LocalStack) -> None:
    result = cli(stack, "status")

    assert result.code == 0, result.out
    assert result.out.startswith(f"punctual status: local stack ({stack.state_dir})")
    for label in ("dispatch lag", "ready queue", "high lane", "normal lane", "low lane", "dead-letter queue"):
        assert label in result.out
    assert "last hour" in result.out
    assert "could not read" not in result.out
    # every priority lane's queue is read (a message waiting in the low lane counts as waiting)
    direct = cli(stack, "--json", "status").json()
    assert set(direct["lanes"]) == {"high", "normal", "low"}

    # The same view through the API's operator route, over real HTTP, for the stack's operator; not for a tenant
    via_api = cli(stack, "--json", "status", "--via-api", token="t-bob")
    assert via_api.code == 0, via_api.err
    refused = cli(stack, "status", "--via-api")
    assert refused.code == 1 and "not an operator" in refused.err and refused.out == ""
    assert via_api.json().keys() == direct.keys()
    assert set(via_api.json()["lanes"]) == {"high", "normal", "low"} and via_api.json()["problems"] == []
    assert via_api.json()["queues"] == direct["queues"] and via_api.json()["source"] == stack.base


def test_health_an_unknown_token_and_an_unreachable_api(stack: LocalStack) -> None:
    assert cli(stack, "health").out.startswith("ok")

    refused = cli(stack, "list", token="t-nobody")
    assert refused.code == 1
    assert "unknown bearer token" in refused.err and "--token" in refused.err

    down = run("--api", f"http://127.0.0.1:{free_port()}", "list")
    assert down.code == 5
    assert "cannot reach" in down.err


def test_the_module_entry_point_configured_from_the_environment(stack: LocalStack) -> None:
    import os
    import subprocess
    import sys

    # Given only environment configuration: the local stack's state folder (its stack.json names the API)
    env = {**os.environ, "SCHEDULER_STATE_DIR": str(stack.state_dir), "PUNCTUAL_TOKEN": "t-bob"}
    env.pop("PUNCTUAL_API_URL", None)

    # When `python -m punctual_cli` submits and lists
    def punctual(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "punctual_cli", *argv], env=env, capture_output=True,
                              text=True, timeout=60)  # fmt: skip

    submitted = punctual("--json", "submit", "--in", "1h", "--handler", "payments.charge", "--name", "from-env")
    listed = punctual("list", "--all")

    # Then both reached that stack as Bob
    assert submitted.returncode == 0, submitted.stderr
    assert json.loads(submitted.stdout)["job_id"] in listed.stdout
    assert cli(stack, "get", json.loads(submitted.stdout)["job_id"], token="t-bob").code == 0
    assert cli(stack, "get", json.loads(submitted.stdout)["job_id"], token="t-alice").code == 3
