"""The dispatch protocol (docs/design.md §3.2, 3.3) under crashes, concurrency and clock jumps, against both
backends. After any fault, a fault-free recovery must leave every occurrence that fell due applied exactly once
at a cooperating target, and none lost (docs/design.md §6, invariants 1, 2 and 5)."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
from crashable import T0, Crash, CrashableCore, CrashAt, effects_by_job

from scheduler.core.jobs.service import Created, Submission
from scheduler.core.model.job import JobSpec
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.timefmt import rfc3339

END = T0 + timedelta(minutes=4)
#: How far the fault-free run-on after a crash moves the clock between its sweeps: less than a bucket's lease (20 s),
#: so a sweep still finds a dead sweeper's lease held before one finds it run out, and well within the misfire grace
#: (60 s), so no occurrence is late enough to be skipped. Each sweep is a dozen queries, most of them finding nothing.
RUN_ON_STEP = 15.0


def workload(world: CrashableCore) -> dict[str, set[str]]:
    """Jobs in several buckets and shards, one-shot and recurring; returns the keys each must apply."""
    once_a = world.create({"type": "once", "at": rfc3339(T0 + timedelta(seconds=40))})
    once_b = world.create({"type": "once", "at": rfc3339(T0 + timedelta(seconds=100))})
    rate = world.create({"type": "rate", "every_seconds": 30, "start_at": rfc3339(T0 + timedelta(seconds=15)),
                         "end_at": rfc3339(END)})  # fmt: skip
    cron = world.create({"type": "cron", "expression": "* * * * *", "end_at": rfc3339(END)})
    jittered = world.create({"type": "once", "at": rfc3339(T0 + timedelta(seconds=50))}, jitter_seconds=20)
    return {
        once_a: {occurrence_key(once_a, T0 + timedelta(seconds=40))},
        once_b: {occurrence_key(once_b, T0 + timedelta(seconds=100))},
        rate: {occurrence_key(rate, T0 + timedelta(seconds=15 + 30 * k)) for k in range(8)},
        cron: {occurrence_key(cron, T0 + timedelta(minutes=m)) for m in range(1, 5)},
        jittered: {occurrence_key(jittered, T0 + timedelta(seconds=50))},
    }


#: A page of timers in the tests of long buckets, on both backends (deployed: 99 on DynamoDB, a transaction's
#: items less the checkpoint): the paging is the same at any size, and a bucket of a few pages of 10 takes a fifth
#: of the time of one of two pages of 99.
SMALL_PAGE = 10


def long_buckets(world: CrashableCore) -> None:
    """Pages of SMALL_PAGE timers: 60 one-shot jobs due together then fill each of the 2 shards' buckets with
    several pages (about 30 timers each; fewer than 11 in one has a chance below 1e-6)."""
    world.timers.page_size = SMALL_PAGE


def create_once_jobs(world: CrashableCore, count: int, at: datetime) -> list[str]:
    """`count` one-shot jobs due `at`, created together as `POST /v1/jobs/batch` creates them (`create_many`: a
    transaction per hundred writes, each job's timer then settled as a single create settles it)."""
    spec = JobSpec.model_validate(
        {"schedule": {"type": "once", "at": rfc3339(at)}, "target": {"type": "http", "url": "https://example.com/hook"}}
    )
    answers = world.service().create_many("tenant", [Submission(spec, None, {})] * count)
    assert all(isinstance(answer, Created) for answer in answers), answers
    ids = [answer.job.job_id for answer in answers if isinstance(answer, Created)]
    world.created.extend(ids)
    return ids


def assert_exactly_once(world: CrashableCore, expected: dict[str, set[str]]) -> None:
    applied = effects_by_job(world)
    for job_id, keys in expected.items():
        assert applied.get(job_id, set()) == keys, f"job {job_id}: missing {keys - applied.get(job_id, set())}"
    assert all(count == 1 for count in world.sink.effects.values())
    runs = world.runs_by_key()
    for keys in expected.values():
        for key in keys:
            assert runs[key].state.value == "SUCCEEDED", (key, runs[key])
    # The quota: every job that completed (some by a sweep whose page checkpoint releases them, some re-run after
    # a crash) was released exactly once.
    assert world.quota_counter() == world.can_still_fire()


SWEEP_STEPS = [
    ("timers", "late_timers"),
    ("timers", "watermark"),
    ("timers", "init_watermark"),
    ("timers", "claim_bucket"),
    ("timers", "timers"),
    ("jobs", "advance"),
    ("timers", "put_timer"),
    ("queue", "send"),
    ("timers", "finish_bucket"),  # a bucket's last page: its checkpoint and the bucket done in one write
    ("timers", "advance_watermark"),
]


@pytest.mark.parametrize("buckets", ["in turn", "at once"])
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize(("port", "method"), SWEEP_STEPS)
def test_a_sweeper_crash_at_any_step_loses_nothing_and_duplicates_nothing(
    world: CrashableCore, port: str, method: str, when: str, buckets: str
) -> None:
    # Given jobs in several buckets
    expected = workload(world)

    # When a sweeper dies right before / right after one of its writes or sends - sweeping a minute's buckets one
    # after another, or at once in threads (as deployed: then the other bucket's thread runs on to its end)
    proxies = {"jobs": world.jobs, "timers": world.timers, "queue": world.queue}
    crash = CrashAt(proxies[port], method, when)
    proxies[port] = crash
    dispatcher = world.dispatcher(proxies["jobs"], proxies["timers"], proxies["queue"])
    doomed = world.sweeper("doomed", proxies["timers"], dispatcher, threads=buckets == "at once")
    with pytest.raises(Crash):
        doomed.sweep(world.deadline())
    assert crash.fired

    # And the system then runs on without faults (its lease expires; another sweeper takes over)
    world.run_until(END + timedelta(minutes=2), step=RUN_ON_STEP)

    # Then every occurrence was applied exactly once and none is lost
    assert_exactly_once(world, expected)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("method", ["checkpoint", "finish_bucket"])
def test_a_crash_at_a_long_buckets_checkpoint_or_at_its_last_pages_write_loses_and_repeats_nothing(
    world: CrashableCore, method: str, when: str
) -> None:
    # Given more one-shot jobs due in each bucket (of 2 shards) than a page holds: a checkpoint after the first
    # page, and the last page's checkpoint that also marks the bucket done
    long_buckets(world)
    due = T0 + timedelta(seconds=30)
    expected = {job: {occurrence_key(job, due)} for job in create_once_jobs(world, 60, due)}

    # When the sweeper dies right before / right after either write
    crash = CrashAt(world.timers, method, when)
    with pytest.raises(Crash):
        world.sweeper("doomed", crash, world.dispatcher(timers=crash)).sweep(world.deadline())
    assert crash.fired

    # Then, the system running on without faults, each applies once and each job's share of the quota is released once
    world.run_until(T0 + timedelta(minutes=3), step=RUN_ON_STEP)
    assert_exactly_once(world, expected)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_at_completing_an_empty_bucket_loses_nothing(world: CrashableCore, when: str) -> None:
    # Given jobs due only after the first sweep's look-ahead: the buckets it claims are empty, and it completes them
    # with a write of their own (a bucket with timers is completed by its last page's checkpoint)
    later = T0 + timedelta(minutes=3)
    expected = {
        job: {occurrence_key(job, later)}
        for job in (world.create({"type": "once", "at": rfc3339(later)}) for _ in range(5))
    }

    # When the sweeper dies right before / right after completing one
    crash = CrashAt(world.timers, "complete_bucket", when)
    with pytest.raises(Crash):
        world.sweeper("doomed", crash, world.dispatcher(timers=crash)).sweep(world.deadline())

    # Then, the system running on without faults, each applies once
    world.run_until(T0 + timedelta(minutes=5), step=RUN_ON_STEP)
    assert_exactly_once(world, expected)


def test_a_sweeper_that_dies_mid_bucket_is_resumed_from_its_checkpoint(world: CrashableCore) -> None:
    # Given more timers in each bucket (of 2 shards) than one page holds
    long_buckets(world)
    due = T0 + timedelta(seconds=30)
    ids = create_once_jobs(world, 60, due)

    # When the first sweeper dies after its first checkpoint
    crash = CrashAt(world.timers, "checkpoint", "after")
    with pytest.raises(Crash):
        world.sweeper("doomed", crash, world.dispatcher(timers=crash)).sweep(world.deadline())
    sent_before = world.queue.sent

    # Then the next sweeper, once the lease has expired, resumes after the checkpoint and sends only the rest
    world.clock.advance(25)
    world.sweeper("heir").sweep(world.deadline())
    assert world.queue.sent - sent_before <= 60 - SMALL_PAGE
    world.run_until(T0 + timedelta(minutes=3), step=RUN_ON_STEP)
    assert set(effects_by_job(world)) == set(ids)


@pytest.mark.parametrize("buckets", ["in turn", "at once"])
@pytest.mark.parametrize("sweepers", [2, 3])
def test_concurrent_sweepers_dispatch_every_occurrence_once_between_them(
    world: CrashableCore, sweepers: int, buckets: str
) -> None:
    # Given 120 one-shot jobs due within the look-ahead, across buckets and shards
    ids = [world.create({"type": "once", "at": rfc3339(T0 + timedelta(seconds=5 + i % 50))}) for i in range(120)]

    # When several sweepers sweep the same buckets at the same time
    barrier = threading.Barrier(sweepers)
    errors: list[BaseException] = []

    def run(n: int) -> None:
        try:
            sweeper = world.sweeper(f"sweeper-{n}", threads=buckets == "at once")
            barrier.wait()
            for _ in range(3):
                sweeper.sweep(world.deadline())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(sweepers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors

    # Then each occurrence was sent exactly once: the bucket claims kept the sweepers disjoint
    keys = [message.dispatch.key for message in world.queue.messages.values()]
    assert len(keys) == len(set(keys)) == 120
    assert {key.split(":")[0] for key in keys} == set(ids)


@pytest.mark.parametrize("policy", ["run_once", "skip", "run_all"])
def test_after_an_hour_long_outage_missed_occurrences_follow_the_misfire_policy_oldest_first(
    world: CrashableCore, policy: str
) -> None:
    # Given an every-minute job that was swept once, then an outage of an hour
    job_id = world.create({"type": "cron", "expression": "* * * * *"}, misfire_policy=policy)
    world.sweeper("before").sweep(world.deadline())
    sent_before = {m.dispatch.scheduled_for for m in world.queue.messages.values()}
    world.clock.advance(3600 + 30)  # now = 10:00:30
    now = world.clock.now()
    first_missed = max(sent_before) + timedelta(minutes=1)
    missed_count = int((T0 + timedelta(hours=1) - first_missed) / timedelta(minutes=1)) + 1
    expected_run, expected_skipped = {
        "run_once": (1, missed_count - 1),
        "skip": (0, missed_count),
        "run_all": (missed_count, 0),
    }[policy]

    # When the sweeper comes back
    world.sweeper("after").sweep(world.deadline())

    # Then the missed occurrences (first_missed .. 10:00) are handled per the policy, oldest first, and counted
    sent = [m.dispatch.scheduled_for for m in world.queue.messages.values()
            if m.dispatch.scheduled_for not in sent_before]  # fmt: skip
    missed = [at for at in sent if at <= now]
    assert len(missed) == expected_run
    assert missed == sorted(missed)
    if policy == "run_once":
        assert missed == [T0 + timedelta(hours=1)]
    if policy == "run_all":
        assert missed[0] == first_missed
    assert all(at > now for at in sent[len(missed) :])
    job = world.jobs.get(job_id)
    assert job.misfire_skipped == expected_skipped
    assert job.next_run_at is not None and job.next_run_at > now
