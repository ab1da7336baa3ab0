"""`punctual`: the command line of the punctual scheduler.

Exit codes (for scripts):
  0  done
  1  the API refused the request (4xx), or a definition was refused before sending for the same reason
  2  usage: a wrong or missing flag, or no stack/credentials to talk to
  3  not found (404): no such job for this caller
  4  conflict (409) or precondition failed (412): e.g. a stale --if-match, a cancelled job
  5  the API or AWS failed (5xx) or could not be reached
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TextIO, TypeVar
from zoneinfo import ZoneInfo

from pydantic import TypeAdapter, ValidationError

from punctual_cli import output
from punctual_cli.client import (
    ApiError,
    AuthError,
    BackfillView,
    FieldError,
    InvalidDefinition,
    JobView,
    Page,
    SchedulerClient,
    TransportError,
    definition_problem,
    merge_patch,
    validate_definition,
)
from punctual_cli.config import (
    Connection,
    Deployment,
    aws_deployment,
    connection,
    default_state_dir,
    local_deployment,
    stack_outputs,
)
from punctual_cli.dead_letters import dead_letter_count, outcome_of, run_redrive
from punctual_cli.definition import (
    UsageError,
    add_definition_flags,
    add_schedule_flags,
    definition_from_args,
    edit_patch,
    parse_duration,
    parse_instant,
    schedule_from_args,
)
from punctual_cli.forecast import chart as forecast_chart
from punctual_cli.progress import Progress
from punctual_cli.status import collect, render
from scheduler.core.keys import split_occurrence_key
from scheduler.core.model import JobState
from scheduler.core.schedules import Schedule, preview
from scheduler.core.timefmt import rfc3339, truncate_ms

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_UNAVAILABLE = 5

#: How `backfill status --watch` waits between polls (tests replace it to poll at once).
sleep: Callable[[float], None] = time.sleep
#: Seconds between polls of `backfill status --watch` without --interval.
WATCH_INTERVAL = 2

EXIT_CODES_HELP = """exit codes:
  0 ok, 1 refused by the API (4xx; the detail and fields say what to fix), 2 usage error,
  3 not found (404), 4 conflict or stale --if-match (409/412), 5 server or network error"""


def exit_code_for(status: int) -> int:
    """The exit code for an HTTP error status."""
    if status == 404:
        return EXIT_NOT_FOUND
    if status in (409, 412):
        return EXIT_CONFLICT
    if 400 <= status < 500:
        return EXIT_REFUSED
    return EXIT_UNAVAILABLE


class Context:
    """What a command needs: its arguments, its output streams, and (made on first use) the API client, the
    AWS session and the deployment behind the API."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO, client: SchedulerClient | None) -> None:
        self.args = args
        self.out = out
        self.err = err
        self._client = client
        self._session: Any = None
        self._outputs: dict[str, str] | None = None
        self.connection: Connection | None = None

    @property
    def as_json(self) -> bool:
        return bool(self.args.json)

    @property
    def state_dir(self) -> Path:
        return Path(self.args.state_dir) if self.args.state_dir else default_state_dir()

    def session(self) -> Any:
        if self._session is None:
            import boto3

            self._session = boto3.Session(profile_name=self.args.profile, region_name=self.args.region)
        return self._session

    def outputs(self) -> dict[str, str] | None:
        if self.args.stack and self._outputs is None:
            self._outputs = stack_outputs(self.args.stack, self.session())
        return self._outputs

    def client(self) -> SchedulerClient:
        if self._client is None:
            self.connection = connection(
                api=self.args.api,
                token=self.args.token,
                aws=self.args.aws,
                state_dir=self.state_dir,
                stack_outputs=self.outputs(),
                make_session=self.session,
                region=self.args.region,
            )
            self._client = SchedulerClient(self.connection.api_url, self.connection.auth)
        return self._client

    def deployment(self) -> Deployment:
        if self.args.stack:
            return aws_deployment(self.args.stack, self.session(), self.outputs())
        return local_deployment(self.state_dir)

    def say(self, text: str) -> None:
        print(text, file=self.out)

    def note(self, text: str) -> None:
        print(text, file=self.err)

    def emit(self, document: Any) -> None:
        print(json.dumps(document, indent=2, default=str), file=self.out)

    def emit_line(self, document: Any) -> None:
        print(json.dumps(document, default=str), file=self.out, flush=True)


# -- commands ---------------------------------------------------------------------------------------------


