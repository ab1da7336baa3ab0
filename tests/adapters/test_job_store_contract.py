"""JobStore contract: the same tests run against MemoryJobStore and DynamoJobStore (DynamoDB Local)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.sealing import LocalSealer
from scheduler.core.errors import IdempotencyConflict, IdempotentReplay, QuotaExceeded, VersionConflict
from scheduler.core.jobs.secrecy import headers_to_send, sealed
from scheduler.core.model.job import HttpTarget, Job, JobState
from scheduler.core.ports import Advance, AdvanceResult, IdempotencyRecord, NewJob

QUOTA = 100
SECRET_TARGET = HttpTarget(type="http", url="https://example.com/hook", headers={"Authorization": "Bearer s3cret"})


def idem(job: Job, key: str = "key-1", request_hash: str = "hash-1", ttl: timedelta = timedelta(hours=24)) -> Any:
    return IdempotencyRecord(job.tenant, key, request_hash, job.job_id, job.created_at + ttl)


def timers_in_bucket(timers: Any, timer: Any) -> list[Any]:
    return [t for page, _ in timers.timers(timers.bucket_of(timer), None) for t in page]


def all_pages(jobs: Any, tenant: str, state: JobState | None, limit: int) -> tuple[list[list[str]], list[Any]]:
    pages: list[list[str]] = []
    cursors: list[Any] = []
    cursor = None
    for _ in range(50):
        page, cursor = jobs.list(tenant, state, limit, cursor)
        pages.append([j.job_id for j in page])
        cursors.append(cursor)
        if cursor is None:
            return pages, cursors
    raise AssertionError("list never ended")


def with_changes(job: Job, **changes: Any) -> Job:
    return job.model_copy(update={"version": job.version + 1, **changes})


# -- create -------------------------------------------------------------------------------------------------


def test_create_writes_job_timer_and_late_copy(jobs, timers, make) -> None:
    # Given a job with a float payload and its first timer
    job = make.job()
    timer = make.timer(job)

    # When it is created with a late-lane copy
    jobs.create(job, timer, None, late=True, quota=QUOTA)

    # Then the job, the timer and the late copy are all stored, unchanged by the round trip
    assert jobs.get(job.job_id) == job
    assert jobs.get(job.job_id).spec.payload == {"ratio": 0.1, "n": [1.5, 2]}
    assert timers_in_bucket(timers, timer) == [timer]
    assert timers.late_timers(10) == [timer]


def test_create_without_late_copy_leaves_the_late_lane_empty(jobs, timers, make) -> None:
    job = make.job()
    timer = make.timer(job)
    jobs.create(job, timer, None, late=False, quota=QUOTA)
    assert timers_in_bucket(timers, timer) == [timer]
    assert timers.late_timers(10) == []


def test_create_without_timer_stores_only_the_job(jobs, timers, make) -> None:
    job = make.job()
    jobs.create(job, None, None, late=True, quota=QUOTA)
    assert jobs.get(job.job_id) == job
    assert timers.late_timers(10) == []
    assert timers_in_bucket(timers, make.timer(job)) == []


def test_get_unknown_job_is_none(jobs) -> None:
    assert jobs.get("no-such-job") is None


def test_quota_refusal_writes_nothing_at_all(jobs, timers, make) -> None:
    # Given a tenant at its quota of one job
    first = make.job()
    jobs.create(first, make.timer(first), None, late=False, quota=1)
    # and a second job whose timer lives in another bucket
    second = make.job(created_at=make.t0 + timedelta(minutes=5))
    second_timer = make.timer(second)
    assert timers.bucket_of(second_timer) != timers.bucket_of(make.timer(first))

    # When it is created (with a late copy and an idempotency key)
    with pytest.raises(QuotaExceeded):
        jobs.create(second, second_timer, idem(second, request_hash="h-second"), late=True, quota=1)

    # Then nothing of it was written: no job, no timer, no late copy, no idempotency record
    assert jobs.get(second.job_id) is None
    assert timers_in_bucket(timers, second_timer) == []
    assert timers.late_timers(10) == []
    # (the key is free: once a slot is free, a different body under the same key is accepted, not a conflict)
    jobs.replace(with_changes(first, state=JobState.CANCELLED), first, None, late=False)
    third = make.job(created_at=make.t0 + timedelta(minutes=6))
    jobs.create(third, make.timer(third), idem(third, request_hash="h-third"), late=False, quota=1)
    assert jobs.get(third.job_id) == third


def test_quota_counts_active_and_paused_jobs_and_cancelling_frees_a_slot(jobs, make) -> None:
    # Given a tenant with two jobs and a quota of two, one of them paused
    a, b = make.job(), make.job()
    jobs.create(a, make.timer(a), None, late=False, quota=2)
    jobs.create(b, make.timer(b), None, late=False, quota=2)
    paused = with_changes(b, state=JobState.PAUSED)
    jobs.replace(paused, b, None, late=False)

    # Then a third is refused (paused jobs still count)
    c = make.job()
    with pytest.raises(QuotaExceeded):
        jobs.create(c, make.timer(c), None, late=False, quota=2)

    # When one is cancelled, its slot is free
    jobs.replace(with_changes(a, state=JobState.CANCELLED), a, None, late=False)
    jobs.create(c, make.timer(c), None, late=False, quota=2)

    # And a quota is per tenant
    other = make.job("tenant-b")
    jobs.create(other, make.timer(other), None, late=False, quota=1)


def test_a_job_that_becomes_active_again_counts_again(jobs, make) -> None:
    a = make.job()
    jobs.create(a, make.timer(a), None, late=False, quota=1)
    completed = with_changes(a, state=JobState.COMPLETED, next_run_at=None)
    jobs.replace(completed, a, None, late=False)
    b = make.job()
    jobs.create(b, None, None, late=False, quota=2)  # one slot used (b)

    reactivated = with_changes(completed, state=JobState.ACTIVE, next_run_at=make.t0 + timedelta(hours=1))
    jobs.replace(reactivated, completed, None, late=False)  # two used

    c = make.job()
    with pytest.raises(QuotaExceeded):
        jobs.create(c, None, None, late=False, quota=2)


# -- create_all (a batch) -----------------------------------------------------------------------------------


def new_jobs(make: Any, count: int, *, keys: bool = False, late: bool = False, minutes: int = 0) -> list[NewJob]:
    made = [make.job(created_at=make.t0 + timedelta(minutes=minutes, seconds=i)) for i in range(count)]
    return [NewJob(job, make.timer(job), idem(job, key=f"k-{job.job_id}") if keys else None, late) for job in made]


def test_create_all_stores_every_job_with_its_timer_key_and_late_copy(jobs, timers, make) -> None:
    # Given 25 jobs with keys and late copies: 101 writes, more than one transaction holds
    batch = new_jobs(make, 25, keys=True, late=True)

    # When they are created together
    assert jobs.create_all(batch, quota=QUOTA) == 25

    # Then each job, its timer and its late copy are stored, and each key names its job
    for item in batch:
        assert jobs.get(item.job.job_id) == item.job
        assert item.timer in timers_in_bucket(timers, item.timer)
        with pytest.raises(IdempotentReplay) as replay:
            jobs.create(make.job(), None, item.idempotency, late=False, quota=QUOTA)
        assert replay.value.record.job_id == item.job.job_id
    assert sorted(t.key for t in timers.late_timers(100)) == sorted(item.timer.key for item in batch)
    # And the tenant's count rose by 25: the quota of 26 has room for one more job, not two
    one, two = make.job(), make.job()
    jobs.create(one, None, None, late=False, quota=26)
    with pytest.raises(QuotaExceeded):
        jobs.create(two, None, None, late=False, quota=26)


def test_create_all_past_the_quota_stores_nothing(jobs, timers, make) -> None:
    # Given a tenant with one job and a quota of three
    first = make.job()
    jobs.create(first, None, None, late=False, quota=3)

    # When three more are created together
    batch = new_jobs(make, 3, keys=True, late=True, minutes=5)
    assert jobs.create_all(batch, quota=3) == 0

    # Then none of them is stored (the caller creates them one at a time: two fit)
    assert all(jobs.get(item.job.job_id) is None for item in batch)
    assert timers.late_timers(10) == []
    assert all(timers_in_bucket(timers, item.timer) == [] for item in batch)
    jobs.create(batch[0].job, batch[0].timer, batch[0].idempotency, late=False, quota=3)
    jobs.create(batch[1].job, batch[1].timer, batch[1].idempotency, late=False, quota=3)
    with pytest.raises(QuotaExceeded):
        jobs.create(batch[2].job, batch[2].timer, batch[2].idempotency, late=False, quota=3)


def test_create_all_with_a_key_already_taken_stores_none_of_that_transaction(jobs, timers, make) -> None:
    # Given a key already used by an earlier job
    batch = new_jobs(make, 3, keys=True)
    earlier = make.job()
    jobs.create(earlier, None, idem(earlier, key=batch[1].idempotency.key), late=False, quota=QUOTA)

    # When a batch that holds it is created together
    assert jobs.create_all(batch, quota=QUOTA) == 0

    # Then nothing of it is stored, and the key still names the earlier job
    assert all(jobs.get(item.job.job_id) is None for item in batch)
    with pytest.raises(IdempotentReplay) as replay:
        jobs.create(batch[1].job, None, batch[1].idempotency, late=False, quota=QUOTA)
    assert replay.value.record.job_id == earlier.job_id


# -- idempotency --------------------------------------------------------------------------------------------


def test_same_key_and_hash_is_a_replay_naming_the_first_job(jobs, timers, make) -> None:
    first = make.job()
    jobs.create(first, make.timer(first), idem(first), late=False, quota=QUOTA)

    retry = make.job(created_at=make.t0 + timedelta(minutes=3))
    retry_timer = make.timer(retry)
    with pytest.raises(IdempotentReplay) as replay:
        jobs.create(retry, retry_timer, idem(retry), late=True, quota=QUOTA)

    assert replay.value.record.job_id == first.job_id
    assert replay.value.record.request_hash == "hash-1"
    assert replay.value.record.expires_at == first.created_at + timedelta(hours=24)
    assert jobs.get(retry.job_id) is None
    assert timers_in_bucket(timers, retry_timer) == []
    assert timers.late_timers(10) == []


def test_same_key_with_another_hash_is_a_conflict_and_writes_nothing(jobs, timers, make) -> None:
    first = make.job()
    jobs.create(first, make.timer(first), idem(first), late=False, quota=QUOTA)

    other = make.job(created_at=make.t0 + timedelta(minutes=3))
    other_timer = make.timer(other)
    with pytest.raises(IdempotencyConflict):
        jobs.create(other, other_timer, idem(other, request_hash="hash-2"), late=True, quota=QUOTA)

    assert jobs.get(other.job_id) is None
    assert timers_in_bucket(timers, other_timer) == []
    assert timers.late_timers(10) == []


def test_an_expired_idempotency_record_is_reusable(jobs, make) -> None:
    # Given a record that expired an hour after it was written (TTL deletes lazily: it may still be stored)
    first = make.job()
    jobs.create(first, None, idem(first, ttl=timedelta(hours=1)), late=False, quota=QUOTA)

    # When the key is used two hours later, with another body
    later = make.job(created_at=make.t0 + timedelta(hours=2))
    jobs.create(later, None, idem(later, request_hash="hash-2"), late=False, quota=QUOTA)

    # Then it created a job, and the key now names that job
    assert jobs.get(later.job_id) == later
    again = make.job(created_at=make.t0 + timedelta(hours=2, minutes=1))
    with pytest.raises(IdempotentReplay) as replay:
        jobs.create(again, None, idem(again, request_hash="hash-2"), late=False, quota=QUOTA)
    assert replay.value.record.job_id == later.job_id


def test_idempotency_keys_are_per_tenant(jobs, make) -> None:
    mine = make.job("tenant-a")
    theirs = make.job("tenant-b")
    jobs.create(mine, None, idem(mine), late=False, quota=QUOTA)
    jobs.create(theirs, None, idem(theirs, request_hash="other"), late=False, quota=QUOTA)
    assert jobs.get(theirs.job_id) == theirs


# -- list ---------------------------------------------------------------------------------------------------


def _tenant_jobs(jobs: Any, make: Any, count: int, states: list[JobState] | None = None) -> list[Job]:
    """`count` jobs of tenant-a created a second apart (interleaved with tenant-b's), oldest first."""
    created: list[Job] = []
    for i in range(count):
        state = states[i] if states else JobState.ACTIVE
        # created out of order, so "oldest first" is not insertion order
        at = make.t0 + timedelta(seconds=count - i)
        job = make.job("tenant-a", created_at=at, state=state)
        jobs.create(job, None, None, late=False, quota=QUOTA)
        noise = make.job("tenant-b", created_at=at + timedelta(milliseconds=500))
        jobs.create(noise, None, None, late=False, quota=QUOTA)
        created.append(job)
    return sorted(created, key=lambda j: j.created_at)


def test_list_is_tenant_scoped_oldest_first_and_paginates(jobs, make) -> None:
    mine = _tenant_jobs(jobs, make, 5)

    pages, cursors = all_pages(jobs, "tenant-a", None, 2)

    assert pages == [[j.job_id for j in mine[0:2]], [j.job_id for j in mine[2:4]], [mine[4].job_id]]
    assert cursors[-1] is None
    page, _ = jobs.list("tenant-a", None, 10, None)
    assert page == mine  # whole jobs, not just ids
    theirs, _ = jobs.list("tenant-b", None, 10, None)
    assert {j.tenant for j in theirs} == {"tenant-b"} and len(theirs) == 5
    assert jobs.list("tenant-c", None, 10, None) == ([], None)


def test_list_cursor_is_stable(jobs, make) -> None:
    mine = _tenant_jobs(jobs, make, 4)
    first, cursor = jobs.list("tenant-a", None, 2, None)
    assert cursor is not None

    # The same cursor gives the same page, also after a newer job was added (which comes last)
    again, _ = jobs.list("tenant-a", None, 2, cursor)
    newer = make.job("tenant-a", created_at=make.t0 + timedelta(minutes=10))
    jobs.create(newer, None, None, late=False, quota=QUOTA)
    after_insert, cursor2 = jobs.list("tenant-a", None, 2, cursor)

    assert [j.job_id for j in first] == [j.job_id for j in mine[:2]]
    assert [j.job_id for j in again] == [j.job_id for j in after_insert] == [j.job_id for j in mine[2:4]]
    rest, end = jobs.list("tenant-a", None, 2, cursor2)
    assert [j.job_id for j in rest] == [newer.job_id]
    assert end is None


def test_list_filters_by_state_across_pages(jobs, make) -> None:
    a, p, c = JobState.ACTIVE, JobState.PAUSED, JobState.CANCELLED
    mine = _tenant_jobs(jobs, make, 7, [a, p, a, c, a, p, a])
    active = [j.job_id for j in mine if j.state == a]

    pages, _ = all_pages(jobs, "tenant-a", JobState.ACTIVE, 2)

    assert [i for page in pages for i in page] == active
    assert all(len(page) <= 2 for page in pages)
    paused, _ = jobs.list("tenant-a", JobState.PAUSED, 10, None)
    assert [j.job_id for j in paused] == [j.job_id for j in mine if j.state == p]
    assert jobs.list("tenant-a", JobState.COMPLETED, 10, None) == ([], None)


def test_list_state_filter_spans_storage_pages(jobs, make) -> None:
    # more jobs than one filtered DynamoDB query page (25) holds, few of them matching
    states = [JobState.PAUSED if i % 7 == 3 else JobState.ACTIVE for i in range(40)]
    mine = _tenant_jobs(jobs, make, 40, states)
    paused = [j.job_id for j in mine if j.state == JobState.PAUSED]

    pages, _ = all_pages(jobs, "tenant-a", JobState.PAUSED, 2)

    assert [i for page in pages for i in page] == paused
    assert len(paused) == 6


def test_list_has_no_cursor_when_the_page_ends_at_the_last_job(jobs, make) -> None:
    mine = _tenant_jobs(jobs, make, 4)
    page, cursor = jobs.list("tenant-a", None, 4, None)
    assert [j.job_id for j in page] == [j.job_id for j in mine]
    assert cursor is None


def _batch_between_singles(jobs: Any, make: Any, batch_size: int, states: list[JobState] | None = None) -> list[Job]:
    """Two single jobs of tenant-a, a batch of `batch_size` created together between them (created a second
    apart, in order) and tenant-b's batch beside it: tenant-a's jobs, oldest first."""
    before = make.job("tenant-a", created_at=make.t0)
    after = make.job("tenant-a", created_at=make.t0 + timedelta(minutes=5))
    for single in (before, after):
        jobs.create(single, None, None, late=False, quota=QUOTA)
    mine = [
        make.job("tenant-a", created_at=make.t0 + timedelta(minutes=1, seconds=i), state=state)
        for i, state in enumerate(states or [JobState.ACTIVE] * batch_size)
    ]
    theirs = [make.job("tenant-b", created_at=make.t0 + timedelta(minutes=1, seconds=i)) for i in range(3)]
    for batch in (mine, theirs):
        assert jobs.create_all([NewJob(j, make.timer(j), None, False) for j in batch], quota=QUOTA) == len(batch)
    return [before, *mine, after]


@pytest.mark.parametrize("limit", [1, 2, 3, 10])
def test_a_batchs_jobs_are_listed_together_in_order_and_pages_may_end_inside_it(jobs, make, limit) -> None:
    mine = _batch_between_singles(jobs, make, 5)

    pages, cursors = all_pages(jobs, "tenant-a", None, limit)

    # Every job once, in order, whole, and pages of `limit` (the last may be shorter)
    assert [i for page in pages for i in page] == [j.job_id for j in mine]
    assert all(len(page) == limit for page in pages[:-1]) and cursors[-1] is None
    assert jobs.list("tenant-a", None, 10, None)[0] == mine
    assert [j.tenant for j in jobs.list("tenant-b", None, 10, None)[0]] == ["tenant-b"] * 3


def test_a_cursor_inside_a_batch_is_stable_and_filters_apply_to_its_jobs(jobs, make) -> None:
    a, p = JobState.ACTIVE, JobState.PAUSED
    mine = _batch_between_singles(jobs, make, 6, [p, a, a, p, a, p])
    first, cursor = jobs.list("tenant-a", None, 3, None)  # ends at the batch's second job

    again, _ = jobs.list("tenant-a", None, 3, cursor)
    paused = [i for page in all_pages(jobs, "tenant-a", JobState.PAUSED, 1)[0] for i in page]

    assert [j.job_id for j in first] == [j.job_id for j in mine[:3]]
    assert [j.job_id for j in again] == [j.job_id for j in mine[3:6]]
    assert paused == [j.job_id for j in mine if j.state == p]


def test_a_batchs_job_changed_by_replace_is_still_listed_once_in_its_place(jobs, make) -> None:
    mine = _batch_between_singles(jobs, make, 4)
    member = mine[2]
    paused = with_changes(member, state=JobState.PAUSED, next_run_at=None, updated_at=member.updated_at)

    jobs.replace(paused, member, None, late=False)

    listed, _ = jobs.list("tenant-a", None, 10, None)
    assert [j.job_id for j in listed] == [j.job_id for j in mine]
    assert listed[2] == jobs.get(member.job_id) == paused
    assert [j.job_id for j in jobs.list("tenant-a", JobState.PAUSED, 10, None)[0]] == [member.job_id]


# -- replace ------------------------------------------------------------------------------------------------


def test_replace_stores_the_new_version_with_its_timer_and_late_copy(jobs, timers, make) -> None:
    job = make.job()
    jobs.create(job, make.timer(job), None, late=False, quota=QUOTA)
    changed = with_changes(job, spec=make.spec({"type": "rate", "every_seconds": 120}))
    timer = make.timer(changed, make.t0 + timedelta(minutes=2))

    jobs.replace(changed, job, timer, late=True)

    assert jobs.get(job.job_id) == changed
    assert timer in timers_in_bucket(timers, timer)
    assert timers.late_timers(10) == [timer]


def test_sealed_header_values_are_stored_with_the_job_and_removed_with_them(jobs, make) -> None:
    # Given a job whose secret header values are sealed (its spec holds their placeholders)
    sealer = LocalSealer("contract")
    clear = make.job().model_copy(update={"spec": make.spec().model_copy(update={"target": SECRET_TARGET})})
    job = sealed(clear, sealer, {})
    jobs.create(job, None, None, late=False, quota=QUOTA)

    # Then it reads back sealed, and opens to the values given
    stored = jobs.get(job.job_id)
    assert stored == job and stored.sealed_headers is not None
    assert headers_to_send(stored, sealer) == SECRET_TARGET.headers

    # When a new version has no sealed values (its headers are gone), none are left behind
    plain = with_changes(job, spec=make.spec(), sealed_headers=None)
    jobs.replace(plain, job, None, late=False)
    assert jobs.get(job.job_id) == plain


def test_replace_on_a_stale_version_is_a_conflict_and_writes_nothing(jobs, timers, make) -> None:
    # Given a job already changed to version 2
    job = make.job()
    jobs.create(job, None, None, late=False, quota=1)
    v2 = with_changes(job, state=JobState.PAUSED)
    jobs.replace(v2, job, None, late=False)

    # When a writer that read version 1 cancels it (with a timer)
    stale = with_changes(job, state=JobState.CANCELLED)
    stale_timer = make.timer(stale, make.t0 + timedelta(minutes=7))
    with pytest.raises(VersionConflict) as conflict:
        jobs.replace(stale, job, stale_timer, late=True)

    # Then it is told the current job, and nothing was written: the job, its timers, and its share of the quota
    assert conflict.value.current == v2
    assert jobs.get(job.job_id) == v2
    assert timers_in_bucket(timers, stale_timer) == []
    assert timers.late_timers(10) == []
    other = make.job()
    with pytest.raises(QuotaExceeded):
        jobs.create(other, None, None, late=False, quota=1)


def test_replace_of_an_unknown_job_is_a_conflict_without_current(jobs, make) -> None:
    ghost = make.job()
    with pytest.raises(VersionConflict) as conflict:
        jobs.replace(with_changes(ghost), ghost, None, late=False)
    assert conflict.value.current is None
    assert jobs.get(ghost.job_id) is None


# -- advance (scheduler.core.jobs.chain) -------------------------------------------------------------------------


def _recurring(jobs: Any, make: Any) -> tuple[Job, Any, Any]:
    """An ACTIVE every-minute job with its timers for T0+1m and T0+2m."""
    job = make.job(next_run_at=make.t0 + timedelta(minutes=1))
    jobs.create(job, make.timer(job), None, late=False, quota=QUOTA)
    return job, make.timer(job, make.t0 + timedelta(minutes=1)), make.timer(job, make.t0 + timedelta(minutes=2))


def test_first_advance_moves_the_chain(jobs, make) -> None:
    job, first, _ = _recurring(jobs, make)

    result = jobs.advance(first, Advance(make.t0 + timedelta(minutes=2), first.scheduled_for, 0))

    assert result == AdvanceResult(True, True, JobState.ACTIVE)
    stored = jobs.get(job.job_id)
    assert stored.last_dispatched_for == first.scheduled_for
    assert stored.next_run_at == make.t0 + timedelta(minutes=2)
    assert stored.state == JobState.ACTIVE and stored.version == job.version
    assert stored.misfire_skipped == 0


def test_advance_counts_skipped_misfires(jobs, make) -> None:
    job, first, _ = _recurring(jobs, make)
    dispatched_for = first.scheduled_for + timedelta(minutes=3)
    assert jobs.advance(first, Advance(dispatched_for + timedelta(minutes=1), dispatched_for, 3)).proceed
    assert jobs.get(job.job_id).misfire_skipped == 3
    assert jobs.get(job.job_id).last_dispatched_for == dispatched_for


def test_advance_re_run_after_a_crash_proceeds_and_puts_next_again(jobs, make) -> None:
    job, first, _ = _recurring(jobs, make)
    nxt = make.t0 + timedelta(minutes=2)
    jobs.advance(first, Advance(nxt, first.scheduled_for, 0))

    # the sweeper crashed before writing the next timer; the bucket is re-swept
    again = jobs.advance(first, Advance(nxt, first.scheduled_for, 0))

    assert again == AdvanceResult(True, True, JobState.ACTIVE)
    assert jobs.get(job.job_id).last_dispatched_for == first.scheduled_for


def test_advance_re_run_replays_the_recorded_plan(jobs, make) -> None:
    job, first, _ = _recurring(jobs, make)
    nxt = make.t0 + timedelta(minutes=2)
    planned_at, horizon = make.t0 - timedelta(seconds=3), make.t0 + timedelta(minutes=6)
    jobs.advance(first, Advance(nxt, first.scheduled_for, 0, planned_at=planned_at, planned_horizon=horizon))

    # the run that advanced died before sending; a later re-run (with a later clock) must send what it planned
    again = jobs.advance(
        first,
        Advance(
            nxt + timedelta(minutes=1),
            first.scheduled_for,
            0,
            planned_at=make.t0,
            planned_horizon=horizon + timedelta(minutes=1),
        ),
    )

    assert again == AdvanceResult(True, True, JobState.ACTIVE, (planned_at, horizon))
    assert jobs.get(job.job_id).next_run_at == nxt  # the recorded advance is not overwritten


def test_advance_re_run_after_a_version_change_does_nothing(jobs, make) -> None:
    # The run that advanced died before sending; then the job was paused (a new version). The change of version
    # made sure that plan was sent (Dispatcher.ensure_sent), so a re-run of the old timer sends and writes nothing.
    job, first, _ = _recurring(jobs, make)
    planned_at, horizon = make.t0 - timedelta(seconds=3), make.t0 + timedelta(minutes=6)
    jobs.advance(
        first,
        Advance(make.t0 + timedelta(minutes=2), first.scheduled_for, 0, planned_at=planned_at, planned_horizon=horizon),
    )
    advanced = jobs.get(job.job_id)
    assert advanced.planned_version == first.version
    paused = with_changes(advanced, state=JobState.PAUSED, version=advanced.version + 1)
    jobs.replace(paused, advanced, None, False)

    again = jobs.advance(
        first,
        Advance(make.t0 + timedelta(minutes=3), first.scheduled_for, 0, planned_at=make.t0, planned_horizon=horizon),
    )

    assert again == AdvanceResult(False, False, JobState.PAUSED)
    assert jobs.get(job.job_id) == paused  # untouched


def test_replace_after_the_chain_advanced_since_the_read_is_a_conflict(jobs, make) -> None:
    # A change of version written from a read taken before a sweep advanced the chain would undo that advance's
    # record of its plan (and its next run): it is refused, for the caller to read again
    job, first, _ = _recurring(jobs, make)
    read = jobs.get(job.job_id)
    jobs.advance(
        first,
        Advance(
            make.t0 + timedelta(minutes=2),
            first.scheduled_for,
            0,
            planned_at=make.t0,
            planned_horizon=make.t0 + timedelta(minutes=6),
        ),
    )
    advanced = jobs.get(job.job_id)

    with pytest.raises(VersionConflict) as conflict:
        jobs.replace(with_changes(read, state=JobState.PAUSED, version=read.version + 1), read, None, False)

    assert conflict.value.current == advanced
    assert jobs.get(job.job_id) == advanced
    paused = with_changes(advanced, state=JobState.PAUSED, version=advanced.version + 1)
    jobs.replace(paused, advanced, None, False)
    assert jobs.get(job.job_id) == paused


def test_advance_of_a_timer_the_chain_moved_past_does_nothing(jobs, make) -> None:
    # A chain moves past a timer only through the next timer, which is written after the timer's sends: a late
    # re-run of an older timer has nothing left to send or write.
    job, first, second = _recurring(jobs, make)
    jobs.advance(first, Advance(second.scheduled_for, first.scheduled_for, 0))
    jobs.advance(second, Advance(second.scheduled_for + timedelta(minutes=1), second.scheduled_for, 0))
    before = jobs.get(job.job_id)

    late_rerun = jobs.advance(first, Advance(second.scheduled_for, first.scheduled_for, 0))

    assert late_rerun == AdvanceResult(False, False, JobState.ACTIVE)
    assert jobs.get(job.job_id) == before


@pytest.mark.parametrize("change", ["edited", "paused", "cancelled"])
def test_advance_of_a_changed_job_dispatches_nothing(jobs, make, change) -> None:
    job, first, _ = _recurring(jobs, make)
    if change == "edited":
        changed = with_changes(job, spec=make.spec({"type": "rate", "every_seconds": 300}))
        expected_state = JobState.ACTIVE
    else:
        expected_state = JobState.PAUSED if change == "paused" else JobState.CANCELLED
        changed = with_changes(job, state=expected_state)
    jobs.replace(changed, job, None, late=False)

    result = jobs.advance(first, Advance(first.scheduled_for + timedelta(minutes=1), first.scheduled_for, 0))

    assert result == AdvanceResult(False, False, expected_state)
    assert jobs.get(job.job_id) == changed


def test_advance_of_a_paused_job_at_the_timers_version_dispatches_nothing(jobs, make) -> None:
    # the state condition alone (not the version) must stop the chain
    job = make.job(state=JobState.PAUSED)
    jobs.create(job, None, None, late=False, quota=QUOTA)
    timer = make.timer(job)
    assert jobs.advance(timer, Advance(None, timer.scheduled_for, 0)) == AdvanceResult(False, False, JobState.PAUSED)
    assert jobs.get(job.job_id) == job


def test_advance_of_an_unknown_job(jobs, make) -> None:
    ghost = make.job()
    result = jobs.advance(make.timer(ghost), Advance(None, make.t0, 0))
    assert result == AdvanceResult(False, False, None)
    assert jobs.get(ghost.job_id) is None


def test_completing_a_one_shot_frees_its_quota_slot_once(jobs, make) -> None:
    # Given a one-shot job using the tenant's only slot
    at = make.t0 + timedelta(minutes=1)
    job = make.job(schedule={"type": "once", "at": at.isoformat()}, next_run_at=at)
    timer = make.timer(job)
    jobs.create(job, timer, None, late=False, quota=1)

    # When its only occurrence is dispatched
    result = jobs.advance(timer, Advance(None, timer.scheduled_for, 0))

    # Then the job is COMPLETED and the slot is free
    assert result.proceed and result.put_next
    stored = jobs.get(job.job_id)
    assert stored.state == JobState.COMPLETED
    assert stored.next_run_at is None
    assert stored.last_dispatched_for == at
    other = make.job()
    jobs.create(other, None, None, late=False, quota=1)

    # And a crash re-run replays (dispatches again; a one-shot has no next timer) but does not free a second slot
    assert jobs.advance(timer, Advance(None, timer.scheduled_for, 0)) == AdvanceResult(True, True, JobState.COMPLETED)
    third = make.job()
    with pytest.raises(QuotaExceeded):
        jobs.create(third, None, None, late=False, quota=1)
