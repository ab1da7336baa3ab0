"""`punctual apply`'s parts without an API: the jobs file (ownership, and errors that name the file and the line)
and the planner (a pure function of the file and the jobs as read). The jobs "as read" are made as the API makes a
read of a job (`spec_view` of the stored definition, with the view's own fields), so a plan that sees no change
here sees none against the API either."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from typing import Any

import pytest

from punctual_cli.apply_plan import (
    ABSENT,
    Action,
    FieldChange,
    diff,
    merge_diff,
    plan,
    plan_document,
    plan_text,
)
from punctual_cli.client import Job
from punctual_cli.context import EXIT_CONFLICT, EXIT_REFUSED, EXIT_USAGE
from punctual_cli.jobs_file import MANAGED_BY, JobsFile, JobsFileError, parse_jobs_file
from scheduler.core.jobs.secrecy import sealed, spec_view
from scheduler.core.model.job import JobSpec, merge_patch

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

FILE = """\
managed_by: team-billing
jobs:
  nightly-invoices:
    schedule: {type: cron, expression: "0 2 * * *", timezone: Europe/Berlin}
    target: {type: http, url: "https://billing.example.com/invoices/run"}
    payload: {kind: invoices}
    retry: {max_attempts: 3}
  hourly-sync:
    schedule: {type: rate, every_seconds: 3600}
    target: {type: sqs, queue_url: "https://sqs.eu-west-1.amazonaws.com/123456789012/sync"}
    labels: {tier: gold}