def _job_line(verb: str, job: JobView) -> str:
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
    if ctx.as_json:
        ctx.emit(job.raw)
    else:
        ctx.say(_job_line("replayed" if job.replayed else "created", job))
    return EXIT_OK


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
    results: list[tuple[int, JobView | ApiError]] = []
    first_failure = EXIT_OK
    # Up to BATCH definitions a request (POST /v1/jobs/batch): one API Gateway request and one Lambda for them all.
    for start in range(0, len(specs), BATCH):
        chunk = specs[start : start + BATCH]
        try:
            answers: list[JobView | ApiError] = client.create_batch([(s, f"{prefix}:{n}") for n, s in chunk])
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
                    ctx.emit_line({"line": number, "status": answer.status, "problem": _problem(answer)})
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
            if isinstance(r, JobView)
            else (number, None, f"error {r.status}", r.detail)
            for number, r in results
        ]
        ctx.say(output.table(("LINE", "JOB ID", "STATE", "NEXT RUN / ERROR"), rows))
    ctx.note(f"idempotency key prefix: {prefix} (re-run with --idempotency-key {prefix} to retry safely)")
    return first_failure


def cmd_get(ctx: Context) -> int:
    job = ctx.client().get(ctx.args.job_id, ctx.args.preview)
    if ctx.as_json:
        ctx.emit(job.raw)
    else:
        ctx.say(output.job_detail(job))
    return EXIT_OK


class _Listed(Protocol):
    @property
    def raw(self) -> dict[str, Any]: ...


L = TypeVar("L", bound=_Listed)


def _listing(
    ctx: Context,
    noun: str,
    every: Callable[[int], Iterable[L]],
    one_page: Callable[[int | None, str | None], Page[L]],
    table: Callable[[list[L]], str],
    empty: str,
) -> int:
    """A list command: one page (`--limit`, `--cursor`) or every page (`--all`), as a table or `--json` (the API's
    document: the items under `noun` and `next_cursor`)."""
    args = ctx.args
    next_cursor: str | None = None
    if args.all:
        found = list(every(args.limit or 100))
    else:
        page = one_page(args.limit, args.cursor)
        found, next_cursor = page.items, page.next_cursor
    if ctx.as_json:
        ctx.emit({noun: [item.raw for item in found], "next_cursor": next_cursor})
        return EXIT_OK
    ctx.say(table(found) if found else empty)
    if next_cursor:
        ctx.note(f"more {noun}: --cursor {next_cursor} (or --all)")
    return EXIT_OK


