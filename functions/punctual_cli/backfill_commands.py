"""The backfill commands: list, start, status (`--watch`), cancel."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from punctual_cli import output
from punctual_cli.client import Backfill, SchedulerClient
from punctual_cli.context import EXIT_OK, Context, listing
from punctual_cli.definition import UsageError, parse_instant
from scheduler.core.model.timefmt import rfc3339, truncate_ms

#: How `backfill status --watch` waits between polls (tests replace it to poll at once).
sleep: Callable[[float], None] = time.sleep
#: Seconds between polls of `backfill status --watch` without --interval.
WATCH_INTERVAL = 2


def cmd_backfill_list(ctx: Context) -> int:
    client = ctx.client()
    every, page = client.iter_backfills, client.backfills
    return listing(ctx, "backfills", ctx.args.job_id, every, page, output.backfill_table, "no backfills")


def _backfill_line(verb: str, backfill: Backfill) -> str:
    return f"{verb} backfill {backfill.backfill_id} of job {backfill.job_id} ({output.backfill_progress(backfill)})"


def _watch_command(backfill: Backfill) -> str:
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


def _watch_backfill(ctx: Context, client: SchedulerClient, backfill: Backfill) -> Backfill:
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
    return ctx.show(backfill.raw, lambda: output.backfill_detail(backfill))


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