"""


def parsed(text: str = FILE) -> JobsFile:
    return parse_jobs_file(textwrap.dedent(text), "jobs.yaml")


def refused(text: str) -> JobsFileError:
    with pytest.raises(JobsFileError) as caught:
        parsed(text)
    return caught.value


def as_read(spec: JobSpec | dict[str, Any], job_id: str = "job-1", version: int = 1, state: str = "ACTIVE") -> Job:
    """The job as `GET /v1/jobs/{id}` shows it once the API stored `spec` (secret header values sealed away)."""
    checked = spec if isinstance(spec, JobSpec) else JobSpec.model_validate(spec)
    view = {"job_id": job_id, "state": state, "version": version, "created_at": "2026-11-01T00:00:00Z",
            "next_run_at": "2026-12-01T01:00:00Z", "misfire_skipped": 0, **spec_view(checked)}  # fmt: skip
    return Job.from_json(view)


def found_as_filed(jobs_file: JobsFile) -> dict[str, Job | None]:
    return {job.name: as_read(job.spec, f"job-{job.name}") for job in jobs_file.jobs}


# -- the file --------------------------------------------------------------------------------------------------


def test_each_job_is_owned_by_the_file_through_its_external_id_and_label() -> None:
    jobs_file = parsed()

    assert jobs_file.owner == "team-billing"
    nightly, hourly = jobs_file.jobs
    assert (nightly.name, nightly.line) == ("nightly-invoices", 3)
    assert nightly.spec.external_id == "team-billing:nightly-invoices"
    assert nightly.spec.labels == {MANAGED_BY: "team-billing"}
    assert nightly.spec.name == "nightly-invoices"  # the name defaults to the key
    assert hourly.spec.labels == {"tier": "gold", MANAGED_BY: "team-billing"}
    assert jobs_file.selector == {"punctual.dev/managed-by": "team-billing"}


def test_a_definition_the_api_would_refuse_names_the_file_the_line_and_the_field() -> None:
    error = refused("""\
        managed_by: team-billing
        jobs:
          good:
            schedule: {type: rate, every_seconds: 60}
            target: {type: handler, name: ok}
          bad:
            schedule:
              type: cron
              expression: "0 25 * * *"
            target: {type: handler, name: x}
            retry:
              max_attempts: 30
          no-target:
            schedule: {type: rate, every_seconds: 60}
            colour: blue
        """)

    assert error.exit_code == EXIT_REFUSED
    assert [p.text("jobs.yaml") for p in error.problems] == [
        "jobs.yaml:9: job 'bad': schedule.expression: hour must be 0-23, not 25",
        "jobs.yaml:12: job 'bad': retry.max_attempts: Input should be less than or equal to 20",
        "jobs.yaml:13: job 'no-target': target: Field required",
        "jobs.yaml:15: job 'no-target': colour: unknown field (not part of the job definition)",
    ]


def test_bad_yaml_names_the_line_and_column_and_how_to_quote_a_cron_expression() -> None:
    error = refused("""\
        managed_by: team-billing
        jobs:
          every-five:
            schedule: {type: cron, expression: */5 * * * *}
        """)

    assert error.exit_code == EXIT_USAGE
    (problem,) = error.problems
    assert problem.line == 4
    assert "is not valid YAML, column" in problem.message
    assert 'quoted, e.g. expression: "*/5 * * * *"' in problem.message


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("managed_by: a\njobs:\n  x: {}\n  x: {}\n", 4, "the key 'x' is given twice (first on line 3)"),
        ("managed_by: a\njobs: {}\nprune: true\n", 3, "unknown key 'prune'"),
        ("jobs: {}\n", 1, "managed_by is missing"),
        ("managed_by: a\n", 1, "jobs is missing"),
        ("managed_by: a\njobs: [x]\n", 2, "jobs must be a mapping"),
        ("- a\n- b\n", 1, "a jobs file is a mapping"),
        ("managed_by: a\njobs:\n  x: 5\n", 3, "a job definition is a mapping"),
    ],
)
def test_a_file_that_is_not_a_jobs_file_is_refused_at_its_line(text: str, line: int, words: str) -> None:
    error = refused(text)

    assert words in error.problems[0].message
    assert error.problems[0].line == line


def test_an_owner_or_name_that_cannot_make_the_label_or_external_id_is_refused() -> None:
    bad_owner = refused("managed_by: team billing\njobs: {}\n")
    bad_name = refused("managed_by: team\njobs:\n  nightly/report: {}\n  42: {}\n")

    assert bad_owner.exit_code == EXIT_REFUSED
    assert bad_owner.problems[0].line == 1
    assert "cannot be the value of the label punctual.dev/managed-by" in bad_owner.problems[0].message
    assert [(p.line, p.message.split(":")[0]) for p in bad_name.problems] == [
        (3, "job name 'nightly/report' cannot be part of the external id 'team"),
        (4, "a job name is a text, not a number; quote it"),
    ]


def test_external_id_and_the_managed_by_label_are_set_by_apply_not_by_the_file() -> None:
    error = refused("""\
        managed_by: team
        jobs:
          a:
            schedule: {type: rate, every_seconds: 60}
            target: {type: handler, name: x}
            external_id: mine
          b:
            schedule: {type: rate, every_seconds: 60}
            target: {type: handler, name: x}
            labels:
              punctual.dev/managed-by: someone-else
        """)

    assert [(p.line, p.job) for p in error.problems] == [(6, "a"), (11, "b")]
    assert "external_id is set by apply ('team:a')" in error.problems[0].message


def test_anchors_and_merge_keys_share_defaults_and_errors_point_into_the_anchor() -> None:
    error = refused("""\
        managed_by: team
        x-defaults: &defaults
          target: {type: handler, name: reports.run}
          retry: {max_attempts: 99}
        jobs:
          a:
            <<: *defaults
            schedule: {type: rate, every_seconds: 60}
        """)
    jobs_file = parsed("""\
        managed_by: team
        x-defaults: &defaults
          target: {type: handler, name: reports.run}
        jobs:
          a:
            <<: *defaults
            schedule: {type: rate, every_seconds: 60}
        """)

    assert error.problems[0].line == 4
    assert jobs_file.jobs[0].spec.target.model_dump() == {"type": "handler", "name": "reports.run"}


def test_yaml_values_become_the_json_the_api_receives() -> None:
    jobs_file = parsed("""\
        managed_by: team
        jobs:
          once:
            schedule: {type: once, at: 2026-12-01T09:00:00+01:00}
            target: {type: handler, name: x}
            payload: {200: ok, day: 2026-12-01}
        """)
    nan = refused("managed_by: t\njobs:\n  a:\n    schedule: {type: rate, every_seconds: 60}\n"
                  "    target: {type: handler, name: x}\n    payload: .nan\n")  # fmt: skip

    spec = jobs_file.jobs[0].spec
    assert spec.payload == {"200": "ok", "day": "2026-12-01"}
    assert spec.model_dump(mode="json")["schedule"]["at"] == "2026-12-01T09:00:00+01:00"
    assert nan.problems[0].line == 3 and "JSON cannot carry" in nan.problems[0].message


# -- the plan --------------------------------------------------------------------------------------------------


def test_jobs_that_do_not_exist_are_created_with_the_fields_the_file_sets() -> None:
    the_plan = plan(parsed(), {}, [], now=NOW)

    assert [(c.action, c.name) for c in the_plan.changes] == [
        (Action.CREATE, "nightly-invoices"),
        (Action.CREATE, "hourly-sync"),
    ]
    shown = {f.name: f.after for f in the_plan.changes[0].fields}
    assert shown["schedule.expression"] == "0 2 * * *"
    assert shown["retry.max_attempts"] == 3
    assert "retry.initial_backoff_seconds" not in shown  # a default the file does not set is not shown
    assert shown["external_id"] == "team-billing:nightly-invoices"
    assert "Plan: 2 to create, 0 to update, 0 to delete, 0 unchanged." in plan_text(the_plan)


def test_jobs_as_the_api_shows_them_with_its_defaults_are_unchanged() -> None:
    jobs_file = parsed()

    the_plan = plan(jobs_file, found_as_filed(jobs_file), [], now=NOW)

    assert [c.action for c in the_plan.changes] == [Action.UNCHANGED, Action.UNCHANGED]
    assert not the_plan.pending
    assert "No changes: the 2 jobs of jobs.yaml are as the file says." in plan_text(the_plan)


def test_a_changed_field_is_an_update_in_place_whose_patch_makes_the_job_what_the_file_says() -> None:
    jobs_file = parsed()
    stored = {job.name: job.spec for job in jobs_file.jobs}
    before = stored["nightly-invoices"].model_dump(mode="json", exclude_none=True)
    before["schedule"]["expression"] = "0 3 * * *"
    before["labels"]["owner-team"] = "old"
    before["payload"] = {"kind": "invoices", "dry_run": True}
    found = {"nightly-invoices": as_read(before, "job-7", version=4), "hourly-sync": as_read(stored["hourly-sync"])}

    the_plan = plan(jobs_file, found, [], now=NOW)

    update = the_plan.changes[0]
    assert (update.action, update.job_id, update.version) == (Action.UPDATE, "job-7", 4)
    assert [(f.name, f.before, f.after) for f in update.fields] == [
        ("schedule.expression", "0 3 * * *", "0 2 * * *"),
        ("payload.dry_run", True, ABSENT),
        ("labels.owner-team", "old", ABSENT),
    ]
    assert update.patch is not None
    assert JobSpec.model_validate(merge_patch(before, update.patch)) == stored["nightly-invoices"]
    text = plan_text(the_plan)
    assert "~ nightly-invoices: update in place (job job-7, version 4)" in text
    assert '~ schedule.expression: "0 3 * * *" -> "0 2 * * *"' in text
    assert '- labels.owner-team = "old"' in text
    assert "Plan: 0 to create, 1 to update, 0 to delete, 1 unchanged." in text


def test_a_changed_target_type_patches_the_old_type_fields_away() -> None:
    jobs_file = parsed()
    http = jobs_file.jobs[0].spec.model_dump(mode="json", exclude_none=True)
    sqs = {**jobs_file.jobs[1].spec.model_dump(mode="json", exclude_none=True), "target": http["target"]}

    the_plan = plan(jobs_file, {"nightly-invoices": as_read(http), "hourly-sync": as_read(sqs)}, [], now=NOW)

    update = the_plan.changes[1]
    assert update.action is Action.UPDATE and update.patch is not None
    assert update.patch["target"]["url"] is None and update.patch["target"]["type"] == "sqs"
    assert JobSpec.model_validate(merge_patch(sqs, update.patch)) == jobs_file.jobs[1].spec


def test_prune_deletes_only_the_owners_jobs_that_left_the_file() -> None:
    jobs_file = parsed()
    found = found_as_filed(jobs_file)
    labels = {MANAGED_BY: "team-billing"}
    gone = {"job_id": "gone", "state": "PAUSED", "version": 2, "labels": labels, "external_id": "team-billing:old-job"}
    managed = [
        *(job for job in found.values() if job is not None),  # the file's own: listed too, kept
        Job.from_json(gone),
        Job.from_json({"job_id": "done", "state": "CANCELLED", "version": 3, "labels": labels}),
        Job.from_json({"job_id": "other", "state": "ACTIVE", "version": 1, "labels": {MANAGED_BY: "team-x"}}),
    ]

    kept = plan(jobs_file, found, managed, now=NOW)
    pruned = plan(jobs_file, found, managed, now=NOW, prune=True)

    assert [c.action for c in kept.changes] == [Action.UNCHANGED, Action.UNCHANGED]
    assert [(c.name, c.job_id) for c in kept.kept] == [("old-job", "gone")]
    assert "left alone; --prune deletes them): old-job" in plan_text(kept)
    assert [(c.action, c.name, c.job_id) for c in pruned.pending] == [(Action.DELETE, "old-job", "gone")]
    assert "- old-job: delete (job gone, PAUSED: not in the file" in plan_text(pruned)


def test_a_job_whose_external_id_belongs_to_a_cancelled_job_blocks_the_plan() -> None:
    jobs_file = parsed()
    found = found_as_filed(jobs_file)
    found["hourly-sync"] = as_read(jobs_file.jobs[1].spec, "job-c", version=5, state="CANCELLED")

    the_plan = plan(jobs_file, found, [], now=NOW)

    ((problem, code),) = the_plan.problems
    assert code == EXIT_CONFLICT and problem.line == 8 and problem.job == "hourly-sync"
    assert "was cancelled" in problem.message and "give the job another name" in problem.message


def test_a_schedule_with_no_future_occurrence_blocks_the_plan_as_the_api_would_refuse_it() -> None:
    # (a `once` schedule in the past is accepted: it is due at once)
    jobs_file = parsed("""\
        managed_by: team
        jobs:
          past:
            schedule: {type: cron, expression: "0 9 * * *", end_at: "2026-01-01T00:00:00Z"}
            target: {type: handler, name: x}
        """)

    ((problem, code),) = plan(jobs_file, {}, [], now=NOW).problems
    unchanged = plan(jobs_file, found_as_filed(jobs_file), [], now=NOW)  # it ran; the file still says so

    assert code == EXIT_REFUSED and problem.line == 3
    assert "no occurrence in the future" in problem.message
    assert not unchanged.problems and not unchanged.pending


def test_write_only_values_are_not_compared_unless_sent_again() -> None:
    jobs_file = parsed("""\
        managed_by: team
        jobs:
          signed:
            schedule: {type: rate, every_seconds: 60}
            target:
              type: http
              url: "https://example.com/hook?sig=abc"
              headers: {Authorization: Bearer new-token, Accept: application/json}
        """)
    stored = jobs_file.jobs[0].spec.model_dump(mode="json", exclude_none=True)
    stored["target"]["url"] = "https://example.com/hook?sig=old"
    stored["target"]["headers"]["Authorization"] = "Bearer old-token"
    found: dict[str, Job | None] = {"signed": as_read(stored)}

    quiet = plan(jobs_file, found, [], now=NOW)
    resent = plan(jobs_file, found, [], now=NOW, resend_secrets=True)

    assert quiet.changes[0].action is Action.UNCHANGED and quiet.write_only_unseen == 1
    assert "--resend-secrets sends them again" in plan_text(quiet)
    change = resent.changes[0]
    assert change.action is Action.UPDATE and change.resend and change.fields == ()
    assert change.patch == {
        "target": {"url": "https://example.com/hook?sig=abc", "headers": {"Authorization": "Bearer new-token"}}
    }


def test_a_sealed_job_as_read_compares_equal_to_its_definition() -> None:
    jobs_file = parsed("""\
        managed_by: team
        jobs:
          signed:
            schedule: {type: rate, every_seconds: 60}
            target: {type: http, url: "https://example.com/hook", headers: {X-Api-Key: k}}
        """)
    spec = jobs_file.jobs[0].spec
    from scheduler.core.model.job import Job as StoredJob

    stored = sealed(StoredJob.new("job-1", "t", spec, NOW, NOW), _NoSealer(), {})

    the_plan = plan(jobs_file, {"signed": as_read(stored.spec)}, [], now=NOW)

    assert stored.spec.target.headers == {"X-Api-Key": "<redacted>"}  # type: ignore[union-attr]
    assert the_plan.changes[0].action is Action.UNCHANGED


class _NoSealer:
    """Seals by writing nothing down (the plan never sees sealed values)."""

    def seal(self, plaintext: bytes, context: dict[str, str]) -> str:
        return "sealed"

    def open(self, sealed: str, context: dict[str, str]) -> bytes:
        raise AssertionError("not opened here")


def test_the_json_plan_has_every_change_with_its_fields() -> None:
    jobs_file = parsed()
    found = found_as_filed(jobs_file)
    found["hourly-sync"] = None

    document = plan_document(plan(jobs_file, found, [], now=NOW))

    assert document["managed_by"] == "team-billing" and document["file"] == "jobs.yaml"
    assert document["summary"] == {"create": 1, "update": 0, "delete": 0, "unchanged": 1}
    created = document["changes"][1]
    assert created["action"] == "create" and created["external_id"] == "team-billing:hourly-sync"
    assert {"field": "labels.tier", "after": "gold"} in created["fields"]


@pytest.mark.parametrize(
    ("before", "after", "changes"),
    [
        ({"a": 1}, {"a": 1}, []),
        ({"a": 1}, {"a": True}, [FieldChange(("a",), 1, True)]),
        ({"a": {}}, {"a": {"b": 1}}, [FieldChange(("a", "b"), ABSENT, 1)]),
        ({"a": [1, 2]}, {"a": [2, 1]}, [FieldChange(("a",), [1, 2], [2, 1])]),
        ({"a": {"b": 1}}, {}, [FieldChange(("a", "b"), 1, ABSENT)]),
    ],
)
def test_diff_compares_mappings_key_by_key_and_anything_else_whole(
    before: dict[str, Any], after: dict[str, Any], changes: list[FieldChange]
) -> None:
    assert list(diff(before, after)) == changes


def test_merge_diff_is_the_patch_from_before_to_after() -> None:
    before = {"a": 1, "b": {"c": 1, "d": 2}, "e": [1], "gone": "x"}
    after = {"a": 1, "b": {"c": 1, "d": 3, "new": 0}, "e": [1, 2]}

    patch = merge_diff(before, after)

    assert patch == {"b": {"d": 3, "new": 0}, "e": [1, 2], "gone": None}
    assert merge_patch(before, patch) == after
