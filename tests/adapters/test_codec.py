"""The codec: how jobs, timers and executions are stored as DynamoDB items, and dispatches as SQS bodies.
Pure functions: no emulator needed (the contract suites cover the same items through DynamoDB Local)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.codec import (
    JOB_LISTING_ATTRIBUTES,
    JOB_OPTIONAL_ATTRIBUTES,
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
from scheduler.core.model.job import Job, JobSpec, JobState, RunState
from scheduler.core.model.timefmt import to_ms
from scheduler.core.sweep.dispatch import manual_timer, timer_for

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
