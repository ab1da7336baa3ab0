"""The bad requests a run's client makes (invariant 6: bad input never changes stored state): each is made through
the real `JobService`, as the API would, and its outcome recorded for the checker."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import ValidationError

from scheduler.core.errors import SchedulerError
from scheduler.core.model.job import MAX_PAYLOAD_BYTES, JobSpec, JobState
from scheduler.core.model.timefmt import rfc3339
from scheduler_sim.workload import OTHER_TENANT, SCHEDULE_FIELDS, TENANT, InvalidCall

if TYPE_CHECKING:
    from scheduler.core.jobs.service import JobService
    from scheduler_sim.simulation import Simulation


def invalid_request(sim: Simulation, call: InvalidCall, service: JobService) -> tuple[str, str, bool]:
    """Make the request named by `call` (or `unknown-job` when it needs a job that is not there); returns the
    request made, its outcome and whether it must be rejected (the no-op requests, like resuming an ACTIVE
    job, must be accepted and change nothing)."""
    record = sim.records[call.job]
    body = copy.deepcopy(next(c.body for c in sim.workload.calls if c.job == call.job and c.kind == "create"))
    assert body is not None
    job_id = record.job_id
    job = sim.jobs.get(job_id) if job_id else None
    name = call.name
    if name in ("idempotency-conflict", "resume-active") and (
        job is None or (name == "resume-active" and job.state != JobState.ACTIVE)
    ):
        name = "unknown-job"  # those need a job in a given state; fall back to one that needs none
    now = sim.clock.now()
    must_reject = name != "resume-active"
    try:
        if name == "payload-too-large":
            body["payload"] = {"blob": "x" * (MAX_PAYLOAD_BYTES + 1)}
            service.create(TENANT, JobSpec.model_validate(body), None, body)
        elif name == "no-future-occurrence":
            body["schedule"] = {
                "type": "rate",
                "every_seconds": 60,
                "start_at": rfc3339(now - timedelta(hours=2)),
                "end_at": rfc3339(now - timedelta(hours=1)),
            }
            service.create(TENANT, JobSpec.model_validate(body), None, body)
        elif name == "bad-cron":
            body["schedule"] = {"type": "cron", "expression": "61 * * * *"}
            service.create(TENANT, JobSpec.model_validate(body), None, body)
        elif name == "unknown-zone":
            body["schedule"] = {"type": "cron", "expression": "0 9 * * *", "timezone": "Mars/Olympus_Mons"}
            service.create(TENANT, JobSpec.model_validate(body), None, body)
        elif name == "unknown-job":
            service.update(TENANT, "ffffffffff", {"payload": {"x": 1}}, None)
        elif name == "other-tenant-update":
            service.update(OTHER_TENANT, job_id or "ffffffffff", {"payload": {"x": 1}}, None)
        elif name == "other-tenant-trigger":
            service.trigger(OTHER_TENANT, job_id or "ffffffffff")
        elif name == "stale-if-match":
            version = job.version if job else 1
            service.update(TENANT, job_id or "ffffffffff", {"payload": {"x": 2}}, version + 7)
        elif name == "invalid-patch":
            schedule = dict.fromkeys(SCHEDULE_FIELDS) | {"type": "rate", "every_seconds": 0}
            service.update(TENANT, job_id or "ffffffffff", {"schedule": schedule}, None)
        elif name == "idempotency-conflict":
            body["payload"] = {"different": True}
            service.create(TENANT, JobSpec.model_validate(body), f"create-{call.job}", body)
        elif name == "resume-active":
            assert job_id is not None
            service.resume(TENANT, job_id)
        else:
            raise AssertionError(f"unknown invalid request {name}")
    except (SchedulerError, ValidationError) as exc:
        return name, f"rejected: {type(exc).__name__}", must_reject
    except Exception as exc:
        return name, f"error: {type(exc).__name__}: {exc}", must_reject
    return name, "accepted", must_reject


def stored_state(sim: Simulation) -> object:
    """Everything stored, cheaply comparable (jobs and timers are immutable; ledger items are not)."""
    return (
        dict(sim.jobs.jobs),
        dict(sim.jobs.idempotency),
        dict(sim.jobs.active),
        {bucket: dict(items) for bucket, items in sim.timers.timer_items.items()},
        {bucket: replace(item) for bucket, item in sim.timers.buckets.items()},
        dict(sim.timers.late),
        sim.timers.watermark(),
        {key: (e.state, e.epoch, e.attempts, e.owner, e.lease_until) for key, e in sim.ledger.items.items()},
        dict(sim.tenant_budgets.calendars),
        dict(sim.flow_controls.states),
        dict(sim.backfills.items),
        sim.queue.sent,
        len(sim.queue.messages),
    )
