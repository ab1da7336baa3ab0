"""`punctual bulk pause|resume|cancel --label KEY=VALUE` with a scripted API: one key for every request until DONE,
a progress line, the report, and the exit codes. No network."""

from __future__ import annotations

from typing import Any

import pytest

from punctual_cli.client import HttpRequest
from tests.cli.fakes import FakeApi, problem, run

pytestmark = pytest.mark.usefixtures("no_network")


def report(state: str, changed: int, failed: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {
        "operation_id": "op-1",
        "action": "pause",
        "selector": {"labels": {"customer": "42"}},
        "state": state,
        "matched": 5,
        "processed": changed + len(failed or []),
        "changed": changed,
        "unchanged": 0,
        "failed": failed or [],
    }


def scripted(*answers: tuple[int, dict[str, Any]]) -> FakeApi:
    left = list(answers)

    def answer(request: HttpRequest) -> tuple[int, dict[str, Any]]:
        return left.pop(0)

    return FakeApi({"POST /v1/jobs/bulk": answer})


def test_bulk_pause_sends_one_key_until_done_and_shows_progress() -> None:
    # Given an API that needs three requests, one of them lost to a restart
    api = scripted(
        (202, report("RUNNING", 2)),
        problem(502, "Bad Gateway", "the api process restarted"),
        (200, report("DONE", 5)),
    )
    # When
    result = run("bulk", "pause", "--label", "customer=42", client=api.client())
    # Then
    assert result.code == 0, result.err
    keys = {request.headers["Idempotency-Key"] for request in api.requests}
    assert len(keys) == 1 and len(api.requests) >= 3
    _, path, _, body, _ = api.sent(0)
    assert (path, body) == ("/v1/jobs/bulk", {"action": "pause", "selector": {"labels": {"customer": "42"}}})
    assert "pausing: 5/5 (100%) - 5 changed" in result.err
    assert "5 matched, 5 changed" in result.out


def test_bulk_reports_each_failed_job_and_exits_1() -> None:
    failed = [{"job_id": "job-9", "reason": "only an ACTIVE job can be paused; this one is CANCELLED"}]
    api = scripted((200, report("DONE", 4, failed)))
    result = run("bulk", "pause", "--label", "customer=42", client=api.client())
    assert result.code == 1
    assert "job-9: only an ACTIVE job can be paused" in result.out


def test_bulk_json_prints_the_final_report_and_takes_a_given_key() -> None:
    api = scripted((200, report("DONE", 5)))
    result = run("--json", "bulk", "pause", "--label", "customer=42", "--idempotency-key", "mine", client=api.client())
    assert result.json() == report("DONE", 5)
    assert api.requests[0].headers["Idempotency-Key"] == "mine"


@pytest.mark.parametrize("argv", [["bulk", "pause"], ["bulk", "pause", "--label", "customer"]])
def test_bulk_without_a_label_is_a_usage_error_and_sends_nothing(argv: list[str]) -> None:
    api = scripted()
    result = run(*argv, client=api.client())
    assert result.code == 2 and "--label" in result.err
    assert api.requests == []


def test_a_refused_bulk_request_is_not_retried_and_names_the_key() -> None:
    api = scripted(problem(422, "Unprocessable Content", "the selector matches more than 1000 jobs"))
    result = run("bulk", "cancel", "--label", "customer=42", client=api.client())
    assert result.code == 1 and "more than 1000 jobs" in result.err
    assert len(api.requests) == 1
