"""The plan of `punctual apply`: what to create, update (with each field's change), delete and leave alone so that the
jobs match the file, computed from the file and the jobs as read, without sending anything (a pure function).

The comparison is on the normalized definition, the one a read shows: the file's definition goes through the
API's own model (its defaults filled in, a cron expression as the API stores it) and is shown as a read would show
it (`scheduler.core.jobs.secrecy.spec_view`: no secret header value, no URL query value), and the job as read goes
through the same model. So a file that says what the job already is plans nothing, whatever defaults the API
added, and a field the file changes shows in the diff. A value a read never shows (a secret header's, a URL query's)
cannot be compared: the plan counts the jobs that hold one, and `resend_secrets` updates them anyway.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from punctual_cli.client import Job
from punctual_cli.context import EXIT_CONFLICT, EXIT_REFUSED
from punctual_cli.jobs_file import MANAGED_BY, DesiredJob, FileProblem, JobsFile
from scheduler.core.jobs.secrecy import spec_view
from scheduler.core.model.job import HttpTarget, JobSpec, JobState, is_secret_header
from scheduler.core.model.schedules import OnceSchedule, first_occurrence, next_occurrence


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    UNCHANGED = "unchanged"


class _Absent:
    """A field one side does not have."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class FieldChange:
    """One field's change: `before` as read, `after` as the file says (ABSENT: the side has no such field)."""

    path: tuple[str, ...]
    before: Any
    after: Any

    @property
    def name(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True)
class Change:
    """What apply does to one job. `fields`: for a create, the fields the file sets; for an update, the fields
    that change. `patch` is the merge patch of an update, `spec` the definition of a create."""

    action: Action
    name: str
    job_id: str | None = None
    version: int | None = None
    state: str | None = None
    external_id: str | None = None
    fields: tuple[FieldChange, ...] = ()
    spec: JobSpec | None = None
    patch: dict[str, Any] | None = None
    #: The definition holds values a read never shows (secret header values, URL query values).
    write_only: bool = False
    #: An update only to send the write-only values again (`resend_secrets`).
    resend: bool = False


@dataclass(frozen=True)
class Plan:
    source: str
    owner: str
    prune: bool
    changes: tuple[Change, ...]
    #: Jobs of the owner that are not in the file, left alone without `prune`.
    kept: tuple[Change, ...] = ()
    #: What stops the plan from being applied (nothing is written), each with its line and exit code.
    problems: tuple[tuple[FileProblem, int], ...] = field(default_factory=tuple)

    def count(self, action: Action) -> int:
        return sum(1 for change in self.changes if change.action is action)

    @property
    def pending(self) -> tuple[Change, ...]:
        return tuple(change for change in self.changes if change.action is not Action.UNCHANGED)

    @property
    def write_only_unseen(self) -> int:
        """Jobs left unchanged that hold values a read never shows (a change to those alone is not seen)."""
        return sum(1 for c in self.changes if c.action is Action.UNCHANGED and c.write_only)


def plan(
    jobs_file: JobsFile,
    found: Mapping[str, Job | None],
    managed: Iterable[Job],
    *,
    now: datetime,
    prune: bool = False,
    resend_secrets: bool = False,
) -> Plan:
    """The plan that makes the jobs match `jobs_file`. `found`: each file job's job as read by its external id (None:
    there is none); `managed`: the jobs carrying the owner's managed-by label (the candidates of `prune`)."""
    changes: list[Change] = []
    problems: list[tuple[FileProblem, int]] = []
    for desired in jobs_file.jobs:
        current = found.get(desired.name)
        change, problem = _change(desired, current, now, resend_secrets)
        changes.append(change)
        if problem is not None:
            problems.append(problem)
    in_file = {job.job_id for job in found.values() if job is not None}
    leaving = [
        _leaving(job, jobs_file.owner)
        for job in managed
        if job.job_id not in in_file
        and job.state.value != JobState.CANCELLED
        and job.labels.get(MANAGED_BY) == jobs_file.owner  # the list's selector, checked again
    ]
    leaving.sort(key=lambda change: (change.name, change.job_id or ""))
    if prune:
        changes += leaving
    kept = () if prune else tuple(leaving)
    return Plan(jobs_file.source, jobs_file.owner, prune, tuple(changes), kept, tuple(problems))


