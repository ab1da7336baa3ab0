"""The job commands: submit, get, list, edit, pause/resume/cancel, trigger, runs, resolve, preview."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from pydantic import TypeAdapter, ValidationError

from punctual_cli import output
from punctual_cli.client import (
    ApiError,
    Job,
    SchedulerClient,
    TransportError,
    definition_problem,
    merge_patch,
    validate_definition,
)
from punctual_cli.context import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, Context, exit_code_for, listing, problem_document
from punctual_cli.definition import (
    UsageError,
    definition_from_args,
    edit_patch,
    label_pair,
    parse_instant,
    schedule_from_args,
)
from punctual_cli.progress import Progress
from scheduler.core.model.keys import split_occurrence_key
from scheduler.core.model.schedules import Schedule, preview
from scheduler.core.model.timefmt import rfc3339, truncate_ms


def _job_line(verb: str, job: Job) -> str:
    next_run = f"; next run {rfc3339(job.next_run_at)}" if job.next_run_at else ""
    return f"{verb} job {job.job_id} ({job.state.value}, version {job.version}){next_run}"


def read_job_file(path: str) -> tuple[list[tuple[int, Any]], bool]:
    """The definitions in a file, each with its line (JSONL) or position (JSON array); and whether the file
    is a bulk file (JSONL or array) rather than one definition."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise UsageError(f"--file: cannot read '{path}': {exc.strerror}") from None
    if path.endswith((".jsonl", ".ndjson")):
        entries = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip() and not line.lstrip().startswith("#"):
                try:
                    entries.append((number, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path} line {number} is not valid JSON: {exc.msg}") from None
        return entries, True
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if isinstance(document, list):
        return list(enumerate(document, start=1)), True
    return [(1, document)], False


def cmd_submit(ctx: Context) -> int:
    args = ctx.args
    base: Any = None
    if args.file:
        entries, bulk = read_job_file(args.file)
        if bulk:
            return bulk_submit(ctx, entries)
        base = entries[0][1]
        if not isinstance(base, dict):
            raise UsageError(f"{args.file} must hold a JSON object (a job definition)")
    spec = validate_definition(definition_from_args(args, base))
    # A key even when none is given: the client's own retry of a lost response then cannot create a twin.
    job = ctx.client().create(spec, args.idempotency_key or f"cli-{uuid.uuid4()}")
    return ctx.show(job.raw, lambda: _job_line("replayed" if job.replayed else "created", job))


#: Definitions a bulk submit sends per `POST /v1/jobs/batch` (the API's limit).
BATCH = 25


def bulk_submit(ctx: Context, entries: list[tuple[int, Any]]) -> int:
    """Submit every definition of a JSONL file (flags apply on top of each). All are validated before any is
    sent. Line N is sent with Idempotency-Key `<prefix>:N`, so re-running with the same --idempotency-key
    after an interruption replays the jobs already created instead of creating them twice."""
    args = ctx.args
    if not entries:
        raise UsageError(f"{args.file} holds no job definitions")
    specs = []
    invalid: list[tuple[int, ApiError | UsageError]] = []
    for number, entry in entries:
        try:
            if not isinstance(entry, dict):
                raise UsageError("not a JSON object")
            specs.append((number, validate_definition(definition_from_args(args, entry))))
        except (ApiError, UsageError) as refused:
            invalid.append((number, refused))
    if invalid:
        for number, problem in invalid:
            if isinstance(problem, ApiError):
                ctx.note(f"line {number}: {problem.detail}")
                for error in problem.errors[1:]:
                    ctx.note(f"line {number}:   {error.field}: {error.message}")
            else:
                ctx.note(f"line {number}: {problem}")
        ctx.note(f"{len(invalid)} of {len(entries)} definitions are invalid; nothing was submitted")
        return EXIT_REFUSED if all(isinstance(e, ApiError) for _, e in invalid) else EXIT_USAGE
    prefix = args.idempotency_key or f"cli-{uuid.uuid4()}"
    client = ctx.client()
    progress = Progress("submitting", ctx.err, len(specs))
    results: list[tuple[int, Job | ApiError]] = []
    first_failure = EXIT_OK
    # Up to BATCH definitions a request (POST /v1/jobs/batch): one API Gateway request and one Lambda for them all.
    for start in range(0, len(specs), BATCH):
        chunk = specs[start : start + BATCH]
        try:
            answers: list[Job | ApiError] = client.create_batch([(s, f"{prefix}:{n}") for n, s in chunk])
        except ApiError as exc:  # the whole request was refused: every item of it has that answer
            answers = [exc] * len(chunk)
        except TransportError:
            progress.finish()
            ctx.note(
                f"stopped at line {chunk[0][0]}: the API cannot be reached. Re-run with --idempotency-key {prefix} "
                "to continue; jobs already created are replayed, not created again."
            )
            raise
        for (number, _), answer in zip(chunk, answers, strict=True):
            results.append((number, answer))
            if isinstance(answer, ApiError):
                first_failure = first_failure or exit_code_for(answer.status)
                progress.advance("failed")
                if ctx.as_json:
                    ctx.emit_line({"line": number, "status": answer.status, "problem": problem_document(answer)})
                continue
            progress.advance("replayed" if answer.replayed else "created")
            if ctx.as_json:
                ctx.emit_line(
                    {"line": number, "job_id": answer.job_id, "state": answer.state.value, "replayed": answer.replayed}
                )
    progress.finish()
    if not ctx.as_json:
        rows = [
            (number, r.job_id, r.state.value, output.when(r.next_run_at))
            if isinstance(r, Job)
            else (number, None, f"error {r.status}", r.detail)
            for number, r in results
        ]
        ctx.say(output.table(("LINE", "JOB ID", "STATE", "NEXT RUN / ERROR"), rows))
    ctx.note(f"idempotency key prefix: {prefix} (re-run with --idempotency-key {prefix} to retry safely)")
    return first_failure


def cmd_get(ctx: Context) -> int:
    job = ctx.client().get(ctx.args.job_id, ctx.args.preview)
    return ctx.show(job.raw, lambda: output.job_detail(job))


def cmd_list(ctx: Context) -> int:
    client, args = ctx.client(), ctx.args
    labels: dict[str, str | None] = {k: v or None for k, v in (label_pair(t, "=") for t in args.label or [])}
    filters = {"labels": labels, "target_type": args.target_type, "name_prefix": args.name_prefix}
    return listing(
        ctx,
        "jobs",
        args.state,
        lambda state, size: client.iter_jobs(state, size, **filters),
        lambda state, limit, cursor: client.list_jobs(state, limit, cursor, **filters),
        output.job_table,
        "no jobs",
    )


def cmd_edit(ctx: Context) -> int:
    """Read the job, build the merge patch, check the result as the API would, then PATCH with If-Match (the
    given version, else the version just read: an edit computed from a read never overwrites a newer one)."""
    args = ctx.args
    client = ctx.client()
    current = client.get(args.job_id)
    patch = edit_patch(args, current.raw)
    if not patch:
        raise UsageError("nothing to change: give definition flags (see --help), --patch or --set KEY=VALUE")
    validate_definition(merge_patch(current.definition, patch))
    if_match = args.if_match if args.if_match is not None else current.version
    job = client.update(args.job_id, patch, if_match)
    return ctx.show(job.raw, lambda: _job_line("updated", job))


def state_change(verb: str, call: Callable[[SchedulerClient, str], Job]) -> Callable[[Context], int]:
    def command(ctx: Context) -> int:
        job = call(ctx.client(), ctx.args.job_id)
        return ctx.show(job.raw, lambda: _job_line(verb, job))

    return command


def cmd_trigger(ctx: Context) -> int:
    triggered = ctx.client().trigger(ctx.args.job_id)
    return ctx.show(triggered.raw, lambda: f"triggered {triggered.occurrence_key}")


def cmd_runs(ctx: Context) -> int:
    client = ctx.client()
    return listing(ctx, "runs", ctx.args.job_id, client.iter_runs, client.runs, output.run_table, "no runs yet")


def cmd_resolve(ctx: Context) -> int:
    args = ctx.args
    try:
        job_id = args.job or split_occurrence_key(args.occurrence_key)[0]
    except ValueError:
        raise UsageError(f"'{args.occurrence_key}' is not an occurrence key (JOB_ID:SCHEDULED_FOR)") from None
    run = ctx.client().resolve(args.occurrence_key, args.outcome, args.note, job_id)
    return ctx.show(run.raw, lambda: f"resolved {run.occurrence_key}: {run.state.value}")


def cmd_preview(ctx: Context) -> int:
    """The next occurrences of a schedule, computed here with the scheduler's own code; nothing is sent."""
    args = ctx.args
    schedule = schedule_from_args(args)
    if schedule is None:
        raise UsageError("give a schedule: --cron EXPR [--tz ZONE], --every DURATION, --at TIME or --in DURATION")
    try:
        parsed = TypeAdapter(Schedule).validate_python(schedule)
    except ValidationError as exc:
        raise definition_problem(exc, at=("schedule",)) from None
    now = truncate_ms(datetime.now(UTC))  # as the API stamps created_at: rate anchors fall on whole ms
    after = datetime.fromisoformat(parse_instant(args.after, args.tz, "--after")) if args.after else now
    instants = preview(parsed, after, now, args.count)
    if ctx.as_json:
        ctx.emit({"schedule": parsed.model_dump(mode="json", exclude_none=True),
                  "occurrences": [rfc3339(t) for t in instants]})  # fmt: skip
        return EXIT_OK
    zone_name = args.tz or getattr(parsed, "timezone", None)
    zone = ZoneInfo(zone_name) if zone_name and zone_name != "UTC" else None
    ctx.say(output.preview_table(instants, zone) if instants else "no occurrences after that time")
    return EXIT_OK


def cmd_flows(ctx: Context) -> int:
    """`punctual flows [KEY]`: your flow-control keys (or one), with their limits and what they hold now."""
    client = ctx.client()
    key = ctx.args.key
    if key is not None:
        one = client.flow_control(key)
        return ctx.show(one.raw, lambda: _flow_lines([one.raw]))
    keys = [k.raw for k in client.flow_controls()]
    return ctx.show({"keys": keys}, lambda: _flow_lines(keys) if keys else "no flow-control keys")


def _flow_lines(keys: list[dict[str, Any]]) -> str:
    lines = [f"{'KEY':<32} {'RATE':>12} {'PARALLEL':>8} {'BACKLOG':>8} {'IN FLIGHT':>9} {'RATE/S 1M':>9}  STATE"]
    for k in keys:
        rate = f"{k['rate']}/{k.get('period_seconds', 1)}s" if k.get("rate") is not None else "-"
        parallel = str(k["parallelism"]) if k.get("parallelism") is not None else "-"
        state = f"paused until {k['paused_until']}" if k.get("paused_until") else ""
        if not state and float(k.get("rate_factor", 1.0)) < 1.0:
            state = f"backed off to {float(k['rate_factor']):.0%} of its rate"
        lines.append(
            f"{k['key']:<32} {rate:>12} {parallel:>8} {int(k.get('backlog', 0)):>8} {int(k.get('in_flight', 0)):>9} "
            f"{float(k.get('rate_last_minute', 0)):>9.2f}  {state}".rstrip()
        )
    return "\n".join(lines)
