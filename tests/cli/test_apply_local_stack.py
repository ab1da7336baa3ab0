"""`punctual apply` against the local stack over real HTTP, run in this process as `punctual apply ...` would run:
the jobs as code of docs/jobs-as-code.md ("Without CDK").

Each test has an owner of its own (the stack is shared by the session); the jobs are yearly, so none fires while
a test looks at it."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness import LocalStack

from tests.cli.fakes import Result, run

pytestmark = pytest.mark.system

MANAGED_BY = "punctual.dev/managed-by"


def cli(stack: LocalStack, *argv: str, token: str = "t-alice") -> Result:
    return run("--api", stack.base, "--token", token, "--state-dir", str(stack.state_dir), *argv)


def owner() -> str:
    return f"team-{uuid.uuid4().hex[:8]}"


def write(tmp_path: Path, text: str, name: str = "jobs.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def jobs_file(
    tmp_path: Path, team: str, *, nightly_at: str = "0 2 1 1 *", with_weekly: bool = True, name: str = "jobs.yaml"
) -> str:
    """Two jobs: an http call with a secret header (a value a read never shows) and a handler."""
    weekly = """
          weekly-digest:
            schedule: {type: cron, expression: "0 9 1 1 *", timezone: Europe/Berlin}
            target: {type: handler, name: payments.charge}
            labels: {tier: gold}
    """
    return write(
        tmp_path,
        f"""\
        managed_by: {team}
        jobs:
          nightly-invoices:
            schedule: {{type: cron, expression: "{nightly_at}"}}
            target:
              type: http
              url: http://127.0.0.1:9/invoices?sig=s3cret
              headers: {{X-Api-Key: k-123, Accept: application/json}}
            payload: {{kind: invoices}}
            retry: {{max_attempts: 3}}
        {weekly if with_weekly else ""}
        """,
        name,
    )


def managed(stack: LocalStack, team: str, token: str = "t-alice") -> dict[str, dict[str, Any]]:
    """The owner's jobs by external id, as the API lists them (CANCELLED ones too)."""
    listed = cli(stack, "--json", "list", "--all", "--label", f"{MANAGED_BY}={team}", token=token)
    assert listed.code == 0, listed.err
    return {job["external_id"]: job for job in listed.json()["jobs"]}


def by_external_id(stack: LocalStack, external_id: str) -> dict[str, Any]:
    status, body, _ = stack.call("GET", f"/v1/jobs/by-external-id/{external_id}")
    assert status == 200, body
    return dict(body)


def snapshot(stack: LocalStack, team: str) -> dict[str, tuple[str, int, str]]:
    return {eid: (job["job_id"], job["version"], job["state"]) for eid, job in managed(stack, team).items()}


def test_apply_twice_creates_the_jobs_then_changes_nothing(stack: LocalStack, tmp_path: Path) -> None:
    team = owner()
    path = jobs_file(tmp_path, team)

    first = cli(stack, "apply", "-f", path)
    created = snapshot(stack, team)
    second = cli(stack, "apply", "-f", path)

    assert first.code == 0, first.err
    assert "Plan: 2 to create, 0 to update, 0 to delete, 0 unchanged." in first.out
    assert "Apply complete: 2 created, 0 updated, 0 deleted, 0 unchanged." in first.out
    assert sorted(created) == [f"{team}:nightly-invoices", f"{team}:weekly-digest"]
    nightly = by_external_id(stack, f"{team}:nightly-invoices")
    assert nightly["labels"] == {MANAGED_BY: team} and nightly["name"] == "nightly-invoices"
    assert nightly["retry"]["max_attempts"] == 3 and nightly["target"]["headers"]["X-Api-Key"] == "<redacted>"
    # The second apply reads the jobs with the API's defaults and redactions, and finds nothing to do
    assert second.code == 0, second.err
    assert "No changes: the 2 jobs of" in second.out
    assert "= nightly-invoices: unchanged" in second.out and "= weekly-digest: unchanged" in second.out
    assert snapshot(stack, team) == created


def test_a_changed_schedule_updates_the_job_in_place(stack: LocalStack, tmp_path: Path) -> None:
    team = owner()
    assert cli(stack, "apply", "-f", jobs_file(tmp_path, team)).code == 0
    before = by_external_id(stack, f"{team}:nightly-invoices")

    changed = cli(stack, "apply", "-f", jobs_file(tmp_path, team, nightly_at="30 3 1 1 *"))

    assert changed.code == 0, changed.err
    assert f"~ nightly-invoices: update in place (job {before['job_id']}, version 1)" in changed.out
    assert '~ schedule.expression: "0 2 1 1 *" -> "30 3 1 1 *"' in changed.out
    assert "Apply complete: 0 created, 1 updated, 0 deleted, 1 unchanged." in changed.out
    after = by_external_id(stack, f"{team}:nightly-invoices")
    assert after["job_id"] == before["job_id"]
    assert after["version"] == before["version"] + 1
    assert after["schedule"]["expression"] == "30 3 1 1 *"
    assert after["next_run_at"].endswith("T03:30:00Z")
    # The secret header it was created with is still there (the update sent it again, sealed as before)
    assert after["target"]["headers"] == {"X-Api-Key": "<redacted>", "Accept": "application/json"}
    assert after["created_at"] == before["created_at"]
    # And applying the changed file again changes nothing
    again = cli(stack, "apply", "-f", jobs_file(tmp_path, team, nightly_at="30 3 1 1 *"))
    assert "No changes" in again.out and by_external_id(stack, f"{team}:nightly-invoices")["version"] == 2