def cmd_list(ctx: Context) -> int:
    client, state = ctx.client(), ctx.args.state
    return _listing(
        ctx,
        "jobs",
        lambda size: client.iter_jobs(state, size),
        lambda limit, cursor: client.list_jobs(state, limit, cursor),
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
    if ctx.as_json:
        ctx.emit(job.raw)
    else:
        ctx.say(_job_line("updated", job))
    return EXIT_OK


def _state_change(verb: str, call: Callable[[SchedulerClient, str], JobView]) -> Callable[[Context], int]:
    def command(ctx: Context) -> int:
        job = call(ctx.client(), ctx.args.job_id)
        if ctx.as_json:
            ctx.emit(job.raw)
        else:
            ctx.say(_job_line(verb, job))
        return EXIT_OK

    return command


def cmd_trigger(ctx: Context) -> int:
    triggered = ctx.client().trigger(ctx.args.job_id)
    if ctx.as_json:
        ctx.emit(triggered.raw)
    else:
        ctx.say(f"triggered {triggered.occurrence_key}")
    return EXIT_OK


def cmd_runs(ctx: Context) -> int:
    client, job_id = ctx.client(), ctx.args.job_id
    return _listing(
        ctx,
        "runs",
        lambda size: client.iter_runs(job_id, size),
        lambda limit, cursor: client.runs(job_id, limit, cursor),
        output.run_table,
        "no runs yet",
    )


def cmd_backfill_list(ctx: Context) -> int:
    client, job_id = ctx.client(), ctx.args.job_id
    return _listing(
        ctx,
        "backfills",
        lambda size: client.iter_backfills(job_id, size),
        lambda limit, cursor: client.backfills(job_id, limit, cursor),
        output.backfill_table,
        "no backfills",
    )


def _backfill_line(verb: str, backfill: BackfillView) -> str:
    return f"{verb} backfill {backfill.backfill_id} of job {backfill.job_id} ({output.backfill_progress(backfill)})"


def _watch_command(backfill: BackfillView) -> str:
    return f"punctual backfill status {backfill.job_id} {backfill.backfill_id} --watch"


def cmd_backfill_start(ctx: Context) -> int:
    args = ctx.args
    range_from = datetime.fromisoformat(parse_instant(args.range_from, args.tz, "--from"))
    range_to = datetime.fromisoformat(parse_instant(args.to, args.tz, "--to"))
    backfill = ctx.client().start_backfill(args.job_id, range_from, range_to)
    if ctx.as_json:
        ctx.emit(backfill.raw)
        return EXIT_OK
    waves = backfill.waves_left
    ctx.say(
        f"started backfill {backfill.backfill_id} of job {backfill.job_id}: {backfill.total} occurrence"
        f"{'s' if backfill.total != 1 else ''} from {output.when(backfill.range_from)} to "
        f"{output.when(backfill.range_to)}, {waves} wave{'s' if waves != 1 else ''} left"
    )
    ctx.note(f"watch it: {_watch_command(backfill)}")
    return EXIT_OK


def _watch_backfill(ctx: Context, client: SchedulerClient, backfill: BackfillView) -> BackfillView:
    """Poll every --interval until the backfill is no longer RUNNING; each change is a line on stderr (with
    --json, a JSON line on stdout). Ctrl-C stops watching (exit 130), not the backfill."""
    args = ctx.args
    interval = args.interval or WATCH_INTERVAL
    shown: Any = None
    while True:
        if ctx.as_json:
            if backfill.raw != shown:
                ctx.emit_line(backfill.raw)
                shown = backfill.raw
        else:
            line = output.backfill_progress(backfill)
            if line != shown:
                ctx.note(f"{rfc3339(truncate_ms(datetime.now(UTC)))}  {line}")
                shown = line
        if not backfill.running:
            return backfill
        sleep(interval)
        backfill = client.backfill(args.job_id, args.backfill_id)


def cmd_backfill_status(ctx: Context) -> int:
    args = ctx.args
    if args.interval is not None and not args.watch:
        raise UsageError("--interval goes with --watch")
    client = ctx.client()
    backfill = client.backfill(args.job_id, args.backfill_id)
    if args.watch:
        backfill = _watch_backfill(ctx, client, backfill)
        if ctx.as_json:
            return EXIT_OK  # every change, the last one included, is already out as a JSON line
    if ctx.as_json:
        ctx.emit(backfill.raw)
    else:
        ctx.say(output.backfill_detail(backfill))
    return EXIT_OK


def cmd_backfill_cancel(ctx: Context) -> int:
    backfill = ctx.client().cancel_backfill(ctx.args.job_id, ctx.args.backfill_id)
    if ctx.as_json:
        ctx.emit(backfill.raw)
        return EXIT_OK
    ctx.say(_backfill_line("cancelled", backfill))
    if backfill.dispatched:
        ctx.note(
            f"the {backfill.dispatched} occurrence{'s' if backfill.dispatched != 1 else ''} already dispatched "
            "still run (cancel the job to stop those too)"
        )
    return EXIT_OK


def cmd_resolve(ctx: Context) -> int:
    args = ctx.args
    try:
        job_id = args.job or split_occurrence_key(args.occurrence_key)[0]
    except ValueError:
        raise UsageError(f"'{args.occurrence_key}' is not an occurrence key (JOB_ID:SCHEDULED_FOR)") from None
    run = ctx.client().resolve(args.occurrence_key, args.outcome, args.note, job_id)
    if ctx.as_json:
        ctx.emit(run.raw)
    else:
        ctx.say(f"resolved {run.occurrence_key}: {run.state.value}")
    return EXIT_OK


def cmd_preview(ctx: Context) -> int:
    """The next occurrences of a schedule, computed here with the scheduler's own code; nothing is sent."""
    args = ctx.args
    schedule = schedule_from_args(args)
    if schedule is None:
        raise UsageError("give a schedule: --cron EXPR [--tz ZONE], --every DURATION, --at TIME or --in DURATION")
    try:
        parsed = TypeAdapter(Schedule).validate_python(schedule)
    except ValidationError as exc:
        problem = definition_problem(exc)
        errors = tuple(FieldError(f"schedule.{e.field}".rstrip("."), e.message) for e in problem.errors)
        raise InvalidDefinition(422, problem.title, f"schedule.{problem.detail}", errors) from None
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


def _redrive(ctx: Context, dry_run: bool) -> int:
    args = ctx.args
    deployment = ctx.deployment()
    total = dead_letter_count(deployment)
    label = "reading dead letters" if dry_run else "redriving"
    progress = Progress(label, ctx.err, min(total, args.limit), approximate=True)
    lines = run_redrive(
        deployment,
        dry_run=dry_run,
        limit=args.limit,
        purge_refused=getattr(args, "purge_refused", False),
        progress=lambda line: progress.advance(outcome_of(line)),
    )
    if progress.done or total:
        progress.finish()
    if ctx.as_json:
        for line in lines:
            ctx.emit_line(asdict(line))
    elif lines:
        ctx.say(output.redrive_table(lines))
    else:
        ctx.say("the dead-letter queue is empty")
    counts = dict(progress.outcomes)
    summary = ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items())) or "nothing to do"
    ctx.note(f"{len(lines)} dead letter{'s' if len(lines) != 1 else ''} in {deployment.description}: {summary}")
    return EXIT_OK


