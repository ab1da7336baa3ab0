"""Backfill: a past range of a recurring job's occurrences, materialised in waves through the sweep's dispatch path,
each with its normal occurrence key (what already ran is not run again), cancellable, with visible progress."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from scheduler.core.errors import BackfillNotFound, InvalidRequest, InvalidState, JobNotFound
from scheduler.core.model.job import BackfillState, RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.timefmt import rfc3339
from tests.unit.fixtures import TENANT, FakeTarget, MemoryCore, at

EVERY_MINUTE = {"type": "cron", "expression": "* * * * *"}


def hourly_job(world: MemoryCore, **fields: Any) -> Any:
    """A job created at T0 (09:00) running every minute; the world then moves to 12:00."""
    job = world.create(EVERY_MINUTE, **fields)
    world.set_time(at("2026-01-05T12:00"))
    return job


def sent_backfill(world: MemoryCore) -> list[Any]:
    return [d for d in world.sent() if d.kind == "backfill"]


# -- requesting a backfill -------------------------------------------------------------------------------------


def test_a_backfill_counts_the_occurrences_of_its_range_and_starts_running(world: MemoryCore) -> None:
    job = hourly_job(world)

    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T08:00"), at("2026-01-05T09:30"))

    assert backfill.state == BackfillState.RUNNING
    # [08:00, 09:30) every minute: 90 occurrences, also before the job existed (that is what a backfill is for)
    assert (backfill.total, backfill.dispatched, backfill.remaining, backfill.cursor) == (90, 0, 90, None)
    assert world.backfill.waves_left(backfill) == 2  # waves of 50
    assert world.backfills.get(backfill.backfill_id) == backfill


@pytest.mark.parametrize(
    ("start", "end", "field", "message"),
    [
        ("2026-01-05T11:00", "2026-01-05T12:00:01", "to", "future"),
        ("2026-01-04T00:00", "2026-01-05T12:00", "from", "more than 1000 occurrences"),
        ("2026-01-05T10:00:10", "2026-01-05T10:00:50", "from", "no occurrence"),
    ],
)
def test_a_range_that_cannot_be_backfilled_is_refused(world: MemoryCore, start, end, field, message) -> None:
    job = hourly_job(world)

    with pytest.raises(InvalidRequest, match=message) as refused:
        world.backfill.start(TENANT, job.job_id, at(start), at(end))

    assert refused.value.field == field
    assert world.backfills.items == {}


def test_only_recurring_live_jobs_of_the_caller_can_be_backfilled(world: MemoryCore) -> None:
    once = world.create({"type": "once", "delay_seconds": 10})
    recurring = hourly_job(world)
    span = (at("2026-01-05T10:00"), at("2026-01-05T11:00"))

    with pytest.raises(InvalidRequest, match="recurring"):
        world.backfill.start(TENANT, once.job_id, *span)
    with pytest.raises(JobNotFound):
        world.backfill.start("globex", recurring.job_id, *span)
    world.service.cancel(TENANT, recurring.job_id)
    with pytest.raises(InvalidState):
        world.backfill.start(TENANT, recurring.job_id, *span)


def test_another_tenant_cannot_see_or_cancel_a_backfill(world: MemoryCore) -> None:
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T10:00"), at("2026-01-05T11:00"))

    with pytest.raises(JobNotFound):
        world.backfill.get("globex", job.job_id, backfill.backfill_id)
    with pytest.raises(JobNotFound):
        world.backfill.cancel("globex", job.job_id, backfill.backfill_id)
    with pytest.raises(BackfillNotFound):
        world.backfill.get(TENANT, job.job_id, "no-such-backfill")
    other = world.create(EVERY_MINUTE)
    with pytest.raises(BackfillNotFound):
        world.backfill.get(TENANT, other.job_id, backfill.backfill_id)


# -- waves ---------------------------------------------------------------------------------------------------


def test_sweeps_send_the_range_in_waves_with_the_normal_occurrence_keys(world: MemoryCore) -> None:
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T08:00"), at("2026-01-05T09:30"))

    first = world.sweep()

    assert first.backfill_dispatched == 50
    progress = world.backfill.get(TENANT, job.job_id, backfill.backfill_id)
    assert (progress.dispatched, progress.remaining, progress.waves) == (50, 40, 1)
    assert progress.cursor == at("2026-01-05T08:49")
    assert world.backfill.waves_left(progress) == 1

    world.clock.advance(60)
    assert world.sweep().backfill_dispatched == 40
    done = world.backfill.get(TENANT, job.job_id, backfill.backfill_id)
    assert (done.state, done.dispatched, done.remaining, done.waves) == (BackfillState.COMPLETED, 90, 0, 2)
    assert world.backfill.waves_left(done) == 0

    sent = sent_backfill(world)
    expected = [at("2026-01-05T08:00") + timedelta(minutes=m) for m in range(90)]
    assert [d.scheduled_for for d in sent] == expected
    assert [d.key for d in sent] == [occurrence_key(job.job_id, t) for t in expected]
    assert {(d.kind, d.version, d.tenant) for d in sent} == {("backfill", job.version, TENANT)}

    # And a completed backfill sends nothing more
    world.clock.advance(60)
    assert world.sweep().backfill_dispatched == 0


def test_occurrences_that_already_ran_are_not_run_again(world: MemoryCore) -> None:
    # Given a job that ran its occurrences 09:01-09:05
    job = world.create(EVERY_MINUTE)
    target = FakeTarget(world.clock)
    executor = world.executor(target)
    world.run(at("2026-01-05T09:05:30"), executor)
    ran = {c.key for c in target.calls}
    assert ran == {occurrence_key(job.job_id, at(f"2026-01-05T09:0{m}")) for m in range(1, 6)}

    # When a backfill covers 08:58-09:05 (two occurrences before the job existed, five that ran)
    world.backfill.start(TENANT, job.job_id, at("2026-01-05T08:58"), at("2026-01-05T09:06"))
    world.sweep()
    world.deliver(executor)

    # Then only the three that never ran are run, once each (the chain meanwhile goes on from 09:06)
    counts = Counter(c.key for c in target.calls if c.scheduled_for < at("2026-01-05T09:06"))
    assert set(counts.values()) == {1}
    assert set(counts) - ran == {occurrence_key(job.job_id, at(f"2026-01-05T{t}")) for t in ("08:58", "08:59", "09:00")}


def test_backfilled_occurrences_are_not_skipped_as_overlapping(world: MemoryCore) -> None:
    # The overlap policy guards the live chain; a backfill's occurrences run side by side (bounded by its waves)
    job = hourly_job(world, overlap_policy="skip")
    world.backfill.start(TENANT, job.job_id, at("2026-01-05T10:00"), at("2026-01-05T10:05"))
    world.sweep()
    target = FakeTarget(world.clock)

    world.deliver(world.executor(target))

    assert len([c for c in target.calls if c.scheduled_for < at("2026-01-05T11:00")]) == 5
    runs, _ = world.ledger.runs(job.job_id, 100, None)
    assert {r.state for r in runs if r.scheduled_for < at("2026-01-05T11:00")} == {RunState.SUCCEEDED}


def test_waves_take_only_what_the_buckets_leave_of_the_sweep_budget(world: MemoryCore) -> None:
    # Given a backfill and 30 one-shot jobs due in the next minute
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T08:00"), at("2026-01-05T09:30"))
    for _ in range(30):
        world.create({"type": "once", "at": rfc3339(world.now() + timedelta(seconds=30))})

    # When a sweep runs with a budget of 40
    report = world.sweep(budget=40)

    # Then the on-time work went first and the backfill got the rest (also less than its wave of 50)
    assert report.backfill_dispatched == 40 - (report.dispatched - report.backfill_dispatched)
    assert report.dispatched - report.backfill_dispatched >= 30
    assert world.backfills.get(backfill.backfill_id).dispatched == report.backfill_dispatched


def test_a_sweep_that_spent_its_budget_on_buckets_sends_no_wave(world: MemoryCore) -> None:
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T08:00"), at("2026-01-05T09:30"))
    for _ in range(30):
        world.create({"type": "once", "at": rfc3339(world.now() + timedelta(seconds=30))})

    assert world.sweep(budget=10).backfill_dispatched == 0
    assert world.backfills.get(backfill.backfill_id).dispatched == 0


# -- cancel, pause, crash, races -----------------------------------------------------------------------------


def test_cancel_stops_further_waves_and_is_idempotent(world: MemoryCore) -> None:
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T08:00"), at("2026-01-05T09:30"))
    world.sweep()

    cancelled = world.backfill.cancel(TENANT, job.job_id, backfill.backfill_id)

    assert (cancelled.state, cancelled.dispatched, cancelled.remaining) == (BackfillState.CANCELLED, 50, 0)
    assert world.backfill.cancel(TENANT, job.job_id, backfill.backfill_id).state == BackfillState.CANCELLED
    world.clock.advance(60)
    assert world.sweep().backfill_dispatched == 0
    assert len(sent_backfill(world)) == 50


def test_a_completed_backfill_cannot_be_cancelled(world: MemoryCore) -> None:
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T10:00"), at("2026-01-05T10:10"))
    world.sweep()

    with pytest.raises(InvalidState, match="completed"):
        world.backfill.cancel(TENANT, job.job_id, backfill.backfill_id)


def test_a_paused_job_holds_its_backfill_and_a_cancelled_one_ends_it(world: MemoryCore) -> None:
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T08:00"), at("2026-01-05T09:30"))
    world.service.pause(TENANT, job.job_id)

    assert world.sweep().backfill_dispatched == 0
    assert world.backfills.get(backfill.backfill_id).state == BackfillState.RUNNING

    world.service.resume(TENANT, job.job_id)
    assert world.sweep().backfill_dispatched == 50

    world.service.cancel(TENANT, job.job_id)
    world.clock.advance(60)
    assert world.sweep().backfill_dispatched == 0
    assert world.backfills.get(backfill.backfill_id).state == BackfillState.CANCELLED


class Crash(BaseException):
    pass


def test_a_sweeper_that_dies_between_sending_a_wave_and_recording_it_resends_it_and_nothing_runs_twice(
    world: MemoryCore,
) -> None:
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T10:00"), at("2026-01-05T10:30"))
    real_advance = world.backfills.advance

    def die(*args: Any, **kwargs: Any) -> bool:
        raise Crash("after the send, before the cursor moved")

    world.backfills.advance = die  # type: ignore[method-assign]
    with pytest.raises(Crash):
        world.sweep()
    world.backfills.advance = real_advance  # type: ignore[method-assign]
    assert len(sent_backfill(world)) == 30 and world.backfills.get(backfill.backfill_id).dispatched == 0

    world.sweep()
    target = FakeTarget(world.clock)
    world.deliver(world.executor(target))

    assert len(sent_backfill(world)) == 60  # the wave went out twice...
    backfilled = [c.key for c in target.calls if c.scheduled_for < at("2026-01-05T11:00")]
    assert len(backfilled) == 30 and len(set(backfilled)) == 30  # ...and each occurrence ran once
    assert world.backfills.get(backfill.backfill_id).state == BackfillState.COMPLETED


def test_concurrent_sweepers_move_the_cursor_once_per_wave(world: MemoryCore) -> None:
    job = hourly_job(world)
    backfill = world.backfill.start(TENANT, job.job_id, at("2026-01-05T08:00"), at("2026-01-05T09:30"))
    stale = world.backfills.get(backfill.backfill_id)
    assert stale is not None
    world.sweep("sweeper-1")

    # A second sweeper that read the backfill before the first one's wave cannot record its own over it
    assert not world.backfills.advance(stale, at("2026-01-05T08:49"), 50, False, world.now())

    assert world.backfills.get(backfill.backfill_id).dispatched == 50