def test_prune_deletes_only_the_removed_job_of_the_files_owner(stack: LocalStack, tmp_path: Path) -> None:
    team, other_team = owner(), owner()
    assert cli(stack, "apply", "-f", jobs_file(tmp_path, team)).code == 0
    assert cli(stack, "apply", "-f", jobs_file(tmp_path, other_team, name="other.yaml")).code == 0
    unmanaged = cli(stack, "--json", "submit", "--cron", "0 4 1 1 *", "--handler", "payments.charge", "--label", "t=1")
    assert unmanaged.code == 0, unmanaged.err
    others_before = snapshot(stack, other_team)
    without_weekly = jobs_file(tmp_path, team, with_weekly=False)

    kept = cli(stack, "apply", "-f", without_weekly)
    pruned = cli(stack, "apply", "-f", without_weekly, "--prune")

    # Without --prune the job that left the file stays, and the plan says so
    assert kept.code == 0, kept.err
    assert "No changes" in kept.out
    assert "left alone; --prune deletes them): weekly-digest" in kept.out
    # With it, that job (and only it) is deleted: cancelled, still readable
    assert pruned.code == 0, pruned.err
    assert "- weekly-digest: delete" in pruned.out
    assert "Apply complete: 0 created, 0 updated, 1 deleted, 1 unchanged." in pruned.out
    mine = managed(stack, team)
    assert mine[f"{team}:weekly-digest"]["state"] == "CANCELLED"
    assert mine[f"{team}:nightly-invoices"]["state"] == "ACTIVE"
    assert snapshot(stack, other_team) == others_before
    by_hand = cli(stack, "--json", "get", unmanaged.json()["job_id"]).json()
    assert (by_hand["state"], by_hand["version"]) == ("ACTIVE", 1)
    # A second prune has nothing left to do
    assert "No changes" in cli(stack, "apply", "-f", without_weekly, "--prune").out


def test_a_job_pruned_cannot_come_back_under_its_name(stack: LocalStack, tmp_path: Path) -> None:
    team = owner()
    assert cli(stack, "apply", "-f", jobs_file(tmp_path, team)).code == 0
    assert cli(stack, "apply", "-f", jobs_file(tmp_path, team, with_weekly=False), "--prune").code == 0
    before = snapshot(stack, team)

    back = cli(stack, "apply", "-f", jobs_file(tmp_path, team))

    assert back.code == 4
    assert "job 'weekly-digest': the job" in back.err and "give the job another name" in back.err
    assert snapshot(stack, team) == before


def test_dry_run_prints_the_plan_and_writes_nothing(stack: LocalStack, tmp_path: Path) -> None:
    team = owner()
    assert cli(stack, "apply", "-f", jobs_file(tmp_path, team, with_weekly=False)).code == 0
    before = snapshot(stack, team)

    changed = jobs_file(tmp_path, team, nightly_at="0 5 1 1 *")
    planned = cli(stack, "apply", "-f", changed, "--dry-run", "--prune")
    as_json = cli(stack, "--json", "apply", "-f", changed, "--dry-run")

    assert planned.code == 0, planned.err
    assert "Plan: 1 to create, 1 to update, 0 to delete, 0 unchanged." in planned.out
    assert "Dry run: nothing was changed." in planned.out
    assert snapshot(stack, team) == before
    document = as_json.json()
    assert (document["dry_run"], document["applied"]) == (True, False)
    assert document["summary"] == {"create": 1, "update": 1, "delete": 0, "unchanged": 0}
    update = next(c for c in document["changes"] if c["action"] == "update")
    assert update["fields"] == [{"field": "schedule.expression", "before": "0 2 1 1 *", "after": "0 5 1 1 *"}]
    assert snapshot(stack, team) == before


def test_bad_yaml_and_bad_definitions_name_the_file_and_line_and_change_nothing(
    stack: LocalStack, tmp_path: Path
) -> None:
    team = owner()
    assert cli(stack, "apply", "-f", jobs_file(tmp_path, team)).code == 0
    before = snapshot(stack, team)
    bad_yaml = write(
        tmp_path,
        f"""\
        managed_by: {team}
        jobs:
          nightly-invoices:
            schedule: {{type: cron, expression: */5 * * * *}}
        """,
        "bad-yaml.yaml",
    )
    bad_definition = write(
        tmp_path,
        f"""\
        managed_by: {team}
        jobs:
          nightly-invoices:
            schedule: {{type: cron, expression: "0 2 1 1 *"}}
            target: {{type: http, url: "http://127.0.0.1:9/invoices"}}
          new-job:
            schedule:
              type: cron
              expression: "0 25 * * *"
            target: {{type: handler, name: x}}
        """,
        "bad-definition.yaml",
    )

    yaml_error = cli(stack, "apply", "-f", bad_yaml, "--prune")
    definition_error = cli(stack, "apply", "-f", bad_definition, "--prune")

    assert yaml_error.code == 2
    assert f"error: {bad_yaml}:4: is not valid YAML, column" in yaml_error.err
    assert definition_error.code == 1
    assert f"error: {bad_definition}:9: job 'new-job': schedule.expression: hour must be 0-23, not 25" in (
        definition_error.err
    )
    assert "nothing was changed" in yaml_error.err and "nothing was changed" in definition_error.err
    assert snapshot(stack, team) == before