def cmd_dlq_list(ctx: Context) -> int:
    return _redrive(ctx, dry_run=True)


def cmd_dlq_redrive(ctx: Context) -> int:
    return _redrive(ctx, dry_run=ctx.args.dry_run)


def cmd_status(ctx: Context) -> int:
    status = collect(ctx.deployment())
    if ctx.as_json:
        ctx.emit(status.to_json())
    else:
        ctx.say(render(status))
    return EXIT_UNAVAILABLE if status.problems else EXIT_OK


def cmd_forecast(ctx: Context) -> int:
    body = ctx.client().forecast(ctx.args.minutes)
    if ctx.as_json:
        ctx.emit(body)
    else:
        ctx.say(forecast_chart(body))
    return EXIT_OK


def cmd_health(ctx: Context) -> int:
    client = ctx.client()
    body = client.health()
    if ctx.as_json:
        ctx.emit(body)
    else:
        ctx.say(f"{body.get('status', 'unknown')} ({client.base_url})")
    return EXIT_OK


# -- the parser -------------------------------------------------------------------------------------------


def _add_global_options(parser: argparse.ArgumentParser, *, on_subcommand: bool) -> None:
    """Global options work before or after the command (`punctual --json list` = `punctual list --json`)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if on_subcommand else value

    group = parser.add_argument_group("connection and output")
    group.add_argument(
        "--api",
        metavar="URL",
        default=default(None),
        help="API URL (default: $PUNCTUAL_API_URL, else SCHEDULER_API_URL from <state dir>/stack.json, "
        "else http://127.0.0.1:8080)",
    )
    group.add_argument(
        "--token",
        default=default(None),
        help="bearer token for the local stack (default: $PUNCTUAL_TOKEN or dev-token)",
    )
    group.add_argument(
        "--aws",
        action="store_true",
        default=default(False),
        help="sign with SigV4 (automatic for execute-api URLs and with --stack)",
    )
    group.add_argument(
        "--stack",
        metavar="NAME",
        default=default(None),
        help="a deployed CloudFormation stack: API URL, tables, queues",
    )
    group.add_argument("--region", default=default(None), help="AWS region (default: from the URL or your profile)")
    group.add_argument("--profile", default=default(None), help="AWS profile of the credential chain")
    group.add_argument(
        "--state-dir",
        metavar="DIR",
        default=default(None),
        help="the local stack's state folder (default: $SCHEDULER_STATE_DIR or .local)",
    )
    group.add_argument("--json", action="store_true", default=default(False), help="machine-readable output")


def _version(text: str) -> int:
    cleaned = text.strip().removeprefix("W/").strip('"')
    if not cleaned.isdigit():
        raise argparse.ArgumentTypeError(f"a job version is a whole number (e.g. 3), not '{text}'")
    return int(cleaned)


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, not '{text}'")
    return int(text)


def _interval(text: str) -> int:
    try:
        seconds = parse_duration(text)
    except UsageError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"poll at most once a second, not every '{text}'")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="punctual",
        description="Schedule jobs on punctual and look after them.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_global_options(parser, on_subcommand=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, handler: Callable[[Context], int], help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text, epilog=EXIT_CODES_HELP,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        sub.set_defaults(run=handler)
        _add_global_options(sub, on_subcommand=True)
        return sub

    submit = command("submit", cmd_submit, "create a job (from flags, a JSON file, or many from a JSONL file)")
    submit.add_argument("--file", metavar="PATH", help="job.json (flags apply on top), or jobs.jsonl / a JSON array")
    submit.add_argument("--idempotency-key", metavar="KEY", help="a retry with this key returns the same job")
    add_definition_flags(submit)

    get = command("get", cmd_get, "show a job")
    get.add_argument("job_id")
    get.add_argument("--preview", type=int, default=0, metavar="N", help="also list the next N runs (up to 50)")

    listing = command("list", cmd_list, "list your jobs, oldest first")
    listing.add_argument("--state", type=str.upper, choices=[s.value for s in JobState])
    listing.add_argument("--limit", type=_positive, metavar="N", help="jobs per page (1-100, default 50)")
    listing.add_argument("--cursor", help="next_cursor of the previous page")
    listing.add_argument("--all", action="store_true", help="follow every page")

    edit = command("edit", cmd_edit, "change a job (a JSON merge patch of its definition)")
    edit.add_argument("job_id")
    edit.add_argument("--set", action="append", metavar="KEY=VALUE", help="e.g. retry.max_attempts=3, name=null")
    edit.add_argument("--patch", metavar="JSON|@FILE", help="a JSON merge patch")
    edit.add_argument("--if-match", type=_version, metavar="VERSION", help="fail (exit 4) unless the job is at it")
    add_definition_flags(edit)

    for name, verb, call, help_text in (
        ("cancel", "cancelled", SchedulerClient.cancel, "cancel a job (idempotent)"),
        ("pause", "paused", SchedulerClient.pause, "pause a job"),
        ("resume", "resumed", SchedulerClient.resume, "resume a job (missed runs per its misfire policy)"),
    ):
        command(name, _state_change(verb, call), help_text).add_argument("job_id")
    command("trigger", cmd_trigger, "run a job once more, now").add_argument("job_id")

    runs = command("runs", cmd_runs, "a job's run history, newest first")
    runs.add_argument("job_id")
    runs.add_argument("--limit", type=_positive, metavar="N", help="runs per page (1-100, default 50)")
    runs.add_argument("--cursor", help="next_cursor of the previous page")
    runs.add_argument("--all", action="store_true", help="follow every page")

    resolve = command("resolve", cmd_resolve, "settle a RECONCILING run")
    resolve.add_argument("occurrence_key", metavar="KEY")
    resolve.add_argument("--outcome", required=True, choices=["succeeded", "retry"])
    resolve.add_argument("--note", help="why (kept in the run's history)")
    resolve.add_argument("--job", help="the job id, if KEY does not start with it")

    forecasting = command("forecast", cmd_forecast, "your occurrences due per minute over the next hour (a chart)")
    forecasting.add_argument("--minutes", type=_positive, default=60, metavar="N", help="minutes ahead (1-180, 60)")

    backfill = command("backfill", lambda ctx: EXIT_USAGE, "a job's backfills of past ranges")
    backfill_commands = backfill.add_subparsers(
        dest="backfill_command", metavar="{list,start,status,cancel}", required=True
    )

    def backfill_command(name: str, handler: Callable[[Context], int], help_text: str) -> argparse.ArgumentParser:
        sub = backfill_commands.add_parser(name, help=help_text, description=help_text, epilog=EXIT_CODES_HELP,
                                           formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
        sub.set_defaults(run=handler)
        _add_global_options(sub, on_subcommand=True)
        sub.add_argument("job_id")
        return sub

    backfill_list = backfill_command("list", cmd_backfill_list, "a job's backfills, newest first, with their progress")
    backfill_list.add_argument("--limit", type=_positive, metavar="N", help="backfills per page (1-100, default 50)")
    backfill_list.add_argument("--cursor", help="next_cursor of the previous page")
    backfill_list.add_argument("--all", action="store_true", help="follow every page")
    backfill_start = backfill_command(
        "start", cmd_backfill_start, "run a recurring job's occurrences in a past range [FROM, TO), in waves"
    )
    backfill_start.add_argument(
        "--from", dest="range_from", required=True, metavar="TIME", help="start (inclusive): 2026-11-01T00:00:00Z"
    )
    backfill_start.add_argument("--to", required=True, metavar="TIME", help="end (exclusive), not in the future")
    backfill_start.add_argument("--tz", metavar="ZONE", help="IANA zone of offset-less times")
    backfill_status = backfill_command("status", cmd_backfill_status, "a backfill's state and progress")
    backfill_status.add_argument("backfill_id")
    watch = "poll until it is no longer RUNNING (with --json: a JSON line per change)"
    backfill_status.add_argument("--watch", action="store_true", help=watch)
    interval = f"time between polls with --watch (default {WATCH_INTERVAL}s)"
    backfill_status.add_argument("--interval", type=_interval, metavar="DURATION", help=interval)
    backfill_command("cancel", cmd_backfill_cancel, "stop a backfill's further waves (idempotent)").add_argument(
        "backfill_id"
    )

    preview_cmd = command("preview", cmd_preview, "the next occurrences of a schedule, without submitting anything")
    add_schedule_flags(preview_cmd)
    preview_cmd.add_argument("-n", "--count", type=_positive, default=10, help="how many (default 10)")
    preview_cmd.add_argument("--after", metavar="TIME", help="start after this time (default now)")

    dlq = command("dlq", lambda ctx: EXIT_USAGE, "the dead-letter queue")
    dlq_commands = dlq.add_subparsers(dest="dlq_command", metavar="{list,redrive}", required=True)
    dlq_list = dlq_commands.add_parser("list", help="each dead letter with its ledger state and what redrive would do")
    dlq_list.set_defaults(run=cmd_dlq_list)
    redrive = dlq_commands.add_parser("redrive", help="re-enqueue dead letters that have not succeeded (same keys)")
    redrive.set_defaults(run=cmd_dlq_redrive)
    redrive.add_argument("--dry-run", action="store_true", help="show what would happen; change nothing")
    redrive.add_argument("--purge-refused", action="store_true", help="delete dead letters of succeeded runs")
    for sub in (dlq_list, redrive):
        _add_global_options(sub, on_subcommand=True)
        sub.add_argument("--limit", type=_positive, default=1000, help="messages to look at (default 1000)")

    command("status", cmd_status, "dispatch lag, queue depths, dead letters and recent failures")
    command("health", cmd_health, "is the API up?")
    return parser


# -- entry point ------------------------------------------------------------------------------------------


def _problem(error: ApiError) -> dict[str, Any]:
    if error.problem:
        return error.problem
    body: dict[str, Any] = {"status": error.status, "title": error.title, "detail": error.detail}
    if error.errors:
        body["errors"] = [asdict(e) for e in error.errors]
    return body


def main(
    argv: Sequence[str] | None = None,
    *,
    client: SchedulerClient | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run one command; return its exit code. `client` replaces the one built from the flags (tests)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        args = build_parser().parse_args(list(argv) if argv is not None else None)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    ctx = Context(args, out, err, client)

    def fail(code: int, title: str, detail: str, hint: str = "") -> int:
        """One error, as the command's output is: a problem object with --json, a line of text otherwise."""
        if ctx.as_json:
            print(json.dumps({"title": title, "status": None, "detail": detail}), file=err)
        else:
            print(f"error: {detail}{hint}", file=err)
        return code

    try:
        code: int = args.run(ctx)
        return code
    except UsageError as exc:
        return fail(EXIT_USAGE, "Usage error", str(exc), f"\n(see: punctual {args.command} --help)")
    except ApiError as exc:
        if ctx.as_json:
            print(json.dumps(_problem(exc)), file=err)
        else:
            print(output.problem_text(exc, sent=not isinstance(exc, InvalidDefinition)), file=err)
            if exc.status == 401:
                print("  (check --token, or --aws and your AWS credentials)", file=err)
        return EXIT_REFUSED if isinstance(exc, InvalidDefinition) else exit_code_for(exc.status)
    except TransportError as exc:
        where = f" (API URL from {ctx.connection.source})" if ctx.connection else ""
        detail = f"{exc}{where}; is the scheduler running? (scripts/dev locally)"
        return fail(EXIT_UNAVAILABLE, "Connection failed", detail)
    except AuthError as exc:
        return fail(EXIT_USAGE, "Authentication", str(exc))
    except KeyboardInterrupt:
        print("interrupted", file=err)
        return 130
    except Exception as exc:
        # botocore errors of the operator commands (no credentials, unreachable endpoint, access denied).
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, NoRegionError, ProfileNotFound

        if isinstance(exc, NoCredentialsError | NoRegionError | ProfileNotFound):
            return fail(EXIT_USAGE, "AWS configuration", f"AWS configuration: {exc}")
        if isinstance(exc, BotoCoreError | ClientError):
            return fail(EXIT_UNAVAILABLE, "AWS", f"AWS: {exc}")
        raise


if __name__ == "__main__":
    sys.exit(main())
