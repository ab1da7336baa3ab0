"""How domain objects are stored: DynamoDB attribute values and SQS message bodies.

Definitions and payloads are stored as JSON strings, not as DynamoDB maps: payloads may hold floats (which
DynamoDB has no type for) and the definition is always read whole. Instants are stored as epoch milliseconds
(numbers compare correctly in conditions) with an RFC 3339 copy where a person reads the item.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from scheduler.core.model import Job, JobSpec, JobState, RunState
from scheduler.core.ports import ChainPlan, Dispatch, Execution, Timer
from scheduler.core.schedules import Schedule
from scheduler.core.timefmt import from_ms, parse_rfc3339, rfc3339, to_ms

Item = dict[str, Any]  # a DynamoDB item in the low-level client's attribute-value form

_SCHEDULE: TypeAdapter[Schedule] = TypeAdapter(Schedule)


def s(value: str) -> dict[str, str]:
    return {"S": value}


def n(value: int | float) -> dict[str, str]:
    return {"N": str(value)}


def get_s(item: Item, name: str) -> str | None:
    value = item.get(name)
    return value["S"] if value else None


def get_n(item: Item, name: str) -> int | None:
    value = item.get(name)
    return int(value["N"]) if value else None


def get_ms(item: Item, name: str) -> datetime | None:
    ms = get_n(item, name)
    return from_ms(ms) if ms is not None else None


# -- jobs ------------------------------------------------------------------------------------------------


def job_pk(job_id: str) -> str:
    return f"JOB#{job_id}"


def job_to_item(job: Job) -> Item:
    created = to_ms(job.created_at)
    item: Item = {
        "PK": s(job_pk(job.job_id)),
        "SK": s("DEF"),
        "kind": s("job"),
        "job_id": s(job.job_id),
        "tenant": s(job.tenant),
        "spec": s(job.spec.model_dump_json(exclude_none=True)),
        "version": n(job.version),
        "state": s(job.state.value),
        "created_ms": n(created),
        "updated_ms": n(to_ms(job.updated_at)),
        "misfire_skipped": n(job.misfire_skipped),
        "tenant_pk": s(f"TENANT#{job.tenant}"),
        "tenant_sk": s(f"{created:015d}#{job.job_id}"),
    }
    if job.next_run_at is not None:
        item["next_ms"] = n(to_ms(job.next_run_at))
    if job.last_dispatched_for is not None:
        item["last_ms"] = n(to_ms(job.last_dispatched_for))
    for name, value in (
        ("adv_ms", job.advanced_from),
        ("plan_ms", job.planned_at),
        ("horizon_ms", job.planned_horizon),
    ):
        if value is not None:
            item[name] = n(to_ms(value))
    return item


def job_from_item(item: Item) -> Job:
    created = get_ms(item, "created_ms")
    updated = get_ms(item, "updated_ms")
    assert created is not None and updated is not None
    return Job(
        job_id=item["job_id"]["S"],
        tenant=item["tenant"]["S"],
        spec=JobSpec.model_validate_json(item["spec"]["S"]),
        version=int(item["version"]["N"]),
        state=JobState(item["state"]["S"]),
        created_at=created,
        updated_at=updated,
        next_run_at=get_ms(item, "next_ms"),
        last_dispatched_for=get_ms(item, "last_ms"),
        misfire_skipped=get_n(item, "misfire_skipped") or 0,
        advanced_from=get_ms(item, "adv_ms"),
        planned_at=get_ms(item, "plan_ms"),
        planned_horizon=get_ms(item, "horizon_ms"),
    )


# -- timers ----------------------------------------------------------------------------------------------


def timer_sk(timer: Timer) -> str:
    """The sort key of a timer in its bucket (and in the late lane): its slot."""
    return timer.slot


def timer_attributes(timer: Timer) -> Item:
    item: Item = {
        "kind": s("timer"),
        "job_id": s(timer.job_id),
        "tenant": s(timer.tenant),
        "sched_ms": n(to_ms(timer.scheduled_for)),
        "fire_ms": n(to_ms(timer.fire_at)),
        "version": n(timer.version),
        "timer_kind": s(timer.kind),
    }
    if timer.plan is not None:
        plan = {
            "schedule": _SCHEDULE.dump_python(timer.plan.schedule, mode="json", exclude_none=True),
            "anchor_ms": to_ms(timer.plan.anchor),
            "jitter_seconds": timer.plan.jitter_seconds,
            "misfire_policy": timer.plan.misfire_policy,
        }
        item["plan"] = s(json.dumps(plan, separators=(",", ":")))
    return item


def timer_from_item(item: Item) -> Timer:
    plan = None
    if "plan" in item:
        raw = json.loads(item["plan"]["S"])
        plan = ChainPlan(
            schedule=_SCHEDULE.validate_python(raw["schedule"]),
            anchor=from_ms(raw["anchor_ms"]),
            jitter_seconds=raw["jitter_seconds"],
            misfire_policy=raw["misfire_policy"],
        )
    scheduled = get_ms(item, "sched_ms")
    fire = get_ms(item, "fire_ms")
    assert scheduled is not None and fire is not None
    return Timer(
        job_id=item["job_id"]["S"],
        tenant=item["tenant"]["S"],
        scheduled_for=scheduled,
        fire_at=fire,
        version=int(item["version"]["N"]),
        kind="manual" if item["timer_kind"]["S"] == "manual" else "scheduled",
        plan=plan,
    )


# -- executions ------------------------------------------------------------------------------------------


def _from_attribute(value: dict[str, Any]) -> Any:
    """Decode the small, flat maps stored in an execution's history."""
    if "S" in value:
        return value["S"]
    if "N" in value:
        return int(value["N"])
    if "M" in value:
        return {k: _from_attribute(v) for k, v in value["M"].items()}
    if "BOOL" in value:
        return value["BOOL"]
    return None


