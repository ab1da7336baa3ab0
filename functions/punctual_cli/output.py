"""Human-readable output: aligned tables and short descriptions of schedules, targets, jobs and runs."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from punctual_cli.client import ApiError, Backfill, Job, Run
from scheduler.core.model.timefmt import rfc3339
from scheduler.ops.redrive import RedriveLine

_DASH = "-"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Columns padded to their widest cell; None shows as '-'; the last column is not padded."""
    cells = [[_DASH if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        padded = [v.ljust(w) for v, w in zip(values[:-1], widths[:-1], strict=True)]
        return "  ".join([*padded, values[-1]]).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in cells)])


def when(value: datetime | None) -> str | None:
    return rfc3339(value) if value else None


def describe_schedule(schedule: Mapping[str, Any]) -> str:
    """`cron 0 9 * * 1-5 (Europe/Berlin)`, `every 30s`, `once at 2026-...`, `once after 5m`."""
    kind = schedule.get("type")
    if kind == "cron":
        text = f"cron {schedule.get('expression')} ({schedule.get('timezone', 'UTC')})"
    elif kind == "rate":
        text = f"every {seconds_text(int(schedule.get('every_seconds', 0)))}"
    elif kind == "once" and schedule.get("at"):
        text = f"once at {schedule['at']}"
    elif kind == "once":
        text = f"once after {seconds_text(int(schedule.get('delay_seconds', 0)))}"
    else:
        return json.dumps(dict(schedule))
    if schedule.get("start_at"):
        text += f" from {schedule['start_at']}"
    if schedule.get("end_at"):
        text += f" until {schedule['end_at']}"
    return text


def describe_target(target: Mapping[str, Any]) -> str:
    kind = target.get("type")
    detail = {
        "http": lambda: f"{target.get('method', 'POST')} {target.get('url')}",
        "sqs": lambda: str(target.get("queue_url")),
        "sns": lambda: str(target.get("topic_arn")),
        "eventbridge": lambda: str(target.get("event_bus_name", "default")),
        "lambda": lambda: str(target.get("function_name")),
        "stepfunctions": lambda: str(target.get("state_machine_arn")),
        "handler": lambda: str(target.get("name")),
    }.get(str(kind))
    return f"{kind} {detail()}" if detail else json.dumps(dict(target))


def seconds_text(seconds: int) -> str:
    """90 -> 1m30s; 604800 -> 7d."""
    parts: list[str] = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)


def job_table(jobs: Sequence[Job]) -> str:
    rows = [
        (
            job.job_id,
            job.name,
            job.state.value,
            describe_schedule(job.raw.get("schedule") or {}),
            describe_target(job.raw.get("target") or {}),
            when(job.next_run_at),
        )
        for job in jobs
    ]
    return table(("JOB ID", "NAME", "STATE", "SCHEDULE", "TARGET", "NEXT RUN (UTC)"), rows)


#: What a COMPLETED or DISPATCHED job's last occurrence is doing, by its state (QUEUED: no run yet).
_LAST_RUN = {
    "QUEUED": "dispatched, waiting to start",
    "RUNNING": "running",
    "RETRY_WAIT": "waiting for a retry",
}


def last_run_field(job: Job) -> list[tuple[str, Any]]:
    """The `last run` line of a COMPLETED or DISPATCHED job: its occurrence key and where it is."""
    last = job.raw.get("last_run")
    if not last:
        return []
    state = str(last.get("state"))
    doing = _LAST_RUN.get(state)
    return [("last run", f"{last.get('occurrence_key')} {state}" + (f" ({doing})" if doing else ""))]


def job_detail(job: Job) -> str:
    """Everything about one job, the definition included (the policies shown as the API has them)."""
    raw = job.raw
    retry = raw.get("retry") or {}
    fields: list[tuple[str, Any]] = [
        ("job", job.job_id),
        ("name", job.name),
        ("state", f"{job.state.value} (version {job.version})"),
        ("schedule", describe_schedule(raw.get("schedule") or {})),
        ("target", describe_target(raw.get("target") or {})),
        ("next run", when(job.next_run_at)),
        ("last dispatched", when(job.last_dispatched_for)),
        *last_run_field(job),
        ("created", when(job.created_at)),
        ("updated", when(job.updated_at)),
        ("retry", ", ".join(f"{k.removesuffix('_seconds')}={v}" for k, v in retry.items()) or None),
        ("policies", f"misfire={raw.get('misfire_policy')}, overlap={raw.get('overlap_policy')}, "
                     f"delivery={raw.get('delivery')}, jitter={raw.get('jitter_seconds', 0)}s"),
        ("payload", json.dumps(raw.get("payload")) if "payload" in raw else None),
    ]  # fmt: skip
    if job.misfire_skipped:
        fields.append(("misfires skipped", job.misfire_skipped))
    width = max(len(k) for k, _ in fields)
    lines = [f"{key:<{width}}  {_DASH if value is None else value}" for key, value in fields]
    if job.next_runs:
        lines.append("next runs:")
        lines += [f"  {rfc3339(t)}" for t in job.next_runs]
    return "\n".join(lines)


