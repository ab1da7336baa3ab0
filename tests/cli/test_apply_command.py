"""`punctual apply` with a scripted API: the requests it sends (reads for the plan; creates, updates with If-Match
and deletes only when applying), what it prints, and its exit codes. No network."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from punctual_cli.jobs_file import MANAGED_BY
from scheduler.core.jobs.secrecy import spec_view
from scheduler.core.model.job import JobSpec
from tests.cli.fakes import FakeApi, job_json, problem, run

pytestmark = pytest.mark.usefixtures("no_network")

FILE = """\
managed_by: team
jobs:
  a:
    schedule: {type: cron, expression: "0 2 * * *"}
    target: {type: handler, name: reports.a}
  b:
    schedule: {type: rate, every_seconds: 3600}
    target: {type: handler, name: reports.b}
"""
LABELS = {MANAGED_BY: "team"}
#: Job a's schedule before the file moved it to 02:00.
AT_THREE = {"type": "cron", "expression": "0 3 * * *"}


def jobs_file(tmp_path: Path, text: str = FILE) -> str:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    return str(path)


def read_as(name: str, job_id: str, version: int = 1, **changes: Any) -> tuple[int, dict[str, Any]]:
    """The API's answer for the file's job `name` as stored (with `changes` to its definition)."""
    schedule = {"a": {"type": "cron", "expression": "0 2 * * *"}, "b": {"type": "rate", "every_seconds": 3600}}[name]
    definition = {"schedule": schedule, "target": {"type": "handler", "name": f"reports.{name}"}}
    spec = JobSpec.model_validate({**definition, "name": name, "labels": LABELS, "external_id": f"team:{name}",
                                   **changes})  # fmt: skip
    return 200, job_json(job_id, version, **spec_view(spec))


def not_found() -> tuple[int, dict[str, Any]]:
    return problem(404, "Not Found", "no such job")


def listing(*jobs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    return 200, {"jobs": list(jobs), "next_cursor": None}


def writes(api: FakeApi) -> list[tuple[str, str]]:
    return [(r.method, r.url.removeprefix("http://api.test")) for r in api.requests if r.method != "GET"]


def test_dry_run_prints_the_plan_and_only_reads(tmp_path: Path) -> None:
    api = FakeApi({
        "GET /v1/jobs/by-external-id/team%3Aa": read_as("a", "job-a", 2, schedule=AT_THREE),
        "GET /v1/jobs/by-external-id/team%3Ab": not_found(),
        "GET /v1/jobs": listing(job_json("job-old", external_id="team:old", labels=LABELS)),
    })  # fmt: skip

    result = run("apply", "-f", jobs_file(tmp_path), "--dry-run", "--prune", client=api.client())

    assert result.code == 0, result.err
    assert writes(api) == []
    _, _, query, _, _ = api.sent(-1)
    assert query["label"] == ["punctual.dev/managed-by:team"]
    assert '~ a: update in place (job job-a, version 2)\n      ~ schedule.expression: "0 3 * * *" -> "0 2 * * *"' in (
        result.out
    )
    assert "+ b: create" in result.out
    assert "- old: delete (job job-old, ACTIVE" in result.out
    assert "Plan: 1 to create, 1 to update, 1 to delete, 0 unchanged." in result.out
    assert result.out.rstrip().endswith("Dry run: nothing was changed.")


def test_apply_creates_updates_with_if_match_and_prunes(tmp_path: Path) -> None:
    api = FakeApi({
        "GET /v1/jobs/by-external-id/team%3Aa": read_as("a", "job-a", 2, schedule=AT_THREE),
        "GET /v1/jobs/by-external-id/team%3Ab": not_found(),
        "GET /v1/jobs": listing(job_json("job-old", external_id="team:old", labels=LABELS)),
        "POST /v1/jobs": (201, job_json("job-b")),
        "PATCH /v1/jobs/job-a": (200, job_json("job-a", 3)),
        "DELETE /v1/jobs/job-old": (200, job_json("job-old", 2, state="CANCELLED")),
    })  # fmt: skip

    result = run("apply", "-f", jobs_file(tmp_path), "--prune", client=api.client())

    assert result.code == 0, result.err
    assert writes(api) == [("POST", "/v1/jobs"), ("PATCH", "/v1/jobs/job-a"), ("DELETE", "/v1/jobs/job-old")]
    created = json.loads(api.requests[3].body or b"{}")
    assert created["external_id"] == "team:b" and created["labels"] == LABELS and created["name"] == "b"
    _, _, _, patch, headers = api.sent(4)
    assert patch == {"schedule": {"expression": "0 2 * * *"}}
    assert headers["If-Match"] == '"2"'
    assert "created b: job job-b (version 1, ACTIVE)" in result.out
    assert "updated a: job job-a (version 3, ACTIVE)" in result.out
    assert "deleted old: job job-old (version 2, CANCELLED)" in result.out
    assert "Apply complete: 1 created, 1 updated, 1 deleted, 0 unchanged." in result.out


def test_applying_a_file_the_jobs_already_match_writes_nothing(tmp_path: Path) -> None:
    api = FakeApi({
        "GET /v1/jobs/by-external-id/team%3Aa": read_as("a", "job-a"),
        "GET /v1/jobs/by-external-id/team%3Ab": read_as("b", "job-b"),
        "GET /v1/jobs": listing(job_json("job-other", labels={MANAGED_BY: "team-2"})),
    })  # fmt: skip

    result = run("apply", "-f", jobs_file(tmp_path), "--prune", client=api.client())

    assert result.code == 0, result.err
    assert writes(api) == []
    assert "No changes: the 2 jobs of" in result.out


def test_a_job_changed_since_the_plan_stops_the_apply_with_a_conflict(tmp_path: Path) -> None:
    api = FakeApi({
        "GET /v1/jobs/by-external-id/team%3Aa": read_as("a", "job-a", 2, schedule=AT_THREE),
        "GET /v1/jobs/by-external-id/team%3Ab": not_found(),
        "GET /v1/jobs": listing(),
        "POST /v1/jobs": (201, job_json("job-b")),
        "PATCH /v1/jobs/job-a": problem(412, "Precondition Failed", "the job is at version 3"),
    })  # fmt: skip

    result = run("apply", "-f", jobs_file(tmp_path), client=api.client())

    assert result.code == 4
    assert "created b: job job-b" in result.out
    assert "stopped at a: 1 change(s) were made before it" in result.err
    assert "run apply again" in result.err


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        ("managed_by: team\njobs:\n  a: {schedule: {type: rate}}\n", 1,
         "jobs.yaml:3: job 'a': schedule.every_seconds: Field required"),
        ("managed_by: team\njobs:\n  a: [\n", 2, "jobs.yaml:4: is not valid YAML"),
    ],
)  # fmt: skip
def test_a_bad_file_is_refused_naming_the_line_before_anything_is_sent(
    tmp_path: Path, text: str, code: int, message: str
) -> None:
    api = FakeApi()

    result = run("apply", "-f", jobs_file(tmp_path, text), client=api.client())

    assert (result.code, api.requests) == (code, [])
    assert message in result.err
    assert "nothing was changed" in result.err


def test_a_missing_file_is_a_usage_error() -> None:
    result = run("apply", "-f", "/nonexistent/jobs.yaml", client=FakeApi().client())

    assert result.code == 2
    assert "error: /nonexistent/jobs.yaml: cannot read it" in result.err


def test_json_gives_the_plan_and_each_result(tmp_path: Path) -> None:
    api = FakeApi({
        "GET /v1/jobs/by-external-id/team%3Aa": read_as("a", "job-a"),
        "GET /v1/jobs/by-external-id/team%3Ab": not_found(),
        "GET /v1/jobs": listing(),
        "POST /v1/jobs": (201, job_json("job-b")),
    })  # fmt: skip

    result = run("apply", "-f", jobs_file(tmp_path), "--json", client=api.client())

    assert result.code == 0, result.err
    document = result.json()
    assert document["applied"] is True and document["dry_run"] is False
    assert document["summary"] == {"create": 1, "update": 0, "delete": 0, "unchanged": 1}
    unchanged, created = document["changes"]
    assert unchanged["action"] == "unchanged" and "result" not in unchanged
    assert created["result"] == {"job_id": "job-b", "version": 1, "state": "ACTIVE"}


def test_json_errors_of_the_file_list_each_problem(tmp_path: Path) -> None:
    text = "managed_by: team\njobs:\n  a: {schedule: {type: rate, every_seconds: 0}, target: {type: handler}}\n"

    result = run("apply", "-f", jobs_file(tmp_path, text), "--json", client=FakeApi().client())

    assert result.code == 1
    document = json.loads(result.err)
    assert document["file"].endswith("jobs.yaml")
    assert [(e["line"], e["job"], e["field"]) for e in document["errors"]] == [
        (3, "a", "schedule.every_seconds"),
        (3, "a", "target.name"),
    ]
