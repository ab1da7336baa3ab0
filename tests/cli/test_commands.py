"""The commands with a scripted API: what each prints, what `--json` prints, and the exit codes scripts rely
on (0 ok, 1 refused, 2 usage, 3 not found, 4 conflict, 5 unavailable). No network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from punctual_cli.client import HttpRequest, SchedulerClient, TransportError
from tests.cli.fakes import BASE, FakeApi, job_json, problem, run, usage_error

pytestmark = pytest.mark.usefixtures("no_network")


def test_get_shows_the_job_and_its_next_runs() -> None:
    api = FakeApi({"GET /v1/jobs/job-1": (200, {**job_json(name="report"), "next_runs": ["2026-01-06T08:00:00Z"]})})

    result = run("get", "job-1", "--preview", "1", client=api.client())

    assert result.code == 0
    assert "state            ACTIVE (version 1)" in result.out
    assert "cron 0 9 * * 1-5 (Europe/Berlin)" in result.out
    assert "POST https://example.com/hook" in result.out
    assert "next runs:\n  2026-01-06T08:00:00Z" in result.out
    assert api.sent()[2] == {"preview": ["1"]}


def test_json_output_is_the_api_document_and_global_flags_go_anywhere() -> None:
    body = job_json(name="report")
    api = FakeApi({"GET /v1/jobs/job-1": (200, body)})

    before = run("--json", "get", "job-1", client=api.client())
    after = run("get", "job-1", "--json", client=api.client())

    assert before.json() == after.json() == body


@pytest.mark.parametrize(
    ("answer", "code", "printed"),
    [
        (problem(404, "Not Found", "no job 'job-1' exists for this caller"), 3, "no job 'job-1' exists"),
        (problem(412, "Precondition Failed", "the job is at version 3; re-read it", current_version=3), 4,
         "the job is at version 3"),
        (problem(409, "Conflict", "a cancelled job cannot be changed"), 4, "cannot be changed"),
        (problem(422, "Unprocessable Content", "schedule.expression: minute must be 0-59, not 61 (and 1 more problem)",
                 errors=[{"field": "schedule.expression", "message": "minute must be 0-59, not 61"},
                         {"field": "jitter_seconds", "message": "Input should be less than or equal to 3600"}]),
         1, "  jitter_seconds: Input should be less than or equal to 3600"),
        (problem(429, "Too Many Jobs", "the tenant has 10000 active jobs"), 1, "10000 active jobs"),
        (problem(500, "Internal Server Error", "retry with the same Idempotency-Key"), 5, "Idempotency-Key"),
    ],
)  # fmt: skip
def test_api_errors_map_to_exit_codes_and_print_what_to_fix(answer: Any, code: int, printed: str) -> None:
    api = FakeApi({"POST /v1/jobs/job-1/pause": answer})

    result = run("pause", "job-1", client=api.client())

    assert result.code == code
    assert printed in result.err
    assert result.out == ""


def test_with_json_an_error_is_the_problem_document_on_stderr() -> None:
    status, body = problem(404, "Not Found", "no job 'job-1' exists for this caller")
    api = FakeApi({"DELETE /v1/jobs/job-1": (status, body)})

    result = run("--json", "cancel", "job-1", client=api.client())

    assert result.code == 3
    assert json.loads(result.err) == body


def test_an_unreachable_api_is_exit_5() -> None:
    def down(request: HttpRequest, timeout: float) -> Any:
        raise TransportError(f"cannot reach {request.url}: connection refused")

    result = run("get", "job-1", client=SchedulerClient(BASE, transport=down, sleep=lambda seconds: None))

    assert result.code == 5
    assert "cannot reach" in result.err


def test_with_json_an_unreachable_api_is_a_problem_document_too() -> None:
    # under --json a connection error is a problem document, not plain text
    def down(request: HttpRequest, timeout: float) -> Any:
        raise TransportError(f"cannot reach {request.url}: connection refused")

    result = run("--json", "get", "job-1", client=SchedulerClient(BASE, transport=down, sleep=lambda seconds: None))

    assert result.code == 5
    problem = json.loads(result.err)
    assert problem["title"] == "Connection failed" and "cannot reach" in problem["detail"]


@pytest.mark.parametrize(
    "argv",
    [["get"], ["submit", "--in", "soon", "--handler", "x"], ["list", "--state", "SLEEPING"], ["frobnicate"],
     ["edit", "job-1", "--if-match", "latest", "--name", "x"]],
)  # fmt: skip
def test_usage_errors_are_exit_2_and_send_nothing(argv: list[str]) -> None:
    usage_error(*argv)


def test_submit_prints_the_new_job_and_always_sends_an_idempotency_key() -> None:
    api = FakeApi({"POST /v1/jobs": (201, job_json("job-9"))})

    result = run("submit", "--cron", "0 9 * * 1-5", "--tz", "Europe/Berlin", "--url", "https://example.com/hook",
                 client=api.client())  # fmt: skip

    assert result.code == 0
    assert result.out.strip() == "created job job-9 (ACTIVE, version 1); next run 2026-01-06T08:00:00Z"
    assert api.sent()[4]["Idempotency-Key"].startswith("cli-")


def test_submit_of_an_invalid_definition_is_exit_1_with_the_field_and_nothing_sent() -> None:
    api = FakeApi()

    result = run("submit", "--cron", "0 25 * * *", "--handler", "x", client=api.client())

    assert result.code == 1
    assert "refused before sending" in result.err
    assert "schedule.expression: hour must be 0-23, not 25" in result.err
    assert api.requests == []


def test_submit_a_job_file_with_flags_on_top(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"schedule": {"type": "once", "delay_seconds": 60},
                                "target": {"type": "handler", "name": "x"}, "name": "file"}))  # fmt: skip
    api = FakeApi({"POST /v1/jobs": (201, job_json())})

    result = run("submit", "--file", str(path), "--name", "flag", "--idempotency-key", "k1", client=api.client())

    assert result.code == 0
    _, _, _, body, headers = api.sent()
    assert body["name"] == "flag"
    assert headers["Idempotency-Key"] == "k1"


def jsonl(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "jobs.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_bulk_submit_checks_every_line_before_sending_any(tmp_path: Path) -> None:
    good = json.dumps({"schedule": {"type": "once", "delay_seconds": 60}, "target": {"type": "handler", "name": "x"}})
    bad = json.dumps(
        {"schedule": {"type": "cron", "expression": "0 9 * *"}, "target": {"type": "handler", "name": "x"}}
    )
    api = FakeApi({"POST /v1/jobs": (201, job_json())})

    result = run("submit", "--file", jsonl(tmp_path, [good, bad, good]), client=api.client())

    assert result.code == 1
    assert "line 2: schedule.expression: a cron expression has 5 fields" in result.err
    assert "nothing was submitted" in result.err
    assert api.requests == []


def test_bulk_submit_of_an_empty_file_is_a_usage_error(tmp_path: Path) -> None:
    result = run("submit", "--file", jsonl(tmp_path, ["# nothing yet"]), client=FakeApi().client())

    assert result.code == 2
    assert "holds no job definitions" in result.err


def test_bulk_submit_sends_each_line_with_a_derived_key_and_reports_each(tmp_path: Path) -> None:
    # Given three definitions, one of which the API refuses
    lines = [json.dumps({"name": f"j{i}", "schedule": {"type": "once", "delay_seconds": 60},
                         "target": {"type": "handler", "name": "x"}}) for i in (1, 2, 3)]  # fmt: skip

    def create_batch(request: HttpRequest) -> tuple[int, Any]:
        results: list[dict[str, Any]] = []
        for index, item in enumerate(json.loads(request.body or b"{}")["items"]):
            name = item["job"]["name"]
            if name == "j2":
                refused = {"title": "Too Many Jobs", "status": 429, "detail": "the tenant has 10000 active jobs"}
                results.append({"index": index, "status": 429, "problem": refused})
            else:
                results.append({"index": index, "status": 201, "job": job_json(f"id-{name}")})
        return 200, {"results": results}

    api = FakeApi({"POST /v1/jobs/batch": create_batch})

    # When they are submitted in bulk with a key prefix
    result = run("--json", "submit", "--file", jsonl(tmp_path, ["# comment", *lines]), "--idempotency-key", "batch7",
                 client=api.client())  # fmt: skip

    # Then the lines went out in one batch request, each with <prefix>:<line number>, and each has a JSON line
    [request] = api.requests
    keys = [item["idempotency_key"] for item in json.loads(request.body or b"{}")["items"]]
    assert keys == ["batch7:2", "batch7:3", "batch7:4"]
    reported = [json.loads(line) for line in result.out.splitlines()]
    assert [r["line"] for r in reported] == [2, 3, 4]
    assert reported[0]["job_id"] == "id-j1"
    assert reported[1]["status"] == 429
    # And the exit code is the first failure's, with progress and the prefix on stderr
    assert result.code == 1
    assert "submitting: 3/3 (100%)" in result.err
    assert "--idempotency-key batch7" in result.err


def test_list_prints_a_table_and_points_to_the_next_page() -> None:
    api = FakeApi({"GET /v1/jobs": (200, {"jobs": [job_json("a", name="report"), job_json("b", state="PAUSED")],
                                          "next_cursor": "abc"})})  # fmt: skip

    result = run("list", "--state", "paused", "--limit", "2", client=api.client())

    assert result.code == 0
    header, first, second = result.out.splitlines()
    assert header.split() == ["JOB", "ID", "NAME", "STATE", "SCHEDULE", "TARGET", "NEXT", "RUN", "(UTC)"]
    assert first.startswith("a ") and "report" in first and "ACTIVE" in first
    assert "PAUSED" in second
    assert "--cursor abc" in result.err
    assert api.sent()[2] == {"state": ["PAUSED"], "limit": ["2"]}


def test_list_filters_by_label_target_type_and_name_prefix() -> None:
    api = FakeApi({"GET /v1/jobs": (200, {"jobs": [job_json("a")], "next_cursor": None})})

    result = run("list", "--label", "customer=42", "--label", "team=", "--target-type", "http",
                 "--name-prefix", "charge-", client=api.client())  # fmt: skip

    assert result.code == 0
    assert api.sent()[2] == {
        "label": ["customer:42", "team:"],
        "target_type": ["http"],
        "name_prefix": ["charge-"],
    }


def test_submit_sends_its_labels_and_refuses_one_without_a_value_separator() -> None:
    api = FakeApi({"POST /v1/jobs": (201, job_json())})

    result = run("submit", "--in", "5m", "--url", "https://example.com/h", "--label", "customer=42",
                 client=api.client())  # fmt: skip

    assert result.code == 0
    assert api.sent()[3]["labels"] == {"customer": "42"}
    refused = run("submit", "--in", "5m", "--url", "https://example.com/h", "--label", "customer", client=api.client())
    assert refused.code != 0 and "KEY=VALUE" in refused.err


def test_edit_reads_the_job_and_sends_the_version_it_read_as_if_match() -> None:
    api = FakeApi({"GET /v1/jobs/job-1": (200, job_json(version=7)),
                   "PATCH /v1/jobs/job-1": (200, job_json(version=8))})  # fmt: skip

    result = run("edit", "job-1", "--cron", "30 8 * * 1-5", client=api.client())

    assert result.code == 0
    _, _, _, body, headers = api.sent()
    assert body == {"schedule": {"type": "cron", "expression": "30 8 * * 1-5"}}
    assert headers["If-Match"] == '"7"'
    assert "updated job job-1 (ACTIVE, version 8)" in result.out


def test_edit_with_an_explicit_if_match_sends_that_version() -> None:
    api = FakeApi({"GET /v1/jobs/job-1": (200, job_json(version=7)),
                   "PATCH /v1/jobs/job-1": problem(412, "Precondition Failed", "the job is at version 7")})  # fmt: skip

    result = run("edit", "job-1", "--set", "name=x", "--if-match", '"6"', client=api.client())

    assert result.code == 4
    assert api.sent()[4]["If-Match"] == '"6"'


def test_edit_that_would_make_the_job_invalid_is_refused_before_patching() -> None:
    api = FakeApi({"GET /v1/jobs/job-1": (200, job_json())})

    result = run("edit", "job-1", "--set", "retry.max_attempts=99", client=api.client())

    assert result.code == 1
    assert "retry.max_attempts" in result.err
    assert [r.method for r in api.requests] == ["GET"]


def test_edit_with_nothing_to_change_is_a_usage_error() -> None:
    api = FakeApi({"GET /v1/jobs/job-1": (200, job_json())})

    assert run("edit", "job-1", client=api.client()).code == 2


def test_trigger_runs_and_resolve() -> None:
    key = "job-1:2026-01-06T08:00:00Z"
    run_body = {"occurrence_key": key, "scheduled_for": "2026-01-06T08:00:00Z", "state": "DEAD", "attempts": 5,
                "finished_at": "2026-01-06T09:00:00Z", "last_error": "HTTP 500 from target"}  # fmt: skip
    api = FakeApi({
        "POST /v1/jobs/job-1/trigger": (202, {"job_id": "job-1", "occurrence_key": "job-1:2026-01-05T10:00:00Z",
                                              "scheduled_for": "2026-01-05T10:00:00Z"}),
        "GET /v1/jobs/job-1/runs": (200, {"runs": [run_body], "next_cursor": None}),
        "POST /v1/jobs/job-1/runs/job-1%3A2026-01-06T08%3A00%3A00Z/resolve": problem(
            409, "Conflict", "occurrence is DEAD, not RECONCILING"),
    })  # fmt: skip

    assert run("trigger", "job-1", client=api.client()).out.strip() == "triggered job-1:2026-01-05T10:00:00Z"
    runs = run("runs", "job-1", client=api.client())
    assert key in runs.out and "DEAD" in runs.out and "HTTP 500 from target" in runs.out
    resolved = run("resolve", key, "--outcome", "retry", client=api.client())
    assert resolved.code == 4
    assert "not RECONCILING" in resolved.err


def test_runs_show_what_held_a_run_back() -> None:
    # Given a run its flow-control key held 3.25 s for its rate and parallelism, and one nothing held
    held = {"occurrence_key": "job-1:2026-01-06T08:00:00Z", "scheduled_for": "2026-01-06T08:00:00Z",
            "state": "SUCCEEDED", "attempts": 1, "finished_at": "2026-01-06T08:00:04Z",
            "held": {"key": "payments-api", "reasons": ["rate", "parallelism"],
                     "since": "2026-01-06T08:00:00Z", "seconds": 3.25}}  # fmt: skip
    free = {"occurrence_key": "job-1:2026-01-06T09:00:00Z", "scheduled_for": "2026-01-06T09:00:00Z",
            "state": "SUCCEEDED", "attempts": 1, "finished_at": "2026-01-06T09:00:00Z"}  # fmt: skip
    api = FakeApi({"GET /v1/jobs/job-1/runs": (200, {"runs": [held, free], "next_cursor": None})})

    # When the runs are listed
    lines = run("runs", "job-1", client=api.client()).out.splitlines()

    # Then the table has a column saying which key held each run, why and how long
    assert "HELD BY" in lines[0]
    assert "payments-api (rate, parallelism, 3.2s)" in lines[1]
    assert "payments-api" not in lines[2]


def test_preview_in_a_zone_across_the_spring_forward_gap() -> None:
    # Given 02:30 Berlin time daily, which does not exist on 2026-03-29 (clocks jump 02:00 -> 03:00)
    result = run("preview", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "-n", "3",
                 "--after", "2026-03-27T12:00:00Z")  # fmt: skip

    # Then that day's run is at the first valid instant after the gap, and the zone's offset changes
    rows = [line.split() for line in result.out.splitlines()[1:]]
    assert [r[1] for r in rows] == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    assert [r[2] for r in rows] == ["2026-03-28T02:30:00+01:00", "2026-03-29T03:00:00+02:00",
                                    "2026-03-30T02:30:00+02:00"]  # fmt: skip


def test_preview_across_the_fall_back_runs_a_repeated_time_once() -> None:
    result = run("--json", "preview", "--cron", "30 2 * * *", "--tz", "Europe/Berlin", "-n", "2",
                 "--after", "2026-10-24T12:00:00Z")  # fmt: skip

    assert result.json() == {
        "schedule": {"type": "cron", "expression": "30 2 * * *", "timezone": "Europe/Berlin"},
        "occurrences": ["2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"],
    }


def test_preview_of_a_rate_from_its_start() -> None:
    result = run("--json", "preview", "--every", "90m", "--start-at", "2026-01-01T00:00:00Z", "-n", "3",
                 "--after", "2025-12-31T00:00:00Z")  # fmt: skip

    assert result.json()["occurrences"] == ["2026-01-01T00:00:00Z", "2026-01-01T01:30:00Z", "2026-01-01T03:00:00Z"]


def test_preview_of_an_invalid_cron_says_which_field() -> None:
    result = run("preview", "--cron", "0 9 * 13 *")

    assert result.code == 1
    assert "schedule.expression: month must be 1-12, not 13" in result.err


def test_get_of_a_dispatched_one_shot_says_its_occurrence_is_waiting() -> None:
    key = "job-1:2026-01-06T08:00:00Z"
    last_run = {"occurrence_key": key, "scheduled_for": "2026-01-06T08:00:00Z", "state": "QUEUED"}
    body = {**job_json(name="charge"), "state": "DISPATCHED", "last_run": last_run}
    api = FakeApi({"GET /v1/jobs/job-1": (200, body)})

    result = run("get", "job-1", client=api.client())

    assert result.code == 0
    assert "state            DISPATCHED (version 1)" in result.out
    assert f"last run         {key} QUEUED (dispatched, waiting to start)" in result.out
