"""BackfillStore contract: the same tests run against MemoryBackfillStore and DynamoBackfillStore (DynamoDB Local)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoBackfillStore
from scheduler.adapters.memory import MemoryBackfillStore
from scheduler.core.backfill import new_backfill_id
from scheduler.core.model import BackfillState
from scheduler.core.ports import Backfill, ChainPlan
from scheduler.core.schedules import CronSchedule


@pytest.fixture(params=["memory", pytest.param("dynamodb", marks=pytest.mark.emulator)])
def backfills(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return MemoryBackfillStore()
    resources = request.getfixturevalue("resources")
    return DynamoBackfillStore(resources.jobs_table, request.getfixturevalue("dynamodb_client"))


def backfill(make: Any, offset_ms: int = 0, **changes: Any) -> Backfill:
    created = make.t0 + timedelta(milliseconds=offset_ms)
    plan = ChainPlan(
        CronSchedule(type="cron", expression="*/5 * * * *", timezone="Europe/Berlin"), make.t0, 7, "run_all"
    )
    made = Backfill(
        backfill_id=new_backfill_id(created),
        job_id=make.new_id(),
        tenant="tenant-a",
        range_from=make.t0 - timedelta(days=1),
        range_to=make.t0,
        plan=plan,
        version=3,
        total=288,
        state=BackfillState.RUNNING,
        created_at=created,
        updated_at=created,
    )
    return replace(made, **changes)


def test_create_and_get_round_trip(backfills, make) -> None:
    b = backfill(make)
    backfills.create(b)

    assert backfills.get(b.backfill_id) == b
    assert backfills.get("nope") is None


def test_running_lists_running_backfills_oldest_first(backfills, make) -> None:
    newer, older = backfill(make, 5), backfill(make, 1)
    done = backfill(make, 3, state=BackfillState.COMPLETED)
    for b in (newer, done, older):
        backfills.create(b)

    assert [b.backfill_id for b in backfills.running(10)] == [older.backfill_id, newer.backfill_id]
    assert [b.backfill_id for b in backfills.running(1)] == [older.backfill_id]


def test_advance_moves_the_cursor_counts_the_wave_and_completes(backfills, make) -> None:
    b = backfill(make)
    backfills.create(b)
    t1, t2 = make.t0 + timedelta(minutes=1), make.t0 + timedelta(minutes=2)
    first_cursor = b.range_from + timedelta(hours=4)

    assert backfills.advance(b, first_cursor, 50, False, t1)
    after_first = backfills.get(b.backfill_id)
    assert (after_first.cursor, after_first.dispatched, after_first.waves) == (first_cursor, 50, 1)
    assert (after_first.state, after_first.updated_at) == (BackfillState.RUNNING, t1)

    assert backfills.advance(after_first, b.range_to - timedelta(minutes=5), 288, True, t2)
    done = backfills.get(b.backfill_id)
    assert (done.state, done.dispatched, done.waves, done.remaining) == (BackfillState.COMPLETED, 288, 2, 0)
    assert backfills.running(10) == []


def test_advance_from_a_stale_cursor_or_after_a_cancel_is_refused(backfills, make) -> None:
    b = backfill(make)
    backfills.create(b)
    assert backfills.advance(b, b.range_from, 1, False, make.t0)

    assert not backfills.advance(b, b.range_from + timedelta(minutes=5), 2, False, make.t0)  # b's cursor is stale
    current = backfills.get(b.backfill_id)
    assert backfills.finish(current, BackfillState.CANCELLED, make.t0).state == BackfillState.CANCELLED
    assert not backfills.advance(current, b.range_from + timedelta(minutes=5), 2, False, make.t0)
    assert backfills.get(b.backfill_id).dispatched == 1


def test_finish_only_moves_a_running_backfill(backfills, make) -> None:
    b = backfill(make)
    backfills.create(b)
    later = make.t0 + timedelta(minutes=3)

    cancelled = backfills.finish(b, BackfillState.CANCELLED, later)
    assert (cancelled.state, cancelled.updated_at) == (BackfillState.CANCELLED, later)
    # finishing again returns it as it stands, unchanged
    again = backfills.finish(b, BackfillState.COMPLETED, later + timedelta(minutes=1))
    assert again == cancelled
    assert backfills.finish(backfill(make), BackfillState.CANCELLED, later) is None
