"""BackfillStore contract: the same tests run against MemoryBackfillStore and DynamoBackfillStore (DynamoDB Local)."""

from __future__ import annotations

import base64
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoBackfillStore
from scheduler.adapters.memory import MemoryBackfillStore
from scheduler.core.jobs.backfill import new_backfill_id
from scheduler.core.model.job import BackfillState
from scheduler.core.model.schedules import CronSchedule
from scheduler.core.ports import Backfill, ChainPlan
from tests.adapters.conftest import BACKENDS, jobs_table_store


@pytest.fixture(params=BACKENDS)
def backfills(request: pytest.FixtureRequest) -> Any:
    return jobs_table_store(request, MemoryBackfillStore, DynamoBackfillStore)


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


# -- for_job ------------------------------------------------------------------------------------------------


def all_pages(backfills: Any, job_id: str, limit: int) -> tuple[list[list[str]], list[Any]]:
    pages: list[list[str]] = []
    cursors: list[Any] = []
    cursor = None
    for _ in range(50):
        page, cursor = backfills.for_job(job_id, limit, cursor)
        pages.append([b.backfill_id for b in page])
        cursors.append(cursor)
        if cursor is None:
            return pages, cursors
    raise AssertionError("the pages never ended")


def test_for_job_lists_only_that_jobs_backfills_newest_first(backfills, make) -> None:
    job_id, other = make.new_id(), make.new_id()
    mine = [backfill(make, offset, job_id=job_id) for offset in (3, 1, 5)]
    theirs = [backfill(make, offset, job_id=other) for offset in (2, 4, 6)]
    for b in [*mine, *theirs]:
        backfills.create(b)

    page, cursor = backfills.for_job(job_id, 10, None)

    assert page == sorted(mine, key=lambda b: b.created_at, reverse=True)  # whole backfills, not just ids
    assert cursor is None
    assert [b.backfill_id for b in backfills.for_job(other, 10, None)[0]] == [b.backfill_id for b in theirs[::-1]]
    assert backfills.for_job("no-such-job", 10, None) == ([], None)


def test_for_job_pages_with_a_cursor_and_the_last_page_has_none(backfills, make) -> None:
    job_id = make.new_id()
    mine = [backfill(make, offset, job_id=job_id) for offset in range(5)]
    for offset, b in enumerate(mine):
        backfills.create(b)
        backfills.create(backfill(make, offset))  # another job's, in between
    newest_first = [b.backfill_id for b in reversed(mine)]

    pages, cursors = all_pages(backfills, job_id, 2)

    assert pages == [newest_first[0:2], newest_first[2:4], newest_first[4:5]]
    assert all(isinstance(c, str) and c for c in cursors[:-1]) and cursors[-1] is None
    # a page that ends at the job's oldest backfill carries no cursor
    assert backfills.for_job(job_id, 5, None)[1] is None
    # the same cursor gives the same page again
    assert [b.backfill_id for b in backfills.for_job(job_id, 2, cursors[0])[0]] == newest_first[2:4]


def test_for_job_finds_a_jobs_backfills_behind_many_of_other_jobs(backfills, make) -> None:
    # more newer backfills of other jobs than one storage query reads, then the job's own
    job_id = make.new_id()
    mine = [backfill(make, offset, job_id=job_id) for offset in range(3)]
    for b in mine:
        backfills.create(b)
    for offset in range(3, 113):
        backfills.create(backfill(make, offset))

    pages, _ = all_pages(backfills, job_id, 2)

    assert pages == [[mine[2].backfill_id, mine[1].backfill_id], [mine[0].backfill_id]]


def test_for_job_refuses_a_cursor_it_did_not_return_for_that_job(backfills, make) -> None:
    job_id, other = make.new_id(), make.new_id()
    for offset in range(3):
        backfills.create(backfill(make, offset, job_id=job_id))
        backfills.create(backfill(make, offset, job_id=other))
    _, theirs = backfills.for_job(other, 1, None)
    assert theirs is not None
    garbage = [
        "not a cursor",
        base64.urlsafe_b64encode(b"not json").decode(),
        base64.urlsafe_b64encode(b"[1, 2]").decode(),
        base64.urlsafe_b64encode(json.dumps({"PK": {"S": "JOB#x"}, "SK": {"S": "DEF"}}).encode()).decode(),
        base64.urlsafe_b64encode(json.dumps({"PK": {"S": "BACKFILL"}, "SK": "x", "job_id": job_id}).encode()).decode(),
        theirs,  # another job's
    ]

    for cursor in garbage:
        with pytest.raises(ValueError, match="cursor is not one this API returned"):
            backfills.for_job(job_id, 1, cursor)
