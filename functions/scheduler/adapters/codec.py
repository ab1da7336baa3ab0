"""How domain objects are stored: DynamoDB attribute values (the ready queue's message format is
`scheduler.adapters.dispatch_message`).

Definitions and payloads are stored as JSON strings, not as DynamoDB maps: payloads may hold floats (which
DynamoDB has no type for) and the definition is always read whole. Instants are stored as epoch milliseconds
(numbers compare correctly in conditions) with an RFC 3339 copy where a person reads the item.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from scheduler.core.model.job import BackfillState, Job, JobSpec, JobState, Priority, RunState
from scheduler.core.model.keys import split_occurrence_key
from scheduler.core.model.schedules import Schedule
from scheduler.core.model.timefmt import from_ms, parse_rfc3339, rfc3339, to_ms
from scheduler.core.ports import (
    HOLD_REASONS,
    Backfill,
    ChainPlan,
    Execution,
    HistoryEntry,
    Hold,
    OutboxEntry,
    Timer,
    TimerKind,
)

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


#: The job's instants that may be None, by the item attribute each is kept in (as milliseconds; absent: None).
JOB_INSTANTS = {
    "next_run_at": "next_ms",
    "last_dispatched_for": "last_ms",
    "advanced_from": "adv_ms",
    "planned_at": "plan_ms",
    "planned_horizon": "horizon_ms",
    "paused_at": "paused_ms",
    "resumed_at": "resumed_ms",
    "previous_key_until": "prev_key_ms",
}
#: The job's versions that may be None, likewise.
JOB_VERSIONS = {"planned_version": "plan_v", "paused_version": "paused_v"}
#: The job item's attributes that only some jobs have (`job_to_item` leaves out what is None or empty): a
#: replace (an UpdateItem, so that the job's list entry stays as it is) removes those the new version lacks.
JOB_OPTIONAL_ATTRIBUTES = (*JOB_INSTANTS.values(), *JOB_VERSIONS.values(), "rel_done", "sealed", "key_v")
#: The job item's attributes that a replace leaves as they are: its key, and its entry in the job list (the
#: by_tenant index) or the batch entry it is listed under instead (`listed_in`).
JOB_LISTING_ATTRIBUTES = ("PK", "SK", "tenant_pk", "tenant_sk", "listed_in")


def label_pk(tenant: str, key: str) -> str:
    """The partition of the label index that holds the tenant's jobs with label `key` (scheduler.core.model.labels)."""
    return f"LABEL#{tenant}#{key}"


def label_sk(value: str, job_id: str) -> str:
    """Within a key's partition: by value, then job id (a value has no '#', so `{value}#` is an exact value's
    prefix)."""
    return f"{value}#{job_id}"


def label_item(tenant: str, key: str, value: str, job_id: str) -> Item:
    """One label of a job in the label index: written and removed with the job's labels, in the same transaction."""
    return {"PK": s(label_pk(tenant, key)), "SK": s(label_sk(value, job_id)), "kind": s("label"), "job_id": s(job_id)}


def external_id_key(tenant: str, external_id: str) -> Item:
    return {"PK": s(f"EXTID#{tenant}#{external_id}"), "SK": s("EXTID")}


def external_id_item(tenant: str, external_id: str, job_id: str) -> Item:
    """The tenant's claim on an external id: written with the job on create (only if absent), kept while it is."""
    return {**external_id_key(tenant, external_id), "kind": s("external_id"), "job_id": s(job_id)}


def job_list_pk(list_id: str) -> str:
    return f"LIST#{list_id}"


def job_to_item(job: Job, listed_in: str | None = None) -> Item:
    """The job's item. It is in the job list (the keys-only by_tenant index) by its own entry, or, with
    `listed_in`, by the entry of the batch it was stored with (`job_list_item`), which then names it."""
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
    }
    if listed_in is None:
        item["tenant_pk"], item["tenant_sk"] = s(f"TENANT#{job.tenant}"), s(f"{created:015d}#{job.job_id}")
    else:
        item["listed_in"] = s(listed_in)
    for field, attribute in JOB_INSTANTS.items():
        if (instant := getattr(job, field)) is not None:
            item[attribute] = n(to_ms(instant))
    for field, attribute in JOB_VERSIONS.items():
        if (version := getattr(job, field)) is not None:
            item[attribute] = n(version)
    if job.completed_by_checkpoint:
        item["rel_done"] = {"SS": sorted(job.completed_by_checkpoint)}
    if job.key_version != 1:  # a job whose key was never rotated has no attribute: version 1
        item["key_v"] = n(job.key_version)
    if job.sealed_headers is not None:  # the secret header values, sealed (the spec holds placeholders)
        item["sealed"] = s(job.sealed_headers)
    return item