def run_table(runs: Sequence[Run]) -> str:
    rows = [
        (run.occurrence_key, run.state.value, run.attempts, when(run.finished_at or run.next_attempt_at),
         held_by(run), _shorten(run.last_error, 60))
        for run in runs
    ]  # fmt: skip
    return table(("OCCURRENCE KEY", "STATE", "ATTEMPTS", "FINISHED/NEXT", "HELD BY", "LAST ERROR"), rows)


def held_by(run: Run) -> str | None:
    """What held the run back before its first attempt: `payments-api (rate, 3.2s)`, its flow-control key, the
    limits that held it and for how long (docs/flow-control.md, "What a held run shows"); None when nothing did."""
    hold = run.held
    if hold is None:
        return None
    why = ", ".join(hold.reasons) or "held"
    if hold.seconds is not None:
        why += f", {hold.seconds:.1f}s"
    return f"{hold.key} ({why})"


def backfill_table(backfills: Sequence[Backfill]) -> str:
    rows = [
        (b.backfill_id, b.state.value, when(b.range_from), when(b.range_to), f"{b.dispatched}/{b.total}",
         b.waves_left, when(b.created_at))
        for b in backfills
    ]  # fmt: skip
    return table(("BACKFILL ID", "STATE", "FROM", "TO", "DISPATCHED", "WAVES LEFT", "CREATED (UTC)"), rows)


def backfill_progress(backfill: Backfill) -> str:
    """One line: `RUNNING: 500/720 dispatched, 220 remaining, 1 wave left`."""
    left = backfill.waves_left
    line = f"{backfill.state.value}: {backfill.dispatched}/{backfill.total} dispatched"
    if backfill.running:
        line += f", {backfill.remaining} remaining, {left} wave{'s' if left != 1 else ''} left"
    return line


def backfill_detail(backfill: Backfill) -> str:
    """Everything about one backfill: its range, state and progress."""
    fields: list[tuple[str, Any]] = [
        ("backfill", backfill.backfill_id),
        ("job", backfill.job_id),
        ("state", backfill.state.value),
        ("from", when(backfill.range_from)),
        ("to", when(backfill.range_to)),
        ("dispatched", f"{backfill.dispatched}/{backfill.total} ({backfill.remaining} remaining)"),
        ("waves", f"{backfill.waves} sent, {backfill.waves_left} left"
                  + (f" (up to {backfill.wave_size} occurrences each)" if backfill.wave_size else "")),
        ("last dispatched", when(backfill.last_dispatched_for)),
        ("created", when(backfill.created_at)),
        ("updated", when(backfill.updated_at)),
    ]  # fmt: skip
    width = max(len(k) for k, _ in fields)
    return "\n".join(f"{key:<{width}}  {_DASH if value is None else value}" for key, value in fields)


def preview_table(instants: Sequence[datetime], zone: ZoneInfo | None) -> str:
    rows = [(i + 1, rfc3339(t), t.astimezone(zone).isoformat() if zone else None) for i, t in enumerate(instants)]
    headers = ("#", "UTC", f"LOCAL ({zone.key})" if zone else "LOCAL")
    if zone is None:
        return table(headers[:2], [r[:2] for r in rows])
    return table(headers, rows)


def redrive_table(lines: Sequence[RedriveLine]) -> str:
    rows = [
        (line.occurrence_key, line.ledger_state, line.attempts, line.action, _shorten(line.last_error, 50))
        for line in lines
    ]
    return table(("OCCURRENCE KEY", "LEDGER", "ATTEMPTS", "ACTION", "LAST ERROR"), rows)


def problem_text(error: ApiError, *, sent: bool = True) -> str:
    """What went wrong and what to fix: the problem's detail, then each offending field."""
    where = f"HTTP {error.status}" if sent else "refused before sending"
    lines = [f"error: {error.title} ({where}): {error.detail}"]
    # The detail already names the first field; list the fields when there are more (or it does not).
    if len(error.errors) > 1 or any(f"{e.field}: {e.message}" not in error.detail for e in error.errors):
        lines += [f"  {e.field}: {e.message}" for e in error.errors]
    return "\n".join(lines)


def _shorten(text: str | None, limit: int) -> str | None:
    if text is None:
        return None
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
