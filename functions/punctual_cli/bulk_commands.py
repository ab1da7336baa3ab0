"""`punctual bulk pause|resume|cancel --label KEY=VALUE`: act on every job with the labels, with a progress bar.

The command generates one Idempotency-Key (or takes `--idempotency-key`) and sends the same request until the
operation is DONE: each request works for up to about 20 s and answers with the progress, and a request that
failed (a timeout, a restarted API) is simply sent again, since the key names the same operation.
"""

from __future__ import annotations

import uuid

from punctual_cli.client import ApiError, TransportError
from punctual_cli.context import EXIT_OK, EXIT_REFUSED, Context
from punctual_cli.definition import UsageError
from punctual_cli.progress import Progress
from punctual_sdk.models import BulkOperation

#: Failed requests in a row (a lost connection, a 5xx) the command retries before it gives up.
RETRIES = 10
VERBS = {"pause": "pausing", "resume": "resuming", "cancel": "cancelling"}


def parse_labels(pairs: list[str] | None) -> dict[str, str]:
    labels: dict[str, str] = {}
    for pair in pairs or []:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise UsageError(f"--label takes KEY=VALUE (an empty VALUE: any value), not '{pair}'")
        labels[key] = value
    if not labels:
        raise UsageError("name at least one label: --label KEY=VALUE (repeat it; every label must match)")
    return labels


def cmd_bulk(ctx: Context) -> int:
    args = ctx.args
    labels = parse_labels(args.label)
    key = args.idempotency_key or f"cli-bulk-{uuid.uuid4()}"
    client = ctx.client()
    progress: Progress | None = None
    counted = {"changed": 0, "unchanged": 0, "failed": 0}
    failures = 0
    while True:
        try:
            report = client.bulk_action(args.action, labels, key)
        except (TransportError, ApiError) as exc:
            transient = isinstance(exc, TransportError) or exc.status >= 500
            failures += 1
            if not transient or failures > RETRIES:
                if progress is not None:
                    progress.finish()
                ctx.note(f"to go on with this operation: --idempotency-key {key}")
                raise
            client.sleep(min(2.0 * failures, 10.0))
            continue
        failures = 0
        if progress is None:
            progress = Progress(VERBS[args.action], ctx.err, report.matched)
        _advance(progress, counted, report)
        if report.state == "DONE":
            break
    progress.finish()
    return _summary(ctx, report)


def _advance(progress: Progress, counted: dict[str, int], report: BulkOperation) -> None:
    now = {"changed": report.changed, "unchanged": report.unchanged, "failed": len(report.failed)}
    for outcome, count in now.items():
        if count > counted[outcome]:
            progress.advance(outcome, count - counted[outcome])
            counted[outcome] = count


def _summary(ctx: Context, report: BulkOperation) -> int:
    if ctx.as_json:
        ctx.emit(report.raw)
    else:
        ctx.say(
            f"{report.action} {report.operation_id}: {report.matched} matched, {report.changed} changed, "
            f"{report.unchanged} already so, {len(report.failed)} failed"
        )
        for failure in report.failed:
            ctx.say(f"  {failure.job_id}: {failure.reason}")
    return EXIT_REFUSED if report.failed else EXIT_OK
