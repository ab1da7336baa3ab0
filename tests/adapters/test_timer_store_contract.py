"""TimerStore contract: the same tests run against MemoryTimerStore and DynamoTimerStore (DynamoDB Local)."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters import dynamodb, memory
from scheduler.core.errors import ClaimLost, QuotaExceeded
from scheduler.core.model.keys import shard_of
from scheduler.core.model.timefmt import minute_of
from scheduler.core.ports import BucketBusy, BucketClaim, BucketId, Timer

LEASE = timedelta(seconds=120)


def job_in_shard(make: Any, timers: Any, shard: int) -> Any:
    while True:
        job = make.job()
        if shard_of(job.job_id, timers.shard_count) == shard:
            return job


def bucket_timers(timers: Any, bucket: BucketId, after: str | None = None) -> list[Timer]:
    return [t for page, _ in timers.timers(bucket, after) for t in page]


def claim(timers: Any, bucket: BucketId, owner: str, now: Any) -> Any:
    return timers.claim_bucket(bucket, owner, now, now + LEASE)


def test_page_sizes_match() -> None:
    # the paging test below relies on both adapters paging at the same size
    assert memory.PAGE_SIZE == dynamodb.PAGE_SIZE == 100


def test_bucket_of_is_the_fire_minute_and_the_jobs_shard(timers, make) -> None:
    job = make.job(next_run_at=make.t0 + timedelta(seconds=61, milliseconds=500))
    timer = make.timer(job)
    assert timers.bucket_of(timer) == BucketId(make.t0 + timedelta(minutes=1), shard_of(job.job_id, 4))
    assert timers.shard_count == 4


def test_put_timer_is_idempotent_and_round_trips(timers, make) -> None:
    job = make.job(schedule={"type": "cron", "expression": "*/5 * * * *", "timezone": "Europe/Berlin"})
    timer = make.timer(job)
    timers.put_timer(timer)
    timers.put_timer(timer)
    assert bucket_timers(timers, timers.bucket_of(timer)) == [timer]


def test_has_timer_answers_for_that_very_slot(timers, make) -> None:
    # The proof a change of version relies on (Dispatcher.ensure_sent): a chain's next timer is stored
    job = make.job()
    timer = make.timer(job)
    assert not timers.has_timer(timer)
    timers.put_timer(timer)
    assert timers.has_timer(timer)
    # and only that slot: another version, or a resumed chain's first timer, is another timer
    assert not timers.has_timer(replace(timer, version=timer.version + 1))
    queued = replace(timer, queued_until=timer.scheduled_for + timedelta(minutes=3))
    timers.put_timer(queued)
    [stored] = [t for t in bucket_timers(timers, timers.bucket_of(timer)) if t.queued_until is not None]
    assert stored == queued


def test_a_deferred_timer_lives_in_the_bucket_of_its_retry_instant_and_round_trips(timers, make) -> None:
    # A timer its tenant's dispatch budget held back: outside the chain, due again later, in that later bucket
    job = make.job()
    scheduled = make.timer(job)
    retry_at = scheduled.fire_at + timedelta(minutes=17, seconds=3)
    deferred = replace(scheduled, plan=None, priority="high", defer_until=retry_at)

    timers.put_timer(deferred)

    assert timers.bucket_of(deferred).minute == minute_of(retry_at)
    assert bucket_timers(timers, timers.bucket_of(deferred)) == [deferred]
    assert bucket_timers(timers, timers.bucket_of(scheduled)) == []
    timers.put_late(deferred)
    assert timers.late_timers(10) == [deferred]


def test_timers_of_other_buckets_are_not_listed(timers, make) -> None:
    job = make.job()
    timer = make.timer(job)
    timers.put_timer(timer)
    bucket = timers.bucket_of(timer)
    assert bucket_timers(timers, BucketId(bucket.minute + timedelta(minutes=1), bucket.shard)) == []
    assert bucket_timers(timers, BucketId(bucket.minute, (bucket.shard + 1) % 4)) == []


def test_timers_page_in_fire_at_order_and_resume_after_a_cursor(timers, make) -> None:
    # Given 230 timers in one bucket (several jobs of one shard, put in random order)
    jobs = [job_in_shard(make, timers, 0) for _ in range(3)]
    minute = make.t0 + timedelta(minutes=3)
    wanted: list[Timer] = []
    for i in range(230):
        job = jobs[i % 3]
        wanted.append(make.timer(job, minute + timedelta(milliseconds=250 * (i // 3) + 7 * (i % 3))))
    shuffled = wanted[:]
    random.Random(7).shuffle(shuffled)
    for timer in shuffled:
        timers.put_timer(timer)
    bucket = BucketId(minute, 0)
    assert {timers.bucket_of(t) for t in wanted} == {bucket}

    # When it is read page by page
    pages = list(timers.timers(bucket, None))

    # Then every timer comes once, in fire_at order, in pages of at most PAGE_SIZE
    assert len(pages) >= 3
    assert all(0 < len(page) <= 100 for page, _ in pages)
    read = [t for page, _ in pages for t in page]
    assert read == sorted(wanted, key=lambda t: (t.fire_at, t.job_id))
    assert [t.fire_at for t in read] == sorted(t.fire_at for t in wanted)

    # And a read resumed after the first page's cursor yields exactly the rest
    first_page, cursor = pages[0]
    assert bucket_timers(timers, bucket, cursor) == read[len(first_page) :]
    assert bucket_timers(timers, bucket, pages[-1][1]) == []


# -- claims -------------------------------------------------------------------------------------------------


def test_claim_bumps_the_epoch_and_seals(timers, make) -> None:
    bucket = BucketId(make.t0, 1)
    assert not timers.is_sealed(bucket)

    got = claim(timers, bucket, "sweeper-a", make.t0)

    assert got == BucketClaim(bucket, "sweeper-a", 1, None)
    assert timers.is_sealed(bucket)


def test_second_claimer_is_refused_while_the_lease_is_live(timers, make) -> None:
    bucket = BucketId(make.t0, 1)
    claim(timers, bucket, "sweeper-a", make.t0)
    assert claim(timers, bucket, "sweeper-b", make.t0 + timedelta(seconds=119)) == BucketBusy(done=False)
    # the holder itself cannot claim again either: a claim is not re-entrant
    assert claim(timers, bucket, "sweeper-a", make.t0 + timedelta(seconds=1)) == BucketBusy(done=False)


def test_claim_at_the_exact_end_of_the_lease_is_refused(timers, make) -> None:
    # everywhere else in the contract (ledger take-over, expire_to) a lease is expired only when lease < now
    bucket = BucketId(make.t0, 1)
    claim(timers, bucket, "sweeper-a", make.t0)
    assert claim(timers, bucket, "sweeper-b", make.t0 + LEASE) == BucketBusy(done=False)


def test_after_lease_expiry_another_sweeper_claims_with_a_higher_epoch(timers, make) -> None:
    bucket = BucketId(make.t0, 2)
    first = claim(timers, bucket, "sweeper-a", make.t0)
    timers.checkpoint(first, "cursor-1", make.t0 + timedelta(seconds=30))

    second = claim(timers, bucket, "sweeper-b", make.t0 + timedelta(seconds=31))

    assert isinstance(second, BucketClaim)
    assert second.epoch == first.epoch + 1
    assert second.owner == "sweeper-b"
    assert second.cursor == "cursor-1"  # resumes where the first holder stopped
    # the first holder is fenced out of every write
    with pytest.raises(ClaimLost):
        timers.checkpoint(first, "cursor-2", make.t0 + timedelta(minutes=5))
    with pytest.raises(ClaimLost):
        timers.release(first)
    with pytest.raises(ClaimLost):
        timers.complete_bucket(first, make.t0 + timedelta(days=2))
    # and its attempts changed nothing: the second holder still holds it, at its cursor
    timers.checkpoint(second, "cursor-3", make.t0 + timedelta(minutes=5))


def test_checkpoint_extends_the_lease_and_records_the_cursor(timers, make) -> None:
    bucket = BucketId(make.t0, 0)
    held = claim(timers, bucket, "sweeper-a", make.t0)
    timers.checkpoint(held, "c-1", make.t0 + timedelta(minutes=10))
    # past the first lease, but inside the extended one
    assert claim(timers, bucket, "sweeper-b", make.t0 + timedelta(minutes=5)) == BucketBusy(done=False)
    later = claim(timers, bucket, "sweeper-b", make.t0 + timedelta(minutes=11))
    assert later == BucketClaim(bucket, "sweeper-b", 2, "c-1")


def test_release_lets_the_next_sweeper_resume_at_once(timers, make) -> None:
    bucket = BucketId(make.t0, 0)
    held = claim(timers, bucket, "sweeper-a", make.t0)
    timers.checkpoint(held, "c-7", make.t0 + LEASE)

    timers.release(held)

    resumed = claim(timers, bucket, "sweeper-b", make.t0 + timedelta(seconds=1))
    assert resumed == BucketClaim(bucket, "sweeper-b", 2, "c-7")
    assert timers.is_sealed(bucket)


def test_claim_lost_for_a_foreign_owner_at_the_same_epoch(timers, make) -> None:
    bucket = BucketId(make.t0, 3)
    held = claim(timers, bucket, "sweeper-a", make.t0)
    impostor = BucketClaim(bucket, "sweeper-b", held.epoch, None)
    with pytest.raises(ClaimLost):
        timers.checkpoint(impostor, "x", make.t0 + LEASE)
    with pytest.raises(ClaimLost):
        timers.release(impostor)
    with pytest.raises(ClaimLost):
        timers.complete_bucket(impostor, make.t0 + timedelta(days=2))
    # the real holder is unaffected
    timers.complete_bucket(held, make.t0 + timedelta(days=2))


def test_claim_lost_for_an_unclaimed_bucket(timers, make) -> None:
    never = BucketClaim(BucketId(make.t0, 3), "sweeper-a", 1, None)
    with pytest.raises(ClaimLost):
        timers.checkpoint(never, "x", make.t0 + LEASE)


def test_a_done_bucket_is_never_claimed_again(timers, make) -> None:
    bucket = BucketId(make.t0, 1)
    held = claim(timers, bucket, "sweeper-a", make.t0)

    timers.complete_bucket(held, make.t0 + timedelta(days=2))

    assert claim(timers, bucket, "sweeper-b", make.t0 + timedelta(seconds=1)) == BucketBusy(done=True)
    assert claim(timers, bucket, "sweeper-b", make.t0 + timedelta(hours=1)) == BucketBusy(done=True)
    assert timers.is_sealed(bucket)
    # and its former holder can no longer write to it
    with pytest.raises(ClaimLost):
        timers.checkpoint(held, "x", make.t0 + LEASE)
    with pytest.raises(ClaimLost):
        timers.complete_bucket(held, make.t0 + timedelta(days=2))


def test_the_last_pages_checkpoint_marks_the_bucket_done_in_the_same_write(timers, make) -> None:
    bucket = BucketId(make.t0, 2)
    held = claim(timers, bucket, "sweeper-a", make.t0)
    timers.checkpoint(held, "c-1", make.t0 + LEASE)

    timers.finish_bucket(held, "c-2", make.t0 + timedelta(days=2))

    assert claim(timers, bucket, "sweeper-b", make.t0 + timedelta(hours=1)) == BucketBusy(done=True)
    assert timers.is_sealed(bucket)
    with pytest.raises(ClaimLost):
        timers.checkpoint(held, "c-3", make.t0 + LEASE)
    with pytest.raises(ClaimLost):
        timers.finish_bucket(held, "c-3", make.t0 + timedelta(days=2))


def test_the_last_pages_checkpoint_releases_its_quota_slots_once(timers, jobs, make) -> None:
    # Given a tenant at its quota of one, whose job the bucket's last page completed
    tenant = "tenant-finish"
    jobs.create(make.job(tenant), None, None, late=False, quota=1)
    held = claim(timers, BucketId(make.t0, 1), "sweeper-a", make.t0)

    # When the page's checkpoint releases it, and is tried again (a re-run after its answer was lost)
    timers.finish_bucket(held, "c-1", make.t0 + timedelta(days=2), {tenant: 1})
    with pytest.raises(ClaimLost):
        timers.finish_bucket(held, "c-1", make.t0 + timedelta(days=2), {tenant: 1})

    # Then one slot is free, not two
    jobs.create(make.job(tenant), None, None, late=False, quota=1)
    with pytest.raises(QuotaExceeded):
        jobs.create(make.job(tenant), None, None, late=False, quota=1)


def test_a_last_page_checkpoint_without_the_claim_changes_nothing(timers, jobs, make) -> None:
    tenant = "tenant-impostor"
    jobs.create(make.job(tenant), None, None, late=False, quota=1)
    bucket = BucketId(make.t0, 3)
    held = claim(timers, bucket, "sweeper-a", make.t0)
    impostor = BucketClaim(bucket, "sweeper-b", held.epoch, None)

    with pytest.raises(ClaimLost):
        timers.finish_bucket(impostor, "x", make.t0 + timedelta(days=2), {tenant: 1})

    # the bucket is not done, its holder still holds it, and the tenant's slot was not released
    timers.checkpoint(held, "c-1", make.t0 + LEASE)
    with pytest.raises(QuotaExceeded):
        jobs.create(make.job(tenant), None, None, late=False, quota=1)


# -- seal and watermark -------------------------------------------------------------------------------------


def test_is_sealed_behind_the_watermark_without_a_bucket_item(timers, make) -> None:
    behind = BucketId(make.t0 - timedelta(minutes=1), 0)
    at = BucketId(make.t0, 0)
    ahead = BucketId(make.t0 + timedelta(minutes=1), 0)
    assert not timers.is_sealed(behind)

    timers.init_watermark(make.t0)

    assert timers.is_sealed(behind)
    assert not timers.is_sealed(at)
    assert not timers.is_sealed(ahead)
    claim(timers, ahead, "sweeper-a", make.t0)
    assert timers.is_sealed(ahead)


def test_watermark_init_is_create_if_absent(timers, make) -> None:
    assert timers.watermark() is None
    assert timers.init_watermark(make.t0) == make.t0
    assert timers.init_watermark(make.t0 + timedelta(minutes=5)) == make.t0
    assert timers.init_watermark(make.t0 - timedelta(minutes=5)) == make.t0
    assert timers.watermark() == make.t0


def test_watermark_never_moves_backwards(timers, make) -> None:
    timers.init_watermark(make.t0)
    timers.advance_watermark(make.t0 + timedelta(minutes=5))
    assert timers.watermark() == make.t0 + timedelta(minutes=5)
    timers.advance_watermark(make.t0 + timedelta(minutes=2))
    assert timers.watermark() == make.t0 + timedelta(minutes=5)
    timers.advance_watermark(make.t0 + timedelta(minutes=5))
    assert timers.watermark() == make.t0 + timedelta(minutes=5)
    timers.advance_watermark(make.t0 + timedelta(minutes=6))
    assert timers.watermark() == make.t0 + timedelta(minutes=6)
    assert timers.init_watermark(make.t0) == make.t0 + timedelta(minutes=6)


def test_advance_watermark_without_one_creates_it(timers, make) -> None:
    timers.advance_watermark(make.t0)
    assert timers.watermark() == make.t0


# -- late lane ----------------------------------------------------------------------------------------------


def _late_timers_across_shards(make: Any, timers: Any) -> list[Timer]:
    """Four late timers, one per shard, with fire_at order opposite to shard order."""
    out = []
    for shard in range(4):
        job = job_in_shard(make, timers, shard)
        out.append(make.timer(job, make.t0 + timedelta(seconds=10 * (4 - shard))))
    return out


def test_late_lane_lists_all_shards_oldest_first(timers, make) -> None:
    late = _late_timers_across_shards(make, timers)
    for timer in late:
        timers.put_late(timer)
        timers.put_late(timer)  # idempotent

    assert timers.late_timers(10) == sorted(late, key=lambda t: t.fire_at)


def test_late_lane_limit_returns_the_oldest(timers, make) -> None:
    late = _late_timers_across_shards(make, timers)
    for timer in late:
        timers.put_late(timer)
    oldest = sorted(late, key=lambda t: t.fire_at)

    assert timers.late_timers(2) == oldest[:2]


def test_remove_late_removes_only_that_timer(timers, make) -> None:
    late = _late_timers_across_shards(make, timers)
    for timer in late:
        timers.put_late(timer)

    timers.remove_late(late[1])
    timers.remove_late(late[1])  # removing an absent timer is a no-op

    assert timers.late_timers(10) == sorted([late[0], late[2], late[3]], key=lambda t: t.fire_at)
    # the late lane is separate from the buckets
    assert bucket_timers(timers, timers.bucket_of(late[0])) == []


def test_timer_minute_uses_fire_at_not_scheduled_for(timers, make) -> None:
    base = make.timer(make.job(), make.t0 + timedelta(seconds=59))
    jittered = Timer(base.job_id, base.tenant, base.scheduled_for, base.scheduled_for + timedelta(seconds=2), 1)
    timers.put_timer(jittered)
    assert timers.bucket_of(jittered).minute == minute_of(jittered.fire_at) == make.t0 + timedelta(minutes=1)
    assert bucket_timers(timers, timers.bucket_of(jittered)) == [jittered]


def test_upcoming_reads_every_shard_of_the_minute_swept_or_not(timers, make) -> None:
    # Given timers in two shards of one minute (one of them swept and done), and one in the next minute
    minute = make.t0 + timedelta(minutes=3)
    stored = []
    for i, shard in enumerate((0, 2)):
        job = make.job(next_run_at=minute + timedelta(seconds=5 * i))
        while shard_of(job.job_id, timers.shard_count) != shard:
            job = make.job(next_run_at=minute + timedelta(seconds=5 * i))
        stored.append(make.timer(job))
    for timer in stored:
        timers.put_timer(timer)
    later = make.timer(make.job(next_run_at=minute + timedelta(minutes=1)))
    timers.put_timer(later)
    held = claim(timers, timers.bucket_of(stored[0]), "sweeper-a", make.t0)
    timers.complete_bucket(held, make.t0 + timedelta(days=1))
    # When the forecast reads the minute
    found = timers.upcoming(minute)
    # Then it has both timers of the minute (round-tripped), none of the next
    assert sorted(found, key=lambda t: t.job_id) == sorted(stored, key=lambda t: t.job_id)
    assert timers.upcoming(minute + timedelta(minutes=1)) == [later]
    assert timers.upcoming(minute + timedelta(minutes=2)) == []
