"""The codec: how jobs, timers and executions are stored as DynamoDB items, and dispatches as SQS bodies.
Pure functions: no emulator needed (the contract suites cover the same items through DynamoDB Local)."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.codec import (
    JOB_LISTING_ATTRIBUTES,
    JOB_OPTIONAL_ATTRIBUTES,
    LOCAL_MESSAGE_KEY,
    MalformedMessage,
    UnauthenticatedMessage,
    dispatch_from_body,
    dispatch_to_body,
    execution_from_item,
    history_entry,
    job_from_item,
    job_list_item,
    job_to_item,
    listed_job_ids,
    n,
    s,
    timer_attributes,
    timer_from_item,
)
from scheduler.adapters.dynamodb import late_item, timer_item
from scheduler.core.dispatch import manual_timer, timer_for
from scheduler.core.model import Job, JobSpec, JobState, RunState
from scheduler.core.ports import Dispatch
from scheduler.core.timefmt import to_ms

T0 = datetime(2026, 3, 29, 0, 30, 15, 123000, tzinfo=UTC)


def job(schedule: dict[str, Any], payload: Any = None, **changes: Any) -> Job:
    spec = JobSpec.model_validate(
        {
            "name": "codec",
            "schedule": schedule,
            "target": {"type": "http", "url": "https://example.com/hook", "headers": {"X-Team": "billing"}},
            "payload": payload,
            "retry": {"max_attempts": 3},
            "jitter_seconds": 30,
            "misfire_policy": "run_all",
            "delivery": "at_most_once",
        }
    )
    fields: dict[str, Any] = {
        "job_id": "j1",
        "tenant": "arn:aws:iam::123456789012:role/team",
        "spec": spec,
        "version": 3,
        "state": JobState.ACTIVE,
        "created_at": T0,
        "updated_at": T0 + timedelta(seconds=5),
    }
    return Job(**{**fields, **changes})


SCHEDULES = {
    "once-at": {"type": "once", "at": "2026-03-29T02:30:00+01:00"},
    "once-delay": {"type": "once", "delay_seconds": 90},
    "cron": {
        "type": "cron",
        "expression": "30 2 * * *",
        "timezone": "Europe/Berlin",
        "start_at": "2026-03-01T00:00:00Z",
        "end_at": "2026-12-31T00:00:00Z",
    },
    "cron-macro": {"type": "cron", "expression": "@hourly"},
    "rate": {"type": "rate", "every_seconds": 3600, "start_at": "2026-03-29T00:00:00.250Z"},
}


def test_job_round_trip_keeps_float_payloads_exactly() -> None:
    payload = {"ratio": 0.1, "big": 1e300, "tiny": 5e-324, "third": 1 / 3, "list": [1.5, -0.0, 2], "s": "é"}
    original = job(
        SCHEDULES["rate"],
        payload,
        next_run_at=T0 + timedelta(hours=1),
        last_dispatched_for=T0,
        misfire_skipped=4,
        state=JobState.PAUSED,
    )

    item = job_to_item(original)
    back = job_from_item(item)

    assert back == original
    assert back.spec.payload == payload
    assert json.dumps(back.spec.payload) == json.dumps(payload)
    # instants are numbers (they are compared in conditions) and the list index key sorts by creation time
    assert item["created_ms"] == n(to_ms(T0))
    assert item["tenant_sk"]["S"].startswith(f"{to_ms(T0):015d}#")
    assert item["state"] == s("PAUSED")


def test_job_round_trip_without_optional_instants() -> None:
    original = job(SCHEDULES["once-delay"], None, next_run_at=None, last_dispatched_for=None)
    item = job_to_item(original)
    assert "next_ms" not in item and "last_ms" not in item
    assert job_from_item(item) == original


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_timer_round_trip_with_each_schedule_plan(name: str) -> None:
    timer = timer_for(job(SCHEDULES[name]), T0 + timedelta(minutes=1))
    assert timer.plan is not None and timer.plan.schedule.type == SCHEDULES[name]["type"]

    assert timer_from_item(timer_attributes(timer)) == timer
    assert timer_from_item(timer_item(timer, 8)) == timer
    assert timer_from_item(late_item(timer, 8)) == timer


def test_manual_timer_round_trip_has_no_plan() -> None:
    timer = manual_timer(job(SCHEDULES["rate"]), T0)
    item = timer_attributes(timer)
    assert "plan" not in item
    assert timer_from_item(item) == timer
    assert timer_from_item(item).kind == "manual"


def test_timer_items_sort_by_fire_at_within_a_bucket() -> None:
    j = job(SCHEDULES["rate"])
    early = timer_item(timer_for(j, T0), 8)
    later = timer_item(timer_for(j, T0 + timedelta(milliseconds=1)), 8)
    assert early["SK"]["S"] < later["SK"]["S"]
    assert early["expires_at"]["N"].isdigit()


def test_execution_from_item_with_history() -> None:
    at1, at2 = T0 + timedelta(seconds=1), T0 + timedelta(seconds=40)
    item = {
        "PK": s("j1:2026-03-29T00:30:15.123Z"),
        "job_id": s("j1"),
        "tenant": s("tenant-a"),
        "scheduled_ms": n(to_ms(T0)),
        "scheduled_for": s("2026-03-29T00:30:15.123Z"),
        "state": s("SUCCEEDED"),
        "epoch": n(2),
        "attempts": n(2),
        "owner": s("w2"),
        "last_error": s("HTTP 503"),
        "result": s("HTTP 200"),
        "created_ms": n(to_ms(T0)),
        "updated_ms": n(to_ms(at2)),
        "finished_ms": n(to_ms(at2)),
        "dead_lettered": {"BOOL": False},
        "history": {
            "L": [
                history_entry(1, RunState.RETRY_WAIT, at1, "HTTP 503"),
                history_entry(2, RunState.SUCCEEDED, at2, None),
            ]
        },
    }

    execution = execution_from_item(item)

    assert execution.key == "j1:2026-03-29T00:30:15.123Z"
    assert (execution.state, execution.epoch, execution.attempts) == (RunState.SUCCEEDED, 2, 2)
    assert execution.scheduled_for == T0 and execution.finished_at == at2 and execution.created_at == T0
    assert (execution.owner, execution.result, execution.last_error) == ("w2", "HTTP 200", "HTTP 503")
    assert execution.lease_until is None and execution.next_attempt_at is None
    assert [h.view() for h in execution.history] == [
        {"epoch": 1, "state": "RETRY_WAIT", "at": "2026-03-29T00:30:16.123Z", "error": "HTTP 503"},
        {"epoch": 2, "state": "SUCCEEDED", "at": "2026-03-29T00:30:55.123Z"},
    ]


def test_an_overlap_is_read_from_its_attribute_only() -> None:
    # the overlap policy never parses error text: a note that reads like a buffer is just a note
    item = {
        "PK": {"S": "j1:2026-03-29T00:30:15.123Z"},
        "job_id": {"S": "j1"},
        "tenant": {"S": "t1"},
        "scheduled_ms": {"N": str(to_ms(T0))},
        "state": {"S": "RETRY_WAIT"},
        "epoch": {"N": "1"},
        "attempts": {"N": "0"},
        "last_error": {"S": "buffered behind j1:2026-03-29T00:29:15.123Z"},
    }
    assert not execution_from_item(item).buffered
    parked = execution_from_item({**item, "overlapped": {"S": "j1:2026-03-29T00:29:15.123Z"}})
    assert parked.buffered and parked.overlapped == "j1:2026-03-29T00:29:15.123Z"


def test_history_entry_caps_the_error() -> None:
    entry = history_entry(1, RunState.DEAD, T0, "x" * 2000)
    assert len(entry["M"]["error"]["S"]) == 500


# -- dispatch bodies ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["scheduled", "manual"])
def test_dispatch_body_round_trip(kind: str) -> None:
    dispatch = Dispatch("j1", "tenant-a", T0, T0 + timedelta(seconds=12, milliseconds=7), 7, kind)  # type: ignore[arg-type]
    body = dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)
    assert dispatch_from_body(body, LOCAL_MESSAGE_KEY) == dispatch
    raw = json.loads(body)
    assert raw["v"] == 1
    assert raw["occurrence_key"] == dispatch.key == "j1:2026-03-29T00:30:15.123Z"


@pytest.mark.parametrize("schedule", ["once-at", "once-delay"])
def test_a_dispatch_body_carries_its_one_shot_jobs_copy_signed_with_it(schedule: str) -> None:
    copied = job(SCHEDULES[schedule], {"ratio": 0.1, "n": [1.5, 2]})
    advanced = {"last_dispatched_for": T0, "advanced_from": T0, "planned_version": 3, "planned_at": T0}
    update = {"state": JobState.COMPLETED, "completed_by_checkpoint": frozenset({"m"}), **advanced}
    copied = job_from_item(job_to_item(copied.model_copy(update=update)))  # as the advance's ALL_NEW reads it
    dispatch = Dispatch("j1", copied.tenant, T0, T0, copied.version, job_copy=copied)
    body = dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)

    read = dispatch_from_body(body, LOCAL_MESSAGE_KEY)
    assert read == dispatch and read.job_copy == copied
    raw = json.loads(body)
    raw["job"]["spec"]["payload"]["ratio"] = 0.2  # whoever could send to the queue cannot change what it runs
    with pytest.raises(UnauthenticatedMessage, match="copy of the job does not match"):
        dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY)
    for dropped in ("job_mac", "mac"):
        without = {name: value for name, value in json.loads(body).items() if name != dropped}
        with pytest.raises(UnauthenticatedMessage):
            dispatch_from_body(json.dumps(without), LOCAL_MESSAGE_KEY)
    planted = json.loads(dispatch_to_body(Dispatch("j1", copied.tenant, T0, T0, copied.version), LOCAL_MESSAGE_KEY))
    planted["job"] = json.loads(body)["job"]  # a copy added to a message sent without one
    with pytest.raises(UnauthenticatedMessage, match="copy of the job"):
        dispatch_from_body(json.dumps(planted), LOCAL_MESSAGE_KEY)


def test_a_copy_of_another_job_or_version_is_malformed_even_when_signed() -> None:
    other = job({"type": "once", "delay_seconds": 90})
    for dispatch in (
        Dispatch("j2", other.tenant, T0, T0, other.version, job_copy=other),
        Dispatch("j1", other.tenant, T0, T0, other.version + 1, job_copy=other),
    ):
        with pytest.raises(MalformedMessage, match="copy of its job"):
            dispatch_from_body(dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY), LOCAL_MESSAGE_KEY)


@pytest.mark.parametrize("with_copy", [False, True])
def test_the_message_hmac_is_the_one_the_version_before_copies_checks(with_copy: bool) -> None:
    """`mac` covers the nine fields it covered before copies existed, with or without a copy: a worker of that
    version authenticates a message with a copy (it ignores the copy and reads the job), so neither an upgrade nor
    its rollback dead-letters a message; and the messages in flight from that version authenticate here."""
    copied = job({"type": "once", "delay_seconds": 90}) if with_copy else None
    dispatch = Dispatch("j1", "arn:aws:iam::123456789012:role/team", T0, T0, 3, job_copy=copied)
    raw = json.loads(dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY))
    nine = ("v", "occurrence_key", "job_id", "tenant", "scheduled_for", "fire_at", "version", "kind", "priority")
    signed = json.dumps([raw[name] for name in nine], separators=(",", ":")).encode()
    assert ("job" in raw) == with_copy
    assert raw["mac"] == hmac.new(LOCAL_MESSAGE_KEY, signed, hashlib.sha256).hexdigest()


def _body(**changes: Any) -> str:
    raw = json.loads(dispatch_to_body(Dispatch("j1", "tenant-a", T0, T0, 1), LOCAL_MESSAGE_KEY))
    for key, value in changes.items():
        if value is ...:
            raw.pop(key)
        else:
            raw[key] = value
    return json.dumps(raw)


@pytest.mark.parametrize(
    "body",
    [
        "",
        "not json",
        "{",
        "null",
        "[]",
        '"a string"',
        "42",
        _body(v=2),
        _body(v=...),
        _body(kind="cron"),
        _body(kind=...),
        _body(version="1"),
        _body(version=1.0),
        _body(version=True),
        _body(version=None),
        _body(job_id=""),
        _body(job_id="a:b"),
        _body(job_id=5),
        _body(job_id=...),
        _body(tenant=None),
        _body(tenant=...),
        _body(scheduled_for="2026-03-29T00:30:15"),  # no offset: ambiguous
        _body(scheduled_for="yesterday"),
        _body(scheduled_for=12345),
        _body(fire_at=...),
        _body(fire_at=None),
    ],
)
def test_malformed_bodies_are_rejected(body: str) -> None:
    with pytest.raises(MalformedMessage):
        dispatch_from_body(body, LOCAL_MESSAGE_KEY)


# -- the job list -------------------------------------------------------------------------------------------


def test_the_optional_job_attributes_are_exactly_those_a_job_may_lack() -> None:
    """A replace (an UpdateItem) removes the optional attributes the new version lacks: the list must name every
    attribute job_to_item leaves out of some job, and nothing it always writes."""
    bare = job({"type": "once", "delay_seconds": 90})
    t = T0 + timedelta(minutes=1)
    full = bare.model_copy(
        update={
            "next_run_at": t,
            "last_dispatched_for": t,
            "advanced_from": t,
            "planned_at": t,
            "planned_horizon": t,
            "planned_version": 3,
            "completed_by_checkpoint": frozenset({"3@1"}),
            "paused_at": t,
            "resumed_at": t,
            "paused_version": 2,
            "sealed_headers": "local1.bm9uY2U.Y2lwaGVy",
            "key_version": 2,
            "previous_key_until": t,
        }
    )
    always = set(job_to_item(bare))

    assert set(job_to_item(full)) - always == set(JOB_OPTIONAL_ATTRIBUTES)
    assert not always & set(JOB_OPTIONAL_ATTRIBUTES)
    assert job_from_item(job_to_item(full)) == full


def test_a_job_listed_by_its_batch_has_no_entry_of_its_own_and_the_batch_entry_names_its_jobs() -> None:
    first, second = job({"type": "once", "delay_seconds": 90}), job({"type": "once", "delay_seconds": 90}, job_id="j2")

    member, alone = job_to_item(second, listed_in=first.job_id), job_to_item(second)
    entry = job_list_item([first, second])

    assert set(alone) - set(member) == {"tenant_pk", "tenant_sk"} and member["listed_in"] == s("j1")
    assert set(JOB_LISTING_ATTRIBUTES) >= {"PK", "SK", "tenant_pk", "tenant_sk", "listed_in"}
    assert job_from_item(member) == job_from_item(alone) == second
    assert entry["tenant_pk"] == alone["tenant_pk"] and entry["tenant_sk"] == job_to_item(first)["tenant_sk"]
    assert listed_job_ids(entry) == ["j1", "j2"] and listed_job_ids(member) is None
