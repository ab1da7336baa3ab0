"""How domain objects are stored: DynamoDB attribute values and SQS message bodies.

Definitions and payloads are stored as JSON strings, not as DynamoDB maps: payloads may hold floats (which
DynamoDB has no type for) and the definition is always read whole. Instants are stored as epoch milliseconds
(numbers compare correctly in conditions) with an RFC 3339 copy where a person reads the item.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

from scheduler.core.keys import split_occurrence_key
from scheduler.core.model import BackfillState, Job, JobSpec, JobState, Priority, RunState
from scheduler.core.ports import Backfill, ChainPlan, Dispatch, Execution, HistoryEntry, OutboxEntry, Timer, TimerKind
from scheduler.core.schedules import Schedule
from scheduler.core.timefmt import from_ms, parse_rfc3339, rfc3339, to_ms
from scheduler.settings import LOCAL_MESSAGE_SECRET

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


#: The job item's attributes that only some jobs have (`job_to_item` leaves out what is None or empty): a
#: replace (an UpdateItem, so that the job's list entry stays as it is) removes those the new version lacks.
JOB_OPTIONAL_ATTRIBUTES = (
    "next_ms",
    "last_ms",
    "plan_v",
    "paused_v",
    "rel_done",
    "adv_ms",
    "plan_ms",
    "horizon_ms",
    "paused_ms",
    "resumed_ms",
    "sealed",
    "key_v",
    "prev_key_ms",
)
#: The job item's attributes that a replace leaves as they are: its key, and its entry in the job list (the
#: by_tenant index) or the batch entry it is listed under instead (`listed_in`).
JOB_LISTING_ATTRIBUTES = ("PK", "SK", "tenant_pk", "tenant_sk", "listed_in")


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
    if job.next_run_at is not None:
        item["next_ms"] = n(to_ms(job.next_run_at))
    if job.last_dispatched_for is not None:
        item["last_ms"] = n(to_ms(job.last_dispatched_for))
    if job.planned_version is not None:
        item["plan_v"] = n(job.planned_version)
    if job.paused_version is not None:
        item["paused_v"] = n(job.paused_version)
    if job.completed_by_checkpoint:
        item["rel_done"] = {"SS": sorted(job.completed_by_checkpoint)}
    if job.key_version != 1:  # a job whose key was never rotated has no attribute: version 1
        item["key_v"] = n(job.key_version)
    for name, value in (
        ("adv_ms", job.advanced_from),
        ("plan_ms", job.planned_at),
        ("horizon_ms", job.planned_horizon),
        ("paused_ms", job.paused_at),
        ("resumed_ms", job.resumed_at),
        ("prev_key_ms", job.previous_key_until),
    ):
        if value is not None:
            item[name] = n(to_ms(value))
    if job.sealed_headers is not None:  # the secret header values, sealed (the spec holds placeholders)
        item["sealed"] = s(job.sealed_headers)
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
        planned_version=get_n(item, "plan_v"),
        paused_at=get_ms(item, "paused_ms"),
        resumed_at=get_ms(item, "resumed_ms"),
        paused_version=get_n(item, "paused_v"),
        completed_by_checkpoint=frozenset(item.get("rel_done", {}).get("SS", [])),
        sealed_headers=get_s(item, "sealed"),
        key_version=get_n(item, "key_v") or 1,
        previous_key_until=get_ms(item, "prev_key_ms"),
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
    """The sort key of a timer in its bucket (and in the late lane): its slot."""
    return timer.slot


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
    )


# -- messages --------------------------------------------------------------------------------------------


#: The fields of a dispatch message its HMAC covers, in this order (every field but the HMAC itself).
_MAC_FIELDS = ("v", "occurrence_key", "job_id", "tenant", "scheduled_for", "fire_at", "version", "kind", "priority")
_MAC_FIELD = "mac"


def message_key(secret: str) -> bytes:
    """The HMAC key of dispatch messages, from the message secret (SCHEDULER_MESSAGE_SECRET)."""
    return hashlib.sha256(b"punctual dispatch message\x00" + secret.encode()).digest()


#: The message key of local mode (the development message secret): the local stack's and the tests'.
LOCAL_MESSAGE_KEY = message_key(LOCAL_MESSAGE_SECRET)


#: The message's copy of its job (`Dispatch.job_copy`) and its own HMAC, over the fields `mac` covers and the copy.
#: `mac` stays what it was before copies existed, so a worker of that version authenticates a message with a copy,
#: ignores the copy and reads the job (an upgrade, or its rollback, loses no message).
_COPY_FIELD = "job"
_COPY_MAC_FIELD = "job_mac"


def _message_mac(key: bytes, raw: dict[str, Any], *, with_copy: bool = False) -> str:
    values = [raw.get(name) for name in _MAC_FIELDS]
    if with_copy:
        values.append(raw.get(_COPY_FIELD))
    signed = json.dumps(values, separators=(",", ":"))
    return hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()


def dispatch_to_body(dispatch: Dispatch, key: bytes) -> str:
    """A ready-queue body: the dispatch and its HMAC under `key` (only holders of the message secret - the API,
    the sweeper, the worker and redrive - can write one the worker runs)."""
    return json.dumps(_dispatch_raw(dispatch, key), separators=(",", ":"))


#: The body version of a message that carries several occurrences (scheduler.core.envelope): `{"v": 2,
#: "occurrences": [...]}`, each a version-1 body with its own HMAC. A worker of a version before envelopes reads such
#: a message as malformed and dead-letters it unrun (redrive sends its occurrences back one a message).
ENVELOPE_VERSION = 2


def message_to_body(dispatches: Sequence[Dispatch], key: bytes) -> str:
    """The body of a ready-queue message that carries `dispatches`: a version-1 body for one, an envelope for more."""
    if len(dispatches) == 1:
        return dispatch_to_body(dispatches[0], key)
    raw = {"v": ENVELOPE_VERSION, "occurrences": [_dispatch_raw(d, key) for d in dispatches]}
    return json.dumps(raw, separators=(",", ":"))


def _dispatch_raw(dispatch: Dispatch, key: bytes) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "v": 1,
        "occurrence_key": dispatch.key,
        "job_id": dispatch.job_id,
        "tenant": dispatch.tenant,
        "scheduled_for": rfc3339(dispatch.scheduled_for),
        "fire_at": rfc3339(dispatch.fire_at),
        "version": dispatch.version,
        "kind": dispatch.kind,
        "priority": dispatch.priority,
    }
    raw[_MAC_FIELD] = _message_mac(key, raw)
    if dispatch.job_copy is not None:
        raw[_COPY_FIELD] = dispatch.job_copy.model_dump(mode="json", exclude_none=True)
        raw[_COPY_MAC_FIELD] = _message_mac(key, raw, with_copy=True)
    return raw


class MalformedMessage(ValueError):
    """A ready-queue body that is not a dispatch; it can never succeed, so it goes to the DLQ."""


class UnauthenticatedMessage(MalformedMessage):
    """A ready-queue body whose HMAC is missing or wrong: forged, planted, or sent with another key. Never run;
    dead-lettered (and redrive refuses it too)."""


def dispatch_from_body(body: str, key: bytes | None, *, accept_unsigned: bool = False) -> Dispatch:
    """The dispatch of a ready-queue body, authenticated with `key` (UnauthenticatedMessage when its HMAC does not
    hold). `key=None` reads without authenticating: for inspection only, never for running it. `accept_unsigned`
    (the upgrade window) lets a body with no HMAC at all through; a wrong HMAC is refused whatever it says."""
    return _dispatch_from_raw(_json_of(body), key, accept_unsigned)


def dispatches_from_body(body: str, key: bytes | None, *, accept_unsigned: bool = False) -> list[Dispatch]:
    """The occurrences a ready-queue message carries: one for a version-1 body, each of an envelope's (every one
    authenticated as `dispatch_from_body` does; one that fails makes the whole message unreadable: the sender
    signs them all at once, so a message with one bad occurrence was tampered with)."""
    raw = _json_of(body)
    if isinstance(raw, dict) and raw.get("v") == ENVELOPE_VERSION:
        occurrences = raw.get("occurrences")
        if not isinstance(occurrences, list) or not occurrences:
            raise MalformedMessage("an envelope without occurrences")
        return [_dispatch_from_raw(one, key, accept_unsigned) for one in occurrences]
    return [_dispatch_from_raw(raw, key, accept_unsigned)]


def _json_of(body: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeError) as exc:
        raise MalformedMessage(f"malformed dispatch message: {exc}") from exc


def _dispatch_from_raw(raw: Any, key: bytes | None, accept_unsigned: bool) -> Dispatch:
    try:
        if not isinstance(raw, dict) or raw.get("v") != 1:
            raise MalformedMessage("not a version-1 dispatch message")
        if key is not None:
            given = raw.get(_MAC_FIELD)
            if given is None and not accept_unsigned:
                raise UnauthenticatedMessage("unauthenticated dispatch message: it carries no HMAC (not sent by us)")
            if given is not None and (
                not isinstance(given, str) or not hmac.compare_digest(_message_mac(key, raw).encode(), given.encode())
            ):
                raise UnauthenticatedMessage(
                    "unauthenticated dispatch message: its HMAC does not match (forged, or sent with another key)"
                )
            copy_mac = raw.get(_COPY_MAC_FIELD)
            if (_COPY_FIELD in raw or copy_mac is not None) and (
                not isinstance(copy_mac, str)
                or not hmac.compare_digest(_message_mac(key, raw, with_copy=True).encode(), copy_mac.encode())
            ):
                raise UnauthenticatedMessage(
                    "unauthenticated dispatch message: the HMAC of its copy of the job does not match (forged, or "
                    "sent with another key)"
                )
        kind = raw["kind"]
        if kind not in ("scheduled", "manual", "backfill"):
            raise MalformedMessage(f"unknown kind {kind!r}")
        version = raw["version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise MalformedMessage("version must be an integer")
        job_id, tenant = raw["job_id"], raw["tenant"]
        if not isinstance(job_id, str) or not isinstance(tenant, str) or not job_id or ":" in job_id:
            raise MalformedMessage("job_id and tenant must be strings")
        priority = raw.get("priority", "normal")  # absent in messages sent before lanes existed
        if priority not in ("high", "normal", "low"):
            raise MalformedMessage(f"unknown priority {priority!r}")
        job_copy = None
        if _COPY_FIELD in raw:
            job_copy = Job.model_validate(raw[_COPY_FIELD])
            if job_copy.job_id != job_id or job_copy.tenant != tenant or job_copy.version != version:
                raise MalformedMessage("the message's copy of its job is not of its job and version")
        return Dispatch(
            job_id=job_id,
            tenant=tenant,
            scheduled_for=parse_rfc3339(raw["scheduled_for"]),
            fire_at=parse_rfc3339(raw["fire_at"]),
            version=version,
            kind=kind,
            priority=_priority(priority),
            job_copy=job_copy,
        )
    except MalformedMessage:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError) as exc:
        raise MalformedMessage(f"malformed dispatch message: {exc}") from exc


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