def job_from_item(item: Item) -> Job:
    created = get_ms(item, "created_ms")
    updated = get_ms(item, "updated_ms")
    assert created is not None and updated is not None
    optional: dict[str, Any] = {field: get_ms(item, attribute) for field, attribute in JOB_INSTANTS.items()}
    optional |= {field: get_n(item, attribute) for field, attribute in JOB_VERSIONS.items()}
    return Job(
        job_id=item["job_id"]["S"],
        tenant=item["tenant"]["S"],
        spec=JobSpec.model_validate_json(item["spec"]["S"]),
        version=int(item["version"]["N"]),
        state=JobState(item["state"]["S"]),
        created_at=created,
        updated_at=updated,
        misfire_skipped=get_n(item, "misfire_skipped") or 0,
        completed_by_checkpoint=frozenset(item.get("rel_done", {}).get("SS", [])),
        sealed_headers=get_s(item, "sealed"),
        key_version=get_n(item, "key_v") or 1,
        **optional,
    )


def job_list_item(jobs: list[Job]) -> Item:
    """One entry in the job list for jobs stored together (`DynamoJobStore.create_all`), in place of one entry
    each: its index entry sorts where its first job's would, and it names its jobs in order. Nothing else, so
    that 25 jobs' ids and a tenant of up to about 70 characters stay under 1 KB (one write unit, two in the
    batch's transaction)."""
    first = jobs[0]
    created = to_ms(first.created_at)
    return {
        "PK": s(job_list_pk(first.job_id)),
        "SK": s("LIST"),
        "jobs": {"L": [s(job.job_id) for job in jobs]},
        "tenant_pk": s(f"TENANT#{first.tenant}"),
        "tenant_sk": s(f"{created:015d}#{first.job_id}"),
    }


def listed_job_ids(item: Item) -> list[str] | None:
    """The jobs a job list entry names, or None if the item is a job (listed by its own entry)."""
    if not item["PK"]["S"].startswith(job_list_pk("")):
        return None
    return [value["S"] for value in item["jobs"]["L"]]


# -- timers ----------------------------------------------------------------------------------------------


def timer_sk(timer: Timer) -> str:
    """The sort key of a timer in its bucket (and in the late lane): its place."""
    return timer.place


def timer_attributes(timer: Timer) -> Item:
    item: Item = {
        "kind": s("timer"),
        "job_id": s(timer.job_id),
        "tenant": s(timer.tenant),
        "sched_ms": n(to_ms(timer.scheduled_for)),
        "fire_ms": n(to_ms(timer.fire_at)),
        **({"defer_ms": n(to_ms(timer.defer_until))} if timer.defer_until is not None else {}),
        **({"queued_ms": n(to_ms(timer.queued_until))} if timer.queued_until is not None else {}),
        "version": n(timer.version),
        "timer_kind": s(timer.kind),
        "priority": s(timer.priority),
        **({"flow_key": s(timer.flow_key)} if timer.flow_key is not None else {}),
    }
    if timer.plan is not None:
        item["plan"] = s(plan_to_json(timer.plan))
    return item


_PRIORITIES: dict[object, Priority] = {"high": "high", "low": "low"}
_TIMER_KINDS: dict[object, TimerKind] = {"manual": "manual", "backfill": "backfill"}


def _priority(value: object) -> Priority:
    """A stored or sent priority; anything written before lanes existed (or unknown) is `normal`."""
    return _PRIORITIES.get(value, "normal")


def _timer_kind(value: str) -> TimerKind:
    """A stored timer kind; anything else (or absent) is a `scheduled` occurrence of the chain."""
    return _TIMER_KINDS.get(value, "scheduled")


def plan_to_json(plan: ChainPlan) -> str:
    raw = {
        "schedule": _SCHEDULE.dump_python(plan.schedule, mode="json", exclude_none=True),
        "anchor_ms": to_ms(plan.anchor),
        "jitter_seconds": plan.jitter_seconds,
        "misfire_policy": plan.misfire_policy,
    }
    return json.dumps(raw, separators=(",", ":"))


def plan_from_json(text: str) -> ChainPlan:
    raw = json.loads(text)
    return ChainPlan(
        schedule=_SCHEDULE.validate_python(raw["schedule"]),
        anchor=from_ms(raw["anchor_ms"]),
        jitter_seconds=raw["jitter_seconds"],
        misfire_policy=raw["misfire_policy"],
    )


def timer_from_item(item: Item) -> Timer:
    plan = plan_from_json(item["plan"]["S"]) if "plan" in item else None
    scheduled = get_ms(item, "sched_ms")
    fire = get_ms(item, "fire_ms")
    assert scheduled is not None and fire is not None
    return Timer(
        job_id=item["job_id"]["S"],
        tenant=item["tenant"]["S"],
        scheduled_for=scheduled,
        fire_at=fire,
        version=int(item["version"]["N"]),
        kind=_timer_kind(item["timer_kind"]["S"]),
        plan=plan,
        priority=_priority(get_s(item, "priority")),
        flow_key=get_s(item, "flow_key"),
        defer_until=get_ms(item, "defer_ms"),
        queued_until=get_ms(item, "queued_ms"),
    )


# -- executions ------------------------------------------------------------------------------------------


