"""Changing the shard count of a live deployment (docs/design.md §3.3), against both backends: every writer records
its count (grow-only) before its first write with it, each sweep sweeps the recorded count, and a sweep that swept
fewer shards than were recorded by the time it advances does not move the watermark. So a timer written with a
raised count while an older sweep runs, in a bucket that sweep never looked at, is never left behind the watermark,
and lowering the count never hides timers written with the higher one."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from crashable import SHARDS, T0, CrashableCore

from scheduler.adapters.dynamodb import DynamoJobStore, DynamoTimerStore
from scheduler.core.jobs.service import JobService
from scheduler.core.model.job import JobSpec
from scheduler.core.model.keys import shard_of
from scheduler.core.model.timefmt import minute_of, rfc3339
from scheduler.core.sweep.dispatch import timer_for

RAISED = 2 * SHARDS


def stores_with(world: CrashableCore, shard_count: int) -> tuple[Any, Any]:
    """The world's job and timer stores as a process deployed with `shard_count` sees them."""
    if world.backend == "memory":
        timers = world.timers.with_shard_count(shard_count)
        jobs = copy.copy(world.jobs)
        jobs.timers = timers
        return jobs, timers
    client = world.timers.client
    table = world.jobs.table
    return DynamoJobStore(table, shard_count, client), DynamoTimerStore(table, shard_count, client)


def create_in_a_new_shard(service: JobService, world: CrashableCore, seconds: int) -> str:
    """A one-shot job due `seconds` after now whose shard exists only under the raised count."""
    spec = JobSpec.model_validate(
        {
            "schedule": {"type": "once", "at": rfc3339(world.clock.now() + timedelta(seconds=seconds))},
            "target": {"type": "http", "url": "https://example.com/hook"},
        }
    )
    for _ in range(64):
        job_id = service.create("tenant", spec, None, {}).job.job_id
        world.created.append(job_id)
        if shard_of(job_id, RAISED) >= SHARDS:
            return job_id
    raise AssertionError("no job landed in a new shard")


class RaiseDuringTheSweep:
    """The old sweep's timer store, but right after the sweep read the recorded count, a process deployed with the
    raised count writes a job due inside the look-ahead (its bucket unsealed: the API leaves it to the sweeps)."""

    def __init__(self, inner: Any, write: Any) -> None:
        self.inner, self.write = inner, write
        self.job: str | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def recorded_shards(self) -> int:
        count = self.inner.recorded_shards()
        if self.job is None:
            self.job = self.write()
        return int(count)


class FenceIgnored(RaiseDuringTheSweep):
    """... and a broken sweep that moves the watermark whatever count was recorded meanwhile."""

    def advance_watermark(self, minute: Any, swept_shards: int | None = None) -> None:
        self.inner.advance_watermark(minute, RAISED)


@pytest.mark.parametrize("broken", [False, True], ids=["fenced", "fence-ignored"])
def test_a_count_raised_while_a_sweep_runs_holds_its_watermark_and_the_next_sweep_finds_the_new_shard(
    world: CrashableCore, broken: bool
) -> None:
    world.run_until(T0 + timedelta(seconds=10))  # the watermark exists (past the 60 s look-ahead), nothing is due
    world.clock.advance(55)  # 09:01:05: the look-ahead reaches into the watermark's minute, 09:02
    new_jobs, new_timers = stores_with(world, RAISED)
    new_api = world.core(jobs=new_jobs, timers=new_timers).job_service()
    old_timers = (FenceIgnored if broken else RaiseDuringTheSweep)(
        world.timers, lambda: create_in_a_new_shard(new_api, world, 58)
    )

    # When an old sweep (the old count) runs while the new writer records its count and writes a job due at
    # 09:02:03, into a bucket the old sweep does not know
    old = world.sweeper("old", timers=old_timers)
    old.sweep(world.deadline())
    job, due_minute = old_timers.job, minute_of(T0 + timedelta(seconds=123))
    assert job is not None and world.timers.recorded_shards() == RAISED
    mark = world.timers.watermark()
    assert mark is not None

    if broken:
        # Then, without the fence, the old sweep moves the watermark past the job's minute: no sweep ever
        # looks at that bucket again, and the job is lost
        assert mark > due_minute
        world.run_until(T0 + timedelta(minutes=5))
        assert [key for key in world.sink.effects if job in key] == []
        return
    # Then the old sweep's watermark stops before the minutes it swept with the old count
    assert mark <= due_minute
    # and the next sweeps - old-config ones too - sweep the recorded count: the job runs once, on time
    world.run_until(T0 + timedelta(minutes=3))
    assert len([key for key in world.sink.effects if job in key]) == 1
    assert len(world.sink.effects) == len(world.created) and set(world.sink.effects.values()) == {1}
    assert world.timers.watermark() > due_minute


