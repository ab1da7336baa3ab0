"""The jobs file of `punctual apply` (docs/jobs-as-code.md): who owns the jobs, and each job's definition.

```yaml
managed_by: team-billing
jobs:
  nightly-invoices:
    schedule: {type: cron, expression: "0 2 * * *", timezone: Europe/Berlin}
    target: {type: http, url: https://billing.example.com/invoices/run}
```

Each job is owned by the file: it carries the external id `{owner}:{name}` (how apply finds it again) and the
label `punctual.dev/managed-by={owner}` (how `--prune` finds the owner's jobs that left the file). A CDK stack's
`ScheduledJob`s follow the same convention with the owner `cdk.<stack name>`.

Every definition is checked here, as the API would check it, before anything is sent; each problem names the file
and the line it is on.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from punctual_cli.client import InvalidDefinition, validate_definition
from punctual_cli.context import EXIT_REFUSED, EXIT_USAGE
from scheduler.core.jobs.secrecy import submitted_problem
from scheduler.core.model.cron import misplaced_no_specific_value
from scheduler.core.model.job import JobSpec
from scheduler.core.model.labels import MAX_EXTERNAL_ID, external_id_problem, label_value_problem
from scheduler.core.model.schedules import CronSchedule

#: The label naming who owns a job declared as code (a jobs file's `managed_by`, or `cdk.<stack name>`).
MANAGED_BY = "punctual.dev/managed-by"
#: The top-level keys of a jobs file.
FILE_KEYS = ("managed_by", "jobs")
#: Other top-level keys that start with it are ignored: a place for YAML anchors (`x-defaults: &defaults`).
EXTENSION_PREFIX = "x-"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def external_id_for(owner: str, name: str) -> str:
    """The external id of the job `name` of `owner`: how apply finds it again."""
    return f"{owner}:{name}"


def owner_problem(owner: object) -> str | None:
    """Why `owner` cannot own jobs (it is the value of the managed-by label, and the external ids' prefix), or
    None."""
    if not isinstance(owner, str) or not owner:
        return "managed_by must be a non-empty text: who owns these jobs, e.g. team-billing"
    problem = label_value_problem(MANAGED_BY, owner)
    if problem is not None:
        return (
            f"managed_by {owner!r} cannot be the value of the label {MANAGED_BY}: it must be 1-63 letters, digits, "
            "'-', '_' or '.', beginning and ending with a letter or digit"
        )
    return None


def name_problem(owner: str, name: object) -> str | None:
    """Why `name` cannot name a job of `owner` (its external id is `{owner}:{name}`), or None."""
    if not isinstance(name, str):
        return f"a job name is a text, not {_yaml_kind(name)}; quote it"
    if external_id_problem(external_id_for(owner, name)) is not None or not name:
        room = MAX_EXTERNAL_ID - len(owner) - 1
        return (
            f"job name {name[:140]!r} cannot be part of the external id '{owner}:<name>': a name is 1-{room} "
            "printable ASCII characters without spaces or '/'"
        )
    return None


@dataclass(frozen=True)
class FileProblem:
    """One thing wrong in a jobs file: where (a line, when known) and what."""

    line: int | None
    message: str
    job: str | None = None
    field: str | None = None

    def text(self, source: str) -> str:
        where = f"{source}:{self.line}" if self.line is not None else source
        job = f" job '{self.job}':" if self.job is not None else ""
        return f"{where}:{job} {self.message}"

    def document(self) -> dict[str, Any]:
        return {"line": self.line, "job": self.job, "field": self.field, "message": self.message}


class JobsFileError(Exception):
    """A jobs file that cannot be applied: every problem found, and the exit code (2 for a file that is not a jobs
    file at all, 1 for definitions the API would refuse)."""

    def __init__(self, source: str, problems: Sequence[FileProblem], exit_code: int) -> None:
        super().__init__(f"{source}: {len(problems)} problem(s)")
        self.source = source
        self.problems = tuple(problems)
        self.exit_code = exit_code


@dataclass(frozen=True)
class DesiredJob:
    """A job as the file declares it: its name, the line it starts on, the checked definition (with its external
    id, its managed-by label and its name) and the definition as the file writes it (as JSON)."""

    name: str
    line: int
    spec: JobSpec
    written: dict[str, Any] = field(default_factory=dict)

    @property
    def external_id(self) -> str:
        assert self.spec.external_id is not None
        return self.spec.external_id


@dataclass(frozen=True)
class JobsFile:
    source: str
    owner: str
    jobs: tuple[DesiredJob, ...]

    @property
    def selector(self) -> dict[str, str | None]:
        """The label selector of the owner's jobs."""
        return {MANAGED_BY: self.owner}


def read_jobs_file(path: str) -> JobsFile:
    """The jobs file at `path` (`-`: standard input), checked; JobsFileError naming each problem's line."""
    source = "<stdin>" if path == "-" else path
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise JobsFileError(source, [FileProblem(None, f"cannot read it: {exc.strerror}")], EXIT_USAGE) from None
    except UnicodeDecodeError as exc:
        raise JobsFileError(source, [FileProblem(None, f"is not UTF-8 text: {exc.reason}")], EXIT_USAGE) from None
    return parse_jobs_file(text, source)


def parse_jobs_file(text: str, source: str) -> JobsFile:
    """A jobs file's text, checked: its YAML, its shape, the owner, each name and each definition."""
    root, document = _load(text, source)
    shape = _shape_problems(root, document)
    if shape:
        raise JobsFileError(source, shape, EXIT_USAGE)
    assert isinstance(root, MappingNode)
    owner = document["managed_by"]
    problem = owner_problem(owner)
    if problem is not None:
        raise JobsFileError(source, [FileProblem(_line(_value_node(root, "managed_by")), problem)], EXIT_REFUSED)
    jobs_node = _value_node(root, "jobs")
    nodes = _nodes_by_key(jobs_node)
    problems: list[FileProblem] = []
    desired: list[DesiredJob] = []
    for name, raw in document["jobs"].items():
        key_node, value_node = nodes.get(str(name), (jobs_node, jobs_node))
        line = _line(key_node)
        wrong_name = name_problem(owner, name)
        if wrong_name is not None:
            problems.append(FileProblem(line, wrong_name))
            continue
        try:
            desired.append(_desired_job(owner, name, raw, value_node, line))
        except JobsFileError as refused:
            problems.extend(refused.problems)
    if problems:
        raise JobsFileError(source, problems, EXIT_REFUSED)
    return JobsFile(source, owner, tuple(desired))


# -- YAML with lines -------------------------------------------------------------------------------------------


def _load(text: str, source: str) -> tuple[Node | None, Any]:
    """The document's node tree (every node with its line) and its value; a YAML error names its line and column.
    Duplicate keys are refused (YAML forbids them; PyYAML would keep the last one silently)."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is not None:
            duplicate = _first_duplicate(root, set())
            if duplicate is not None:
                key, first = duplicate
                raise JobsFileError(
                    source,
                    [FileProblem(_line(key), f"the key {key.value!r} is given twice (first on line {_line(first)})")],
                    EXIT_USAGE,
                )
        document = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as exc:
        raise JobsFileError(source, [_yaml_problem(exc)], EXIT_USAGE) from None
    except yaml.YAMLError as exc:
        raise JobsFileError(source, [FileProblem(None, f"is not valid YAML: {exc}")], EXIT_USAGE) from None
    finally:
        loader.dispose()
    return root, document


def _yaml_problem(exc: yaml.MarkedYAMLError) -> FileProblem:
    mark = exc.problem_mark or exc.context_mark
    what = ": ".join(part for part in (exc.context, exc.problem) if part)
    hint = ""
    if exc.context == "while scanning an alias":
        hint = " (a value that starts with '*' must be quoted, e.g. expression: \"*/5 * * * *\")"
    column = f", column {mark.column + 1}" if mark is not None else ""
    return FileProblem(mark.line + 1 if mark is not None else None, f"is not valid YAML{column}: {what}{hint}")


def _first_duplicate(node: Node, seen: set[int]) -> tuple[ScalarNode, ScalarNode] | None:
    """The first key given twice in one mapping (merge keys `<<` aside), with its first occurrence."""
    if id(node) in seen:
        return None
    seen.add(id(node))
    children: list[Node] = []
    if isinstance(node, MappingNode):
        keys: dict[tuple[str, str], ScalarNode] = {}
        for key, value in node.value:
            if isinstance(key, ScalarNode) and key.tag != _MERGE_TAG:
                if (key.tag, key.value) in keys:
                    return key, keys[(key.tag, key.value)]
                keys[(key.tag, key.value)] = key
            children += [key, value]
    elif isinstance(node, SequenceNode):
        children = list(node.value)
    for child in children:
        found = _first_duplicate(child, seen)
        if found is not None:
            return found
    return None


def _line(node: Node | None) -> int | None:
    return node.start_mark.line + 1 if node is not None else None


def _pairs(node: MappingNode) -> Iterator[tuple[Node, Node]]:
    """A mapping's (key, value) nodes as the loader left them (merged keys first, then the mapping's own)."""
    yield from node.value


def _nodes_by_key(node: Node | None) -> dict[str, tuple[Node, Node]]:
    """A mapping node's (key, value) nodes by the key's text (the last one: a mapping's own key overrides a merged
    one)."""
    if not isinstance(node, MappingNode):
        return {}
    return {str(key.value): (key, value) for key, value in _pairs(node) if isinstance(key, ScalarNode)}


def _value_node(node: Node | None, key: str) -> Node | None:
    """The node of `key`'s value in a mapping node."""
    found = _nodes_by_key(node).get(key)
    return found[1] if found else None