def history_entry(epoch: int, state: RunState, now: datetime, error: str | None) -> dict[str, Any]:
    """One history entry (HistoryEntry.of) as a map in the item's `history` list."""
    entry = HistoryEntry.of(epoch, state, now, error)
    value: dict[str, Any] = {"epoch": n(entry.epoch), "state": s(entry.state.value), "at": s(rfc3339(entry.at))}
    if entry.error:
        value["error"] = s(entry.error)
    return {"M": value}


def history_entry_from_attribute(value: dict[str, Any]) -> HistoryEntry:
    entry = value["M"]
    return HistoryEntry(
        epoch=int(entry["epoch"]["N"]),
        state=RunState(entry["state"]["S"]),
        at=parse_rfc3339(entry["at"]["S"]),
        error=get_s(entry, "error"),
    )


def outbox_entry_to_attribute(entry: OutboxEntry) -> dict[str, Any]:
    """One outbox entry as a map in the item's `outbox` list."""
    value: dict[str, Any] = {
        "eid": s(entry.event_id),
        "state": s(entry.state.value),
        "epoch": n(entry.epoch),
        "at": n(to_ms(entry.at)),
    }
    if entry.error:
        value["error"] = s(entry.error)
    if entry.result:
        value["result"] = s(entry.result)
    return {"M": value}


def outbox_entry_from_attribute(value: dict[str, Any]) -> OutboxEntry:
    entry = value["M"]
    return OutboxEntry(
        event_id=entry["eid"]["S"],
        state=RunState(entry["state"]["S"]),
        epoch=int(entry["epoch"]["N"]),
        at=from_ms(int(entry["at"]["N"])),
        error=get_s(entry, "error"),
        result=get_s(entry, "result"),
    )


def execution_from_item(item: Item) -> Execution:
    # An item kept out of the run-history index has no job_id / scheduled_ms: both are in its occurrence key.
    scheduled = get_ms(item, "scheduled_ms")
    job_id = get_s(item, "job_id")
    if scheduled is None or job_id is None:
        key_job, key_instant = split_occurrence_key(item["PK"]["S"])
        job_id = job_id or key_job
        scheduled = scheduled or parse_rfc3339(key_instant)
    history = [history_entry_from_attribute(h) for h in item.get("history", {}).get("L", [])]
    return Execution(
        key=item["PK"]["S"],
        job_id=job_id,
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
        outbox=[outbox_entry_from_attribute(v) for v in item.get("outbox", {}).get("L", [])],
        overlapped=get_s(item, "overlapped"),
        paused_version=get_n(item, "paused_v"),
        held=hold_from_item(item),
    )


def hold_to_attributes(hold: Hold) -> dict[str, Any]:
    """A hold's attributes on a ledger item: its key, since when (ms) and its reasons (a string set: merged by ADD)."""
    attributes: dict[str, Any] = {"held_by": s(hold.key), "held_since_ms": n(to_ms(hold.since))}
    if hold.reasons:
        attributes["held_reasons"] = {"SS": sorted(hold.reasons)}
    return attributes


def hold_from_item(item: Item) -> Hold | None:
    key, since = get_s(item, "held_by"), get_ms(item, "held_since_ms")
    if key is None or since is None:
        return None
    given = item.get("held_reasons", {}).get("SS", [])
    return Hold(key, since, frozenset(r for r in HOLD_REASONS if r in given))


# -- backfills -------------------------------------------------------------------------------------------

BACKFILL_PK = "BACKFILL"


def backfill_to_item(backfill: Backfill) -> Item:
    item: Item = {
        "PK": s(BACKFILL_PK),
        "SK": s(backfill.backfill_id),
        "kind": s("backfill"),
        "job_id": s(backfill.job_id),
        "tenant": s(backfill.tenant),
        "from_ms": n(to_ms(backfill.range_from)),
        "to_ms": n(to_ms(backfill.range_to)),
        "plan": s(plan_to_json(backfill.plan)),
        "version": n(backfill.version),
        "total": n(backfill.total),
        "dispatched": n(backfill.dispatched),
        "waves": n(backfill.waves),
        "state": s(backfill.state.value),
        "created_ms": n(to_ms(backfill.created_at)),
        "updated_ms": n(to_ms(backfill.updated_at)),
    }
    if backfill.cursor is not None:
        item["cursor_ms"] = n(to_ms(backfill.cursor))
    return item


def backfill_from_item(item: Item) -> Backfill:
    def instant(name: str) -> datetime:
        value = get_ms(item, name)
        assert value is not None
        return value

    return Backfill(
        backfill_id=item["SK"]["S"],
        job_id=item["job_id"]["S"],
        tenant=item["tenant"]["S"],
        range_from=instant("from_ms"),
        range_to=instant("to_ms"),
        plan=plan_from_json(item["plan"]["S"]),
        version=int(item["version"]["N"]),
        total=int(item["total"]["N"]),
        state=BackfillState(item["state"]["S"]),
        created_at=instant("created_ms"),
        updated_at=instant("updated_ms"),
        dispatched=get_n(item, "dispatched") or 0,
        waves=get_n(item, "waves") or 0,
        cursor=get_ms(item, "cursor_ms"),
    )
