"""How the API shows jobs, runs, backfills, bulk operations and the forecast: each builds its view of
`scheduler.handlers.api_models`, the one declaration of what the API answers."""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler import Response

from scheduler.core.capacity.forecast import Forecast
from scheduler.core.jobs.backfill import BackfillService
from scheduler.core.jobs.bulk import BulkOperation
from scheduler.core.jobs.reads import JobReads
from scheduler.core.jobs.secrecy import spec_view
from scheduler.core.jobs.status import JobStatus
from scheduler.core.model.job import Job
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Backfill, Execution, Timer
from scheduler.handlers import api_models as views


def job_view(job: Job, reads: JobReads, preview: int = 0, status: JobStatus | None = None) -> dict[str, Any]:
    """The job's definition (no secret header value, URL credential or query value) and the view's fields."""
    spec = spec_view(job.spec)
    upcoming = reads.next_runs(job, max(1, preview))
    status = status or reads.status(job)
    view: views.Job = {
        "job_id": job.job_id,
        "state": status.state.value,
        "version": job.version,
        "created_at": rfc3339(job.created_at),
        "updated_at": rfc3339(job.updated_at),
        "next_run_at": rfc3339(upcoming[0]) if upcoming else None,
        "last_dispatched_for": rfc3339(job.last_dispatched_for) if job.last_dispatched_for else None,
        "misfire_skipped": job.misfire_skipped,
    }
    if status.last_run_key is not None:
        view["last_run"] = last_run_view(status, status.last_run_key)
    if preview:
        view["next_runs"] = [rfc3339(t) for t in upcoming[:preview]]
    return {**view, **spec}


def last_run_view(status: JobStatus, key: str) -> views.LastRun:
    """A COMPLETED (or DISPATCHED) job's last occurrence: where it is (QUEUED: dispatched, no run yet)."""
    return {
        "occurrence_key": key,
        "scheduled_for": rfc3339(status.last_run_scheduled_for) if status.last_run_scheduled_for else None,
        "state": status.last_run_state,
    }


def run_view(run: Execution) -> views.Run:
    def ts(value: Any) -> str | None:
        return rfc3339(value) if value else None

    return {
        "occurrence_key": run.key,
        "scheduled_for": rfc3339(run.scheduled_for),
        "state": run.state.value,
        "attempts": run.attempts,
        "created_at": ts(run.created_at),
        "updated_at": ts(run.updated_at),
        "finished_at": ts(run.finished_at),
        "next_attempt_at": ts(run.next_attempt_at),
        "last_error": run.last_error,
        "result": run.result,
        "history": [entry.view() for entry in run.history],
        "held": hold_view(run),
    }


def hold_view(run: Execution) -> views.RunHold | None:
    """What held `run` back before its first attempt, told as the API shows it (None: nothing did)."""
    hold = run.held
    if hold is None:
        return None
    until = run.created_at
    return {
        "key": hold.key,
        "reasons": sorted(hold.reasons),
        "since": rfc3339(hold.since),
        "seconds": round(max(0.0, (until - hold.since).total_seconds()), 3) if until is not None else None,
        "detail": hold.detail(until),
    }


def backfill_view(backfill: Backfill, service: BackfillService) -> views.Backfill:
    return {
        "backfill_id": backfill.backfill_id,
        "job_id": backfill.job_id,
        "from": rfc3339(backfill.range_from),
        "to": rfc3339(backfill.range_to),
        "state": backfill.state.value,
        "total": backfill.total,
        "dispatched": backfill.dispatched,
        "remaining": backfill.remaining,
        "waves": backfill.waves,
        "wave_size": service.config.wave_size,
        "waves_left": service.waves_left(backfill),
        "last_dispatched_for": rfc3339(backfill.cursor) if backfill.cursor else None,
        "created_at": rfc3339(backfill.created_at),
        "updated_at": rfc3339(backfill.updated_at),
    }


def trigger_view(timer: Timer) -> views.Trigger:
    return {"job_id": timer.job_id, "occurrence_key": timer.key, "scheduled_for": rfc3339(timer.scheduled_for)}


def bulk_view(operation: BulkOperation) -> views.BulkOperation:
    return {
        "operation_id": operation.operation_id,
        "action": operation.action.value,
        "selector": {"labels": dict(operation.labels)},
        "state": operation.state.value,
        "matched": operation.matched,
        "processed": operation.processed,
        "changed": operation.changed,
        "unchanged": operation.unchanged,
        "failed": [{"job_id": f.job_id, "reason": f.reason} for f in operation.failed],
    }


def forecast_view(result: Forecast) -> views.Forecast:
    """The JSON of `GET /v1/forecast` (and of `punctual forecast --json`)."""
    peak = result.peak
    return {
        "start": rfc3339(result.start),
        "minutes": [
            {"minute": rfc3339(m.minute), "due": m.due, "peak_second": m.peak_second, "by_tenant": m.by_tenant}
            for m in result.minutes
        ],
        "total": result.total,
        "peak_minute": rfc3339(peak.minute) if peak is not None and peak.due else None,
        "peak_due": peak.due if peak is not None else 0,
        "timers_read": result.timers_read,
    }


def json_response(status: int, body: Any, headers: dict[str, str] | None = None) -> Response[str]:
    return Response(status, "application/json", json.dumps(body), headers=headers)


# -- request helpers --------------------------------------------------------------------------------------