def _change(
    desired: DesiredJob, current: Job | None, now: datetime, resend_secrets: bool
) -> tuple[Change, tuple[FileProblem, int] | None]:
    spec = desired.spec
    write_only = holds_write_only(spec)
    if current is None:
        written = {**desired.written, "name": True, "labels": True, "external_id": True}
        shown = _flatten(spec_view(spec))
        fields = tuple(FieldChange(path, ABSENT, value) for path, value in shown if _is_written(written, path))
        create = Change(Action.CREATE, desired.name, external_id=desired.external_id, fields=fields, spec=spec,
                        write_only=write_only)  # fmt: skip
        if first_occurrence(spec.schedule, now) is None:
            return create, _blocked(desired, "schedule: the schedule has no occurrence in the future", EXIT_REFUSED)
        return create, None
    unchanged = Change(Action.UNCHANGED, desired.name, current.job_id, current.version, current.state.value,
                       desired.external_id, write_only=write_only)  # fmt: skip
    if current.state.value == JobState.CANCELLED:
        message = (
            f"the job {current.job_id} with the external id '{desired.external_id}' was cancelled (deleted); a "
            "cancelled job cannot change or come back, and its external id stays taken: give the job another name"
        )
        return unchanged, _blocked(desired, message, EXIT_CONFLICT)
    before = normalized(current.raw)
    fields = tuple(diff(before, spec_view(spec)))
    resend = not fields and write_only and resend_secrets
    if not fields and not resend:
        return unchanged, None
    patch = merge_diff(before, spec.model_dump(mode="json", exclude_none=True))
    update = replace(unchanged, action=Action.UPDATE, fields=fields, spec=spec, patch=patch, resend=resend)
    schedule_changes = any(f.path[0] == "schedule" for f in fields)
    if (
        schedule_changes
        and current.created_at is not None
        and not isinstance(spec.schedule, OnceSchedule)
        and next_occurrence(spec.schedule, now, current.created_at) is None
    ):
        # As the API refuses it: a new schedule that never runs again is a mistake, not a way to end the job.
        return update, _blocked(desired, "schedule: the new schedule has no occurrence in the future", EXIT_REFUSED)
    return update, None


def _blocked(desired: DesiredJob, message: str, code: int) -> tuple[FileProblem, int]:
    return FileProblem(desired.line, message, desired.name), code


def _leaving(job: Job, owner: str) -> Change:
    """The delete of a job of `owner` that the file no longer has."""
    return Change(Action.DELETE, _managed_name(job, owner), job.job_id, job.version, job.state.value, job.external_id)


def _managed_name(job: Job, owner: str) -> str:
    """The file name of a job of `owner` (its external id after `owner:`), else its name or id."""
    prefix = f"{owner}:"
    if job.external_id and job.external_id.startswith(prefix):
        return job.external_id.removeprefix(prefix)
    return job.name or job.job_id


# -- normalizing and comparing ---------------------------------------------------------------------------------


def normalized(read: Mapping[str, Any]) -> dict[str, Any]:
    """A job as read, reduced to its definition and normalized as the file's is (through the API's model, shown as a
    read shows it). A definition this model cannot read (a newer API's) is compared as it is."""
    definition = {key: value for key, value in read.items() if key in JobSpec.model_fields}
    try:
        return spec_view(JobSpec.model_validate(definition))
    except ValidationError:
        return definition


def diff(before: Any, after: Any, path: tuple[str, ...] = ()) -> Iterable[FieldChange]:
    """Each field that differs between two JSON values, mappings compared key by key (in `after`'s order, then the
    keys only `before` has)."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        for key in [*after, *(k for k in before if k not in after)]:
            yield from diff(before.get(key, ABSENT), after.get(key, ABSENT), (*path, str(key)))
    elif before is ABSENT and isinstance(after, Mapping) and after:
        yield from diff({}, after, path)
    elif after is ABSENT and isinstance(before, Mapping) and before:
        yield from diff(before, {}, path)
    elif before != after or type(before) is not type(after):
        yield FieldChange(path, before, after)


def merge_diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `before` into `after`: a field `after` lacks is `null`, a mapping
    is patched key by key, anything else that differs is replaced."""
    patch: dict[str, Any] = {}
    for key, value in after.items():
        old = before.get(key, ABSENT)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            inner = merge_diff(old, value)
            if inner:
                patch[key] = inner
        elif old != value or type(old) is not type(value):
            patch[key] = value
    for key in before:
        if key not in after:
            patch[key] = None
    return patch


def holds_write_only(spec: JobSpec) -> bool:
    """Whether the definition holds a value a read never shows: a secret header's, or a URL's query or fragment."""
    target = spec.target
    if not isinstance(target, HttpTarget):
        return False
    parts = urlsplit(str(target.url))
    secret = any(is_secret_header(name, target.public_headers) for name in target.headers)
    return secret or bool(parts.query) or bool(parts.fragment)