def test_lowering_the_count_keeps_sweeping_the_recorded_one(world: CrashableCore) -> None:
    # Given jobs written by a deployment with the raised count
    new_jobs, new_timers = stores_with(world, RAISED)
    new_api = world.core(jobs=new_jobs, timers=new_timers).job_service()
    job = create_in_a_new_shard(new_api, world, 90)
    # When the deployment goes back to the lower count, its sweeps still sweep every recorded shard
    world.run_until(T0 + timedelta(minutes=3))
    assert world.timers.recorded_shards() == RAISED
    assert len([key for key in world.sink.effects if job in key]) == 1
    assert len(world.sink.effects) == len(world.created) and set(world.sink.effects.values()) == {1}


def test_a_writer_that_recorded_its_count_and_died_before_writing_costs_empty_buckets_only(
    world: CrashableCore,
) -> None:
    _, new_timers = stores_with(world, RAISED)
    if world.backend == "memory":
        new_timers.record_shards()
    else:
        new_timers._record_shards()
    once = world.create({"type": "once", "at": rfc3339(T0 + timedelta(seconds=40))})
    world.run_until(T0 + timedelta(minutes=2))
    assert len(world.sink.effects) == 1 and once in next(iter(world.sink.effects))
    assert world.timers.watermark() > minute_of(T0 + timedelta(seconds=40))


def test_a_timer_or_late_copy_written_with_another_count_is_found_and_removed_where_it_lies(
    world: CrashableCore,
) -> None:
    # Given a timer and its late-lane copy written by a process deployed with the raised count
    _, new_timers = stores_with(world, RAISED)
    job = world.create({"type": "once", "at": rfc3339(T0 + timedelta(minutes=30))})
    stored = world.jobs.get(job)
    assert stored is not None and stored.next_run_at is not None
    timer = timer_for(stored, stored.next_run_at)
    new_timers.put_timer(timer)
    new_timers.put_late(timer)
    # Then a store of the old count finds the timer (a change of version's proof that its plan was sent) ...
    assert world.timers.has_timer(timer)
    # ... and a sweep reading the recorded count's late lane finds the copy and removes it where it lies
    late = world.timers.late_timers(10, world.timers.recorded_shards())
    assert timer in late
    world.timers.remove_late(timer)
    assert timer not in world.timers.late_timers(10, world.timers.recorded_shards())


def test_the_forecast_reads_every_recorded_shard(world: CrashableCore) -> None:
    # Given timers written by processes with the old and with a much larger shard count
    _, wide = stores_with(world, 24)
    jobs = [world.create({"type": "once", "at": rfc3339(T0 + timedelta(minutes=30, seconds=i))}) for i in range(12)]
    timers = []
    for job_id in jobs:
        stored = world.jobs.get(job_id)
        assert stored is not None and stored.next_run_at is not None
        timers.append(timer_for(stored, stored.next_run_at))
    for timer in timers[::2]:
        wide.put_timer(timer)
    # Then the old count's store reads them all for the forecast, whatever shard each lies in
    found = world.timers.upcoming(minute_of(T0 + timedelta(minutes=30)))
    assert {t.place for t in timers} <= {t.place for t in found}
    assert {shard_of(t.job_id, 24) for t in timers[::2]} - set(range(SHARDS))  # some lie beyond the old shards