def locate(node: Node | None, path: Sequence[str]) -> Node | None:
    """Where the deepest field along a path (`schedule.expression`, `target.headers.X-Api.Key`) that the file has
    is written: its key (an item's node in a list), or None when not even the first field is there. A key that
    holds dots is matched whole."""
    if not path:
        return None
    if isinstance(node, SequenceNode):
        if path[0].isdigit() and int(path[0]) < len(node.value):
            item = node.value[int(path[0])]
            return locate(item, path[1:]) or item
        return None
    by_key = _nodes_by_key(node)
    for taken in range(len(path), 0, -1):  # the longest key first: a header name may hold dots
        if ".".join(path[:taken]) in by_key:
            key, value = by_key[".".join(path[:taken])]
            return locate(value, path[taken:]) or key
    return None


# -- the file's shape ------------------------------------------------------------------------------------------


def _shape_problems(root: Node | None, document: Any) -> list[FileProblem]:
    if not isinstance(document, dict) or not isinstance(root, MappingNode):
        return [FileProblem(_line(root) or 1, "a jobs file is a mapping with managed_by: OWNER and jobs: {NAME: ...}")]
    problems = []
    for key_node, _ in _pairs(root):
        key = key_node.value if isinstance(key_node, ScalarNode) else None
        if key not in FILE_KEYS and not (isinstance(key, str) and key.startswith(EXTENSION_PREFIX)):
            problems.append(
                FileProblem(
                    _line(key_node),
                    f"unknown key {key!r}; a jobs file has managed_by and jobs (and x-... keys for YAML anchors)",
                )
            )
    if "managed_by" not in document:
        problems.append(FileProblem(_line(root), "managed_by is missing: who owns these jobs, e.g. team-billing"))
    jobs = document.get("jobs", {})
    if "jobs" not in document:
        problems.append(FileProblem(_line(root), "jobs is missing: a mapping of job name to job definition"))
    elif jobs is not None and not isinstance(jobs, dict):
        problems.append(
            FileProblem(_line(_value_node(root, "jobs")), "jobs must be a mapping of job name to job definition")
        )
    if jobs is None:
        document["jobs"] = {}  # `jobs:` with nothing under it: no jobs (with --prune, every job of the owner goes)
    return problems


