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
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from punctual_cli import output
from punctual_cli.apply_commands import cmd_apply
from punctual_cli.backfill_commands import (
    WATCH_INTERVAL,
    cmd_backfill_cancel,
    cmd_backfill_list,
    cmd_backfill_start,
    cmd_backfill_status,
)
from punctual_cli.bulk_commands import cmd_bulk
from punctual_cli.client import ApiError, AuthError, InvalidDefinition, SchedulerClient, TransportError
from punctual_cli.context import (
    EXIT_CODES_HELP,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    Context,
    exit_code_for,
    problem_document,
)
from punctual_cli.definition import UsageError, add_definition_flags, add_schedule_flags, parse_duration
from punctual_cli.job_commands import (
    cmd_edit,
    cmd_flows,
    cmd_get,
    cmd_list,
    cmd_preview,
    cmd_resolve,
    cmd_runs,
    cmd_submit,
    cmd_trigger,
    state_change,
)
from punctual_cli.operator_commands import cmd_dlq_list, cmd_dlq_redrive, cmd_forecast, cmd_health, cmd_status
from scheduler.core.model.job import TARGET_TYPES, JobState


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
    listing.add_argument(
        "--label",
        action="append",
        metavar="KEY=VALUE",
        help="only jobs with this label (repeatable, ANDed; KEY= any value)",
    )
    listing.add_argument("--target-type", choices=TARGET_TYPES, help="only jobs with this kind of target")
    listing.add_argument("--name-prefix", metavar="TEXT", help="only jobs whose name starts with TEXT")
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
        command(name, state_change(verb, call), help_text).add_argument("job_id")
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

    bulk = command("bulk", cmd_bulk, "pause, resume or cancel every job with the given labels (a progress bar)")
    bulk.add_argument("action", choices=["pause", "resume", "cancel"])
    bulk.add_argument("--label", action="append", metavar="KEY=VALUE", help="repeatable; every label must match")
    bulk.add_argument("--idempotency-key", metavar="KEY", help="go on with an earlier operation (default: a new one)")

    flows = command(
        "flows", cmd_flows, "your flow-control keys: limits, backlog, calls in flight (docs/flow-control.md)"
    )
    flows.add_argument("key", nargs="?", help="one key (default: all of them)")

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

    apply = command("apply", cmd_apply, "make your jobs match a YAML file of job definitions (jobs as code)")
    apply.add_argument("-f", "--file", required=True, metavar="PATH", help="the jobs file (- reads standard input)")
    apply.add_argument("--dry-run", action="store_true", help="print the plan; change nothing")
    apply.add_argument(
        "--prune", action="store_true", help="also delete (cancel) the jobs managed by the file's owner that it lacks"
    )
    apply.add_argument(
        "--resend-secrets",
        action="store_true",
        help="also update jobs whose secret header values or URL query a read never shows, sending them again",
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

    status = command("status", cmd_status, "dispatch lag, queue depths, dead letters and recent failures")
    status.add_argument(
        "--via-api",
        action="store_true",
        help="read them through the API's operator view (GET /v1/operator/status: your principal must be in the "
        "deployment's operators setting) instead of from AWS with your own credentials",
    )
    command("health", cmd_health, "is the API up?")
    return parser


# -- entry point ------------------------------------------------------------------------------------------


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
            print(json.dumps(problem_document(exc)), file=err)
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