def _is_written(written: Any, path: tuple[str, ...]) -> bool:
    """Whether the file writes the field at `path`, or a field that holds it (the value of `payload`)."""
    for key in path:
        if not isinstance(written, Mapping):
            return True
        if key not in written:
            return False
        written = written[key]
    return True


def _flatten(value: Mapping[str, Any], path: tuple[str, ...] = ()) -> Iterable[tuple[tuple[str, ...], Any]]:
    for key, inner in value.items():
        if isinstance(inner, Mapping) and inner:
            yield from _flatten(inner, (*path, str(key)))
        else:
            yield (*path, str(key)), inner


# -- showing a plan --------------------------------------------------------------------------------------------

_SIGN = {Action.CREATE: "+", Action.UPDATE: "~", Action.DELETE: "-", Action.UNCHANGED: "="}
#: The longest value a plan line shows (the JSON plan has them whole).
MAX_SHOWN = 100


def plan_text(the_plan: Plan) -> str:
    """The plan for people, like `terraform plan`: each job with what happens to it, then a summary line."""
    lines = [f"punctual apply: {the_plan.source}, jobs managed by {the_plan.owner}", ""]
    for change in the_plan.changes:
        lines.append(f"  {_SIGN[change.action]} {change.name}: {_headline(change)}")
        lines += [f"      {_field_line(f)}" for f in change.fields]
        if change.resend:
            lines.append("      ~ write-only values (secret header values, URL query) sent again")
    if the_plan.changes:
        lines.append("")
    lines.append(summary_line(the_plan))
    return "\n".join(lines + notes(the_plan))


def summary_line(the_plan: Plan) -> str:
    if not the_plan.pending:
        jobs = len(the_plan.changes)
        jobs_are = f"{jobs} jobs of {the_plan.source} are" if jobs != 1 else f"job of {the_plan.source} is"
        return f"No changes: the {jobs_are} as the file says."
    return (
        f"Plan: {the_plan.count(Action.CREATE)} to create, {the_plan.count(Action.UPDATE)} to update, "
        f"{the_plan.count(Action.DELETE)} to delete, {the_plan.count(Action.UNCHANGED)} unchanged."
    )


def notes(the_plan: Plan) -> list[str]:
    """What the plan leaves alone that the user may want to know."""
    lines = []
    if the_plan.kept:
        names = ", ".join(change.name for change in the_plan.kept)
        lines.append(
            f"Not in {the_plan.source} but managed by {the_plan.owner} (left alone; --prune deletes them): {names}"
        )
    if the_plan.write_only_unseen:
        count = the_plan.write_only_unseen
        lines.append(
            f"{count} unchanged job{'s' if count != 1 else ''} hold{'s' if count == 1 else ''} write-only values "
            "(secret header values, URL query) that a read never shows, so a change to those alone is not seen; "
            "--resend-secrets sends them again."
        )
    return lines


def _headline(change: Change) -> str:
    job = f"job {change.job_id}"
    if change.action is Action.CREATE:
        return "create"
    if change.action is Action.UPDATE:
        return f"update in place ({job}, version {change.version})"
    if change.action is Action.DELETE:
        return f"delete ({job}, {change.state}: not in the file; cancelled, its history kept)"
    return f"unchanged ({job}, version {change.version}, {change.state})"


def _field_line(change: FieldChange) -> str:
    if change.before is ABSENT:
        return f"+ {change.name} = {_shown(change.after)}"
    if change.after is ABSENT:
        return f"- {change.name} = {_shown(change.before)}"
    return f"~ {change.name}: {_shown(change.before)} -> {_shown(change.after)}"


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 1] + "…"


def change_document(change: Change) -> dict[str, Any]:
    """One change as the JSON plan has it (a field a side lacks has no `before`/`after`)."""
    fields = []
    for f in change.fields:
        entry: dict[str, Any] = {"field": f.name}
        if f.before is not ABSENT:
            entry["before"] = f.before
        if f.after is not ABSENT:
            entry["after"] = f.after
        fields.append(entry)
    document: dict[str, Any] = {
        "action": change.action.value,
        "name": change.name,
        "external_id": change.external_id,
        "job_id": change.job_id,
        "version": change.version,
        "state": change.state,
        "fields": fields,
    }
    if change.resend:
        document["resend_write_only"] = True
    return document


def plan_document(the_plan: Plan) -> dict[str, Any]:
    """The plan as `--json` prints it."""
    return {
        "file": the_plan.source,
        "managed_by": the_plan.owner,
        "prune": the_plan.prune,
        "changes": [change_document(change) for change in the_plan.changes],
        "not_in_file": [change_document(change) for change in the_plan.kept],
        "summary": {action.value: the_plan.count(action) for action in Action},
        "write_only_unseen": the_plan.write_only_unseen,
    }
