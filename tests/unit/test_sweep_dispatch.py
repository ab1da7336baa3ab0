"""The sweep and the dispatch path: bucket claims, the watermark, budgets and checkpoints, chains, misfires,
delays and jitter."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import timedelta

import pytest

from scheduler.core.errors import QuotaExceeded
from scheduler.core.model.job import JobState, RunState
from scheduler.core.model.keys import occurrence_key, shard_of
from scheduler.core.model.schedules import preview
from scheduler.core.ports import BucketBusy, BucketClaim, BucketId
from scheduler.core.sweep.dispatch import timer_for
from tests.unit.fixtures import TENANT, FakeTarget, GivenJobIds, MemoryCore, at

EVERY_10_MIN = {"type": "cron", "expression": "*/10 * * * *"}
HOURLY = {"type": "cron", "expression": "0 * * * *"}


def once_in(seconds: int) -> dict[str, object]:
    return {"type": "once", "delay_seconds": seconds}


# -- buckets and the watermark ------------------------------------------------------------------------------


def test_first_sweep_claims_and_completes_every_bucket_up_to_the_lookahead() -> None:
    world = MemoryCore.build(shard_count=4)

    report = world.sweep()

    # Then the minutes from 10 min back (initial lag) to now + 5 min, times 4 shards, are done
    minutes = [at("2026-01-05T08:50") + timedelta(minutes=m) for m in range(16)]
    assert report.buckets_done == 16 * 4
    assert all(world.timers.buckets[BucketId(m, s)].done for m in minutes for s in range(4))
    assert BucketId(at("2026-01-05T09:06"), 0) not in world.timers.buckets
    assert report.watermark == world.timers.watermark() == at("2026-01-05T09:06")
    assert not report.stopped_early


def test_next_sweep_starts_at_the_watermark() -> None:
    world = MemoryCore.build(shard_count=2)
    world.sweep()

    world.clock.advance(60)
    report = world.sweep()

    # Only the one new minute (09:06) is swept, in both shards
    assert report.buckets_done == 2
    assert report.watermark == at("2026-01-05T09:07")


def test_a_bucket_held_by_another_live_claim_stops_the_watermark(world: MemoryCore) -> None:
    # Given another sweeper holds the 09:02 bucket (it is alive: its lease runs to 09:02)
    job = world.create(once_in(150))  # due 09:02:30, in that bucket
    held = world.timers.claim_bucket(BucketId(at("2026-01-05T09:02"), 0), "other", world.now(), at("2026-01-05T09:02"))
    assert isinstance(held, BucketClaim)

    # When this sweeper runs
    report = world.sweep()

    # Then it skips that bucket, finishes the later ones, but the watermark stays at 09:02
    assert report.buckets_busy == 1
    assert world.timers.buckets[BucketId(at("2026-01-05T09:03"), 0)].done
    assert report.watermark == world.timers.watermark() == at("2026-01-05T09:02")
    assert world.sent(job.job_id) == []

    # When the other sweeper's lease has expired (it died), the next sweep takes the bucket over
    world.set_time(at("2026-01-05T09:02:01"))
    report = world.sweep()

    assert world.sent_for(job.job_id) == [at("2026-01-05T09:02:30")]
    assert report.watermark == at("2026-01-05T09:08")


def test_dispatch_lag_is_reported_while_a_bucket_is_stuck(world: MemoryCore) -> None:
    world.sweep()  # the watermark is at 09:06
    world.timers.claim_bucket(BucketId(at("2026-01-05T09:07"), 0), "other", world.now(), at("2026-01-05T09:30"))
    world.set_time(at("2026-01-05T09:20"))

    report = world.sweep()

    assert report.watermark == at("2026-01-05T09:07")
    assert report.lag_seconds == 13 * 60
    assert world.metrics.counts["DispatchLagSeconds"] == 13 * 60


def test_a_done_bucket_is_never_claimed_again(world: MemoryCore) -> None:
    world.sweep()

    again = world.timers.claim_bucket(BucketId(at("2026-01-05T09:00"), 0), "late", world.now(), at("2026-01-05T10:00"))

    assert again == BucketBusy(done=True)


def test_first_sweep_reaches_back_for_timers_written_by_a_lagging_clock(world: MemoryCore) -> None:
    # Given a job due 5 minutes ago (e.g. written by an API whose clock lags), before any sweep ran
    job = world.create({"type": "once", "at": "2026-01-05T08:55:00Z"})

    world.sweep()

    # Then the first sweep, starting 10 minutes back, finds and dispatches it (run_once misfire)
    assert world.sent_for(job.job_id) == [at("2026-01-05T08:55")]


def test_late_lane_left_by_a_crashed_api_is_drained(world: MemoryCore) -> None:
    # Given an API that wrote a near-term timer and its late-lane copy, then crashed before settling it, into a
    # bucket that was already swept
    world.sweep()
    job = world.create(HOURLY)
    crashed = timer_for(world.job(job.job_id), at("2026-01-05T09:00:20"))
    world.timers.put_timer(crashed)
    world.timers.put_late(crashed)

    # When the next sweep runs
    report = world.sweep()

    # Then it drains the late lane: the occurrence is dispatched, and the copy is gone
    assert report.late_drained == 1
    assert at("2026-01-05T09:00:20") in world.sent_for(job.job_id)
    assert not world.timers.late


# -- budgets and checkpoints --------------------------------------------------------------------------------


def test_dispatch_budget_stops_a_sweep_and_the_next_resumes_without_loss_or_repeat(world: MemoryCore) -> None:
    # Given five jobs due one per minute, 09:01 to 09:05, and a budget of 2 per sweep
    jobs = [world.create(once_in(60 * m)) for m in range(1, 6)]

    due = [at("2026-01-05T09:00") + timedelta(minutes=m) for m in range(1, 6)]
    reports = []
    for _ in range(3):
        reports.append(world.sweep(budget=2))
        # the watermark never passes an occurrence that has not been sent ...
        sent = set(world.sent_for())
        assert all(t in sent for t in due if t < reports[-1].watermark)

    # Then each sweep stops early until the last, which finishes the look-ahead ...
    assert [r.stopped_early for r in reports] == [True, True, False]
    assert [r.dispatched for r in reports] == [2, 2, 1]
    assert reports[-1].watermark == at("2026-01-05T09:06")
    # ... and every occurrence was sent exactly once, in order
    assert world.sent_for() == [at("2026-01-05T09:00") + timedelta(minutes=m) for m in range(1, 6)]
    assert {d.job_id for d in world.sent()} == {j.job_id for j in jobs}


def test_budget_inside_one_bucket_resumes_from_the_checkpoint_cursor() -> None:
    # Given 250 jobs due in the same minute (more than two pages of 100) and a budget of 100
    world = MemoryCore.build(max_active_jobs=1000)
    jobs = [world.create(once_in(270)) for _ in range(250)]

    first = world.sweep(budget=100)
    second = world.sweep(budget=100)
    third = world.sweep(budget=100)

    # Then the sweeps take a page each, resuming after the last checkpoint
    assert (first.dispatched, second.dispatched, third.dispatched) == (100, 100, 50)
    assert first.stopped_early and second.stopped_early and not third.stopped_early
    counts = Counter(d.job_id for d in world.sent())
    assert set(counts) == {j.job_id for j in jobs}
    assert set(counts.values()) == {1}
    assert third.watermark == at("2026-01-05T09:06")


def job_ids_one_per_shard(shard_count: int) -> list[str]:
    """Job ids that land in shards 0, 1, ..., shard_count - 1 (in that order)."""
    by_shard: dict[int, str] = {}
    n = 0
    while len(by_shard) < shard_count:
        by_shard.setdefault(shard_of(f"job-{n}", shard_count), f"job-{n}")
        n += 1
    return [by_shard[s] for s in range(shard_count)]


def test_a_sweep_that_spent_its_budget_claims_no_further_bucket() -> None:
    # Given four jobs due in the same minute, one in each of four shards, and a budget of one
    world = MemoryCore.build(shard_count=4, ids=GivenJobIds(job_ids_one_per_shard(4)))
    for _ in range(4):
        world.create(once_in(150))

    report = world.sweep(budget=1)

    # Then the sweep stops after the first one ("occurrences one invocation dispatches at most")
    assert report.dispatched == 1
    assert len(world.queue.history) == 1


def test_a_sweep_over_budget_still_loses_and_repeats_nothing() -> None:
    world = MemoryCore.build(shard_count=4, ids=GivenJobIds(job_ids_one_per_shard(4)))
    jobs = [world.create(once_in(150)) for _ in range(4)]

    # Four sweeps each dispatch one occurrence; the budget stops each before it claims another bucket, so a
    # fifth sweep (with nothing left to send) carries the watermark to the end of the look-ahead.
    for _ in range(5):
        world.sweep(budget=1)

    assert sorted(d.job_id for d in world.sent()) == sorted(j.job_id for j in jobs)
    assert world.timers.watermark() == at("2026-01-05T09:06")


def test_sweep_stops_before_its_deadline(world: MemoryCore) -> None:
    world.create(once_in(60))
    sweeper = world.sweeper()

    # When the sweep starts with less time left than its safety margin
    report = sweeper.sweep(deadline=world.now() + timedelta(seconds=3))

    assert report.stopped_early
    assert report.dispatched == 0
    assert world.timers.watermark() == at("2026-01-05T08:50")


def test_bucket_re_swept_after_a_crash_dispatches_again_but_writes_no_second_chain(world: MemoryCore) -> None:
    # Given sweeper A claimed the 09:10 bucket, dispatched its page, and died before marking it done
    job = world.create(EVERY_10_MIN)
    world.set_time(at("2026-01-05T09:06"))
    bucket = BucketId(at("2026-01-05T09:10"), 0)
    claim = world.timers.claim_bucket(bucket, "A", world.now(), world.now() + timedelta(minutes=2))
    assert isinstance(claim, BucketClaim)
    for page, _ in world.timers.timers(bucket, None):
        world.dispatcher.dispatch(page, world.dispatcher.horizon_end(world.now()))

    # When its lease expires and sweeper B re-runs the bucket
    world.set_time(at("2026-01-05T09:08:01"))
    world.sweep(owner="B")

    # Then 09:10 was sent twice (the ledger absorbs that) but the chain has one 09:20 timer, not two
    assert world.sent_for(job.job_id).count(at("2026-01-05T09:10")) == 2
    assert [t.scheduled_for for t in world.pending_timers(job.job_id)] == [
        at("2026-01-05T09:10"),
        at("2026-01-05T09:20"),
    ]
    target = FakeTarget(world.clock)
    world.deliver_until(at("2026-01-05T09:10:05"), world.executor(target))
    assert [c.scheduled_for for c in target.calls] == [at("2026-01-05T09:10")]


def crash_after_dispatch(world: MemoryCore, minute: str, lease: timedelta) -> None:
    """Sweeper A claims the bucket of `minute` (shard 0), dispatches its timers, and dies before marking it done."""
    bucket = BucketId(at(minute), 0)
    claim = world.timers.claim_bucket(bucket, "A", world.now(), world.now() + lease)
    assert isinstance(claim, BucketClaim)
    for page, _ in world.timers.timers(bucket, None):
        world.dispatcher.dispatch(page, world.dispatcher.horizon_end(world.now()))


def test_re_sweep_after_the_chain_moved_on_keeps_the_chain_and_runs_each_occurrence_once(world: MemoryCore) -> None:
    # Given sweeper A dispatched 09:10 and died holding the bucket for 10 minutes, while other sweeps went on
    # and already dispatched 09:20 from its own bucket
    job = world.create(EVERY_10_MIN)
    target = FakeTarget(world.clock)
    executor = world.executor(target)
    world.set_time(at("2026-01-05T09:06"))
    crash_after_dispatch(world, "2026-01-05T09:10", lease=timedelta(minutes=10))
    for second in range(6 * 60, 16 * 60, 5):
        world.set_time(at("2026-01-05T09:00") + timedelta(seconds=second))
        if second % 60 == 0:
            world.sweep(owner="B")
        world.deliver(executor)
    assert world.sent_for(job.job_id) == [at("2026-01-05T09:10"), at("2026-01-05T09:20")]

    # When A's lease expires and the 09:10 bucket is re-swept (now late: the misfire policy applies to it)
    world.set_time(at("2026-01-05T09:16:01"))
    world.sweep(owner="B")
    world.deliver_until(at("2026-01-05T09:21"), executor)

    # Then the re-sent messages are absorbed: each occurrence ran once, and the chain still points at 09:30
    assert [c.scheduled_for for c in target.calls] == [at("2026-01-05T09:10"), at("2026-01-05T09:20")]
    assert world.job(job.job_id).next_run_at == at("2026-01-05T09:30")
    assert world.watermark_passed(at("2026-01-05T09:10"))


def test_re_sweep_of_a_completed_once_job_frees_its_quota_slot_only_once() -> None:
    # Given a tenant with a quota of one, whose once job was dispatched by a sweeper that then died
    world = MemoryCore.build(max_active_jobs=1)
    world.create(once_in(150))
    crash_after_dispatch(world, "2026-01-05T09:02", lease=timedelta(minutes=1))

    # When the bucket is re-swept after the lease
    world.set_time(at("2026-01-05T09:01:01"))
    world.sweep()

    # Then the completed job freed one slot, not two
    world.create(HOURLY)
    with pytest.raises(QuotaExceeded):
        world.create(HOURLY)


# -- chains -------------------------------------------------------------------------------------------------


def test_recurring_chain_advances_and_writes_the_next_timer(world: MemoryCore) -> None:
    job = world.create(EVERY_10_MIN)
    world.set_time(at("2026-01-05T09:06"))

    world.sweep()

    # Then 09:10 is dispatched, the job moved past it, and the 09:20 timer waits in its bucket
    assert world.sent_for(job.job_id) == [at("2026-01-05T09:10")]
    stored = world.job(job.job_id)
    assert stored.last_dispatched_for == at("2026-01-05T09:10")
    assert stored.next_run_at == at("2026-01-05T09:20")
    assert at("2026-01-05T09:20") in [t.scheduled_for for t in world.pending_timers(job.job_id)]


def test_recurring_job_fires_every_occurrence_once_over_two_hours(world: MemoryCore) -> None:
    job = world.create(EVERY_10_MIN)
    target = FakeTarget(world.clock)

    world.run(at("2026-01-05T11:00"), world.executor(target))

    expected = [at("2026-01-05T09:10") + timedelta(minutes=10 * i) for i in range(12)]
    assert [c.scheduled_for for c in target.calls] == expected
    assert world.sent_for(job.job_id) == expected
    assert all(c.at >= c.scheduled_for for c in target.calls)
    assert all(world.ledger.get(c.key).state == RunState.SUCCEEDED for c in target.calls)  # type: ignore[union-attr]


def test_fast_rate_is_dispatched_ahead_with_no_gap_or_repeat(world: MemoryCore) -> None:
    # Given a 30-second rate: one sweep dispatches every occurrence in its horizon, and chains beyond it
    job = world.create({"type": "rate", "every_seconds": 30})

    for _ in range(10):
        world.sweep()
        world.clock.advance(60)

    sent = world.sent_for(job.job_id)
    assert sent[0] == at("2026-01-05T09:00:30")
    assert len(sent) == len(set(sent))
    assert {b - a for a, b in itertools.pairwise(sent)} == {timedelta(seconds=30)}
    assert sent[-1] >= at("2026-01-05T09:14:00")


@pytest.mark.parametrize(
    "sched",
    [
        {"type": "rate", "every_seconds": 60, "start_at": "2026-01-05T09:01:00Z", "end_at": "2026-01-05T09:03:00Z"},
        {"type": "cron", "expression": "* * * * *", "end_at": "2026-01-05T09:03:00Z"},
    ],
)
def test_bounded_chain_stops_at_end_at_and_completes(world: MemoryCore, sched: dict[str, object]) -> None:
    job = world.create(sched)

    for _ in range(10):
        world.sweep()
        world.clock.advance(60)

    assert world.sent_for(job.job_id) == [at("2026-01-05T09:01"), at("2026-01-05T09:02"), at("2026-01-05T09:03")]
    assert world.job(job.job_id).state == JobState.COMPLETED
    assert world.job(job.job_id).next_run_at is None


def test_once_job_completes_after_dispatch(world: MemoryCore) -> None:
    job = world.create(once_in(120))

    world.sweep()

    assert world.job(job.job_id).state == JobState.COMPLETED
    assert world.job(job.job_id).next_run_at is None


@pytest.mark.parametrize("change", ["pause", "cancel"])
def test_paused_or_cancelled_jobs_timer_is_skipped_and_stops_the_chain(world: MemoryCore, change: str) -> None:
    job = world.create(HOURLY)
    getattr(world.service, change)(TENANT, job.job_id)

    world.set_time(at("2026-01-05T09:58"))
    world.sweep()

    # Then nothing is sent, the job did not move, and no 11:00 timer was written
    assert world.sent(job.job_id) == []
    assert world.metrics.counts["OccurrencesSkipped"] == 1
    assert [t.scheduled_for for t in world.pending_timers(job.job_id)] == [at("2026-01-05T10:00")]
    assert world.job(job.job_id).last_dispatched_for is None


def test_edited_jobs_old_timer_is_skipped_and_its_chain_stops(world: MemoryCore) -> None:
    job = world.create(HOURLY, jitter_seconds=0)
    # A schedule and jitter change puts the new timer in another slot, so the version-1 10:00 timer stays behind
    world.service.update(TENANT, job.job_id, {"jitter_seconds": 20, "schedule": {"expression": "5 * * * *"}}, None)
    assert at("2026-01-05T10:00") in [t.scheduled_for for t in world.pending_timers(job.job_id)]

    for minute in range(0, 70):
        world.set_time(at("2026-01-05T09:00") + timedelta(minutes=minute))
        world.sweep()

    # Then only version-2 occurrences went out, and nothing of version 1 chained on
    assert [(d.scheduled_for, d.version) for d in world.sent(job.job_id)] == [
        (at("2026-01-05T09:05"), 2),
        (at("2026-01-05T10:05"), 2),
    ]
    assert world.metrics.counts["OccurrencesSkipped"] == 1
    assert {t.version for t in world.pending_timers(job.job_id) if t.scheduled_for > at("2026-01-05T10:00")} == {2}


def test_every_15_minutes_in_new_york_through_fall_back_runs_each_occurrence_once() -> None:
    # Given a 15-minute New York job across the night the clocks go back (2026-11-01, 01:00-02:00 repeats)
    world = MemoryCore.build(start=at("2026-11-01T03:00"))
    job = world.create({"type": "cron", "expression": "*/15 * * * *", "timezone": "America/New_York"})
    target = FakeTarget(world.clock)

    world.run(at("2026-11-01T09:00"), world.executor(target))

    # Then every occurrence ran once, none in the repeated hour, none before its time
    ran = [c.scheduled_for for c in target.calls]
    expected = preview(job.spec.schedule, at("2026-11-01T03:00"), job.created_at, 100)
    assert ran == [t for t in expected if t <= at("2026-11-01T09:00")]
    assert [t for t in ran if at("2026-11-01T06:00") <= t < at("2026-11-01T07:00")] == []
    assert all(c.at >= c.scheduled_for for c in target.calls)


def test_daily_0230_in_berlin_runs_at_0300_on_the_spring_forward_night_end_to_end() -> None:
    world = MemoryCore.build(start=at("2026-03-27T12:00"))
    world.create({"type": "cron", "expression": "30 2 * * *", "timezone": "Europe/Berlin"})
    target = FakeTarget(world.clock)

    world.run(at("2026-03-30T12:00"), world.executor(target), step=timedelta(minutes=5))

    assert [c.scheduled_for for c in target.calls] == [
        at("2026-03-28T01:30"),  # 02:30 CET
        at("2026-03-29T01:00"),  # 03:00 CEST: the first valid instant after the gap
        at("2026-03-30T00:30"),  # 02:30 CEST
    ]


# -- misfire ------------------------------------------------------------------------------------------------


def jump_an_hour(policy: str, catchup: timedelta = timedelta(days=1)) -> tuple[MemoryCore, str]:
    """A 10-minute job; the sweeper is down from 09:00 to 10:15 (the clock jumps forward)."""
    world = MemoryCore.build(catchup_window=catchup)
    job = world.create(EVERY_10_MIN, misfire_policy=policy)
    world.sweep()
    assert world.sent() == []
    world.set_time(at("2026-01-05T10:15"))
    world.sweep()
    return world, job.job_id


MISSED = [at("2026-01-05T09:10") + timedelta(minutes=10 * i) for i in range(7)]  # 09:10 .. 10:10


def test_misfire_run_once_fires_the_latest_missed_occurrence() -> None:
    world, job_id = jump_an_hour("run_once")

    # Then of the seven missed (09:10 to 10:10) only 10:10 goes out; 10:20 follows in the look-ahead
    assert world.sent_for(job_id) == [at("2026-01-05T10:10"), at("2026-01-05T10:20")]
    assert world.metrics.counts["MisfireSkipped"] == 6
    assert world.job(job_id).misfire_skipped == 6
    assert world.job(job_id).next_run_at == at("2026-01-05T10:30")


def test_misfire_skip_fires_none_of_the_missed() -> None:
    world, job_id = jump_an_hour("skip")

    assert world.sent_for(job_id) == [at("2026-01-05T10:20")]
    assert world.metrics.counts["MisfireSkipped"] == 7
    assert world.job(job_id).next_run_at == at("2026-01-05T10:30")


def test_misfire_run_all_fires_every_missed_occurrence_oldest_first() -> None:
    world, job_id = jump_an_hour("run_all")

    assert world.sent_for(job_id) == [*MISSED, at("2026-01-05T10:20")]
    assert "MisfireSkipped" not in world.metrics.counts


def test_misfire_run_all_is_bounded_by_the_catchup_window() -> None:
    # Given a 30-minute catch-up window: at 10:15 only occurrences since 09:45 are caught up
    world, job_id = jump_an_hour("run_all", catchup=timedelta(minutes=30))

    assert world.sent_for(job_id) == [*MISSED[4:], at("2026-01-05T10:20")]
    assert world.metrics.counts["MisfireSkipped"] == 4


def test_lateness_within_the_grace_is_not_a_misfire() -> None:
    world = MemoryCore.build(misfire_grace=timedelta(minutes=2))
    job = world.create(EVERY_10_MIN, misfire_policy="skip")
    world.set_time(at("2026-01-05T09:11:30"))  # the sweeper is 90 s late for 09:10

    world.sweep()

    assert world.sent_for(job.job_id)[0] == at("2026-01-05T09:10")
    assert "MisfireSkipped" not in world.metrics.counts


# -- delays and jitter --------------------------------------------------------------------------------------


def test_delay_seconds_never_make_a_message_visible_more_than_a_second_early(world: MemoryCore) -> None:
    # Given 40 jobs at 09:03 with up to 30 s of millisecond jitter, swept at 09:00
    for _ in range(40):
        world.create({"type": "cron", "expression": "3 9 * * *"}, jitter_seconds=30)

    world.sweep()

    # Then every message becomes visible within the second before its fire time (SQS delays are whole seconds,
    # rounded down; the worker waits out the remainder), never later, and never sooner
    assert len(world.queue.history) == 40
    for sent in world.queue.history:
        assert sent.dispatch.fire_at - timedelta(seconds=1) < sent.visible_at <= sent.dispatch.fire_at


def test_no_occurrence_starts_before_its_fire_time(world: MemoryCore) -> None:
    for _ in range(40):
        world.create({"type": "cron", "expression": "3 9 * * *"}, jitter_seconds=30)
    world.sweep()
    target = FakeTarget(world.clock)

    world.deliver_until(at("2026-01-05T09:04"), world.executor(target), step=0.25)

    fire_at = {s.dispatch.key: s.dispatch.fire_at for s in world.queue.history}
    assert len(target.calls) == 40
    for call in target.calls:
        assert fire_at[call.key] <= call.at < fire_at[call.key] + timedelta(seconds=1)


def test_jitter_spreads_fire_at_but_the_key_uses_the_nominal_instant(world: MemoryCore) -> None:
    jobs = [world.create({"type": "cron", "expression": "3 9 * * *"}, jitter_seconds=30) for _ in range(40)]

    world.sweep()

    sent = world.sent()
    assert {d.scheduled_for for d in sent} == {at("2026-01-05T09:03")}
    assert {d.key for d in sent} == {occurrence_key(j.job_id, at("2026-01-05T09:03")) for j in jobs}
    assert all(d.key.endswith(":2026-01-05T09:03:00Z") for d in sent)
    fire = [d.fire_at for d in sent]
    assert all(at("2026-01-05T09:03") <= f <= at("2026-01-05T09:03:30") for f in fire)
    assert len(set(fire)) > 35


def test_jittered_redispatch_lands_on_the_same_instant(world: MemoryCore) -> None:
    job = world.create({"type": "cron", "expression": "3 9 * * *"}, jitter_seconds=300)

    timer = timer_for(world.job(job.job_id), at("2026-01-05T09:03"))
    again = timer_for(world.job(job.job_id), at("2026-01-05T09:03"))

    assert timer.fire_at == again.fire_at
    assert world.pending_timers(job.job_id)[0].fire_at == timer.fire_at
