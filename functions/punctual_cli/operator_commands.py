"""The operator commands: the dead-letter queue, the deployment's status, the forecast, health."""

from __future__ import annotations

from dataclasses import asdict

from punctual_cli import output
from punctual_cli.context import EXIT_OK, EXIT_UNAVAILABLE, Context
from punctual_cli.dead_letters import dead_letter_count, outcome_of, run_redrive
from punctual_cli.forecast import chart as forecast_chart
from punctual_cli.progress import Progress
from punctual_cli.status import collect, from_operator_view, render


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
    if ctx.args.via_api:
        client = ctx.client()
        status = from_operator_view(client.operator_status(), source=client.base_url)
    else:
        status = collect(ctx.deployment())
    if ctx.as_json:
        ctx.emit(status.to_json())
    else:
        ctx.say(render(status))
    return EXIT_UNAVAILABLE if status.problems else EXIT_OK


def cmd_forecast(ctx: Context) -> int:
    body = ctx.client().forecast(ctx.args.minutes).raw
    return ctx.show(body, lambda: forecast_chart(body))


def cmd_health(ctx: Context) -> int:
    client = ctx.client()
    body = client.health()
    return ctx.show(body, lambda: f"{body.get('status', 'unknown')} ({client.base_url})")


# -- the parser -------------------------------------------------------------------------------------------