def history_entry(epoch: int, state: RunState, now: datetime, error: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"epoch": n(epoch), "state": s(state.value), "at": s(rfc3339(now))}
    if error:
        entry["error"] = s(error[:500])
    return {"M": entry}


def execution_from_item(item: Item) -> Execution:
    scheduled = get_ms(item, "scheduled_ms")
    assert scheduled is not None
    history = [_from_attribute(h) for h in item.get("history", {}).get("L", [])]
    return Execution(
        key=item["PK"]["S"],
        job_id=item["job_id"]["S"],
        tenant=item["tenant"]["S"],
        scheduled_for=scheduled,
        state=RunState(item["state"]["S"]),
        epoch=get_n(item, "epoch") or 0,
        attempts=get_n(item, "attempts") or 0,
        owner=get_s(item, "owner"),
        lease_until=get_ms(item, "lease_ms"),
        next_attempt_at=get_ms(item, "next_ms"),
        last_error=get_s(item, "last_error"),
        result=get_s(item, "result"),
        created_at=get_ms(item, "created_ms"),
        updated_at=get_ms(item, "updated_ms"),
        finished_at=get_ms(item, "finished_ms"),
        dead_lettered=bool(item.get("dead_lettered", {}).get("BOOL", False)),
        history=history,
    )


# -- messages --------------------------------------------------------------------------------------------


def dispatch_to_body(dispatch: Dispatch) -> str:
    return json.dumps(
        {
            "v": 1,
            "occurrence_key": dispatch.key,
            "job_id": dispatch.job_id,
            "tenant": dispatch.tenant,
            "scheduled_for": rfc3339(dispatch.scheduled_for),
            "fire_at": rfc3339(dispatch.fire_at),
            "version": dispatch.version,
            "kind": dispatch.kind,
        },
        separators=(",", ":"),
    )


class MalformedMessage(ValueError):
    """A ready-queue body that is not a dispatch; it can never succeed, so it goes to the DLQ."""


def dispatch_from_body(body: str) -> Dispatch:
    try:
        raw = json.loads(body)
        if not isinstance(raw, dict) or raw.get("v") != 1:
            raise MalformedMessage("not a version-1 dispatch message")
        kind = raw["kind"]
        if kind not in ("scheduled", "manual"):
            raise MalformedMessage(f"unknown kind {kind!r}")
        version = raw["version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise MalformedMessage("version must be an integer")
        job_id, tenant = raw["job_id"], raw["tenant"]
        if not isinstance(job_id, str) or not isinstance(tenant, str) or not job_id or ":" in job_id:
            raise MalformedMessage("job_id and tenant must be strings")
        return Dispatch(
            job_id=job_id,
            tenant=tenant,
            scheduled_for=parse_rfc3339(raw["scheduled_for"]),
            fire_at=parse_rfc3339(raw["fire_at"]),
            version=version,
            kind=kind,
        )
    except MalformedMessage:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MalformedMessage(f"malformed dispatch message: {exc}") from exc