def _yaml_kind(value: object) -> str:
    return {
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


# -- a job's definition ----------------------------------------------------------------------------------------


def _desired_job(owner: str, name: str, raw: Any, node: Node | None, line: int | None) -> DesiredJob:
    """The job `name` as the file declares it, checked as `POST /v1/jobs` checks it."""
    start = line or 1

    def refused(path: Sequence[str], message: str) -> JobsFileError:
        problem = FileProblem(_field_line(node, start, path), message, name, ".".join(path) or None)
        return JobsFileError("", [problem], EXIT_REFUSED)

    if not isinstance(raw, dict):
        raise refused((), f"a job definition is a mapping (schedule, target, ...), not {_yaml_kind(raw)}")
    try:
        definition = _json_shaped(raw)
    except ValueError as exc:
        raise refused((), str(exc)) from None
    if "external_id" in definition:
        raise refused(
            ("external_id",),
            f"external_id is set by apply ('{external_id_for(owner, name)}'); leave it out",
        )
    labels = definition.get("labels", {})
    if isinstance(labels, dict):
        if labels.get(MANAGED_BY, owner) != owner:
            raise refused(
                ("labels", MANAGED_BY),
                f"the label {MANAGED_BY} is set by apply to managed_by ({owner!r}); leave it out",
            )
        definition["labels"] = {**labels, MANAGED_BY: owner}
    written = json.loads(json.dumps(definition))
    definition.setdefault("name", name)
    definition["external_id"] = external_id_for(owner, name)
    try:
        spec = validate_definition(definition)
    except InvalidDefinition as exc:
        problems = [_field_problem(node, start, name, error.field, error.message) for error in exc.errors]
        if not problems:  # the payload's size (a 413) names no field
            problems = [FileProblem(_field_line(node, start, ["payload"]), exc.detail, name, "payload")]
        raise JobsFileError("", problems, EXIT_REFUSED) from None
    # What the API checks beyond the model (scheduler.core.jobs.service): a URL without credentials, a cron
    # expression without a misplaced '?'.
    submitted = submitted_problem(spec)
    if submitted is not None:
        raise refused(tuple((submitted.field or "").split(".")), f"{submitted.field}: {submitted}")
    if isinstance(spec.schedule, CronSchedule):
        misplaced = misplaced_no_specific_value(spec.schedule.expression)
        if misplaced is not None:
            raise refused(("schedule", "expression"), f"schedule.expression: {misplaced}")
    return DesiredJob(name, start, spec, written)


def _field_problem(node: Node | None, start: int, name: str, path: str, message: str) -> FileProblem:
    return FileProblem(_field_line(node, start, path.split(".")), f"{path}: {message}", name, path)


def _field_line(node: Node | None, start: int, path: Sequence[str]) -> int:
    """The line of a job's field, else of the nearest enclosing field the file has, else of the job's name
    (`start`): a missing field is reported where its parent, or its job, is."""
    return _line(locate(node, path)) or start


def _json_shaped(raw: dict[Any, Any]) -> dict[str, Any]:
    """The definition as the JSON the API receives: a YAML timestamp becomes its RFC 3339 text, a key its JSON
    text (`200:` is "200"); anything JSON cannot carry (NaN, binary, a set) is refused."""

    def plain(value: Any) -> Any:
        if isinstance(value, datetime | date):
            return value.isoformat()
        raise ValueError(f"a {_yaml_kind(value)} cannot be sent as JSON")

    try:
        shaped: dict[str, Any] = json.loads(json.dumps(raw, default=plain, allow_nan=False))
    except ValueError as exc:
        raise ValueError(f"the definition holds a value JSON cannot carry: {exc}") from None
    except TypeError as exc:
        raise ValueError(f"the definition holds a key JSON cannot carry: {exc}") from None
    return shaped
