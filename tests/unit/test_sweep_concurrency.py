"""A sweep works on the buckets (shards) of one minute at once: a herd's minute is
dispatched in about the time of its biggest bucket. Each bucket is claimed, drained and checkpointed as another
sweeper would; the watermark passes a minute only once all its buckets are done."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.threads import ThreadTaskPool
from scheduler.core.model.keys import shard_of
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.sweep.sweeper import SweepConfig, Sweeper
from tests.unit.fixtures import T0, MemoryCore

SHARDS = 4


class TimersProxy:
    """The timer store, passed through but for what a subclass overrides."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class BarrierTimers(TimersProxy):
    """... with each bucket's claim of the first minute waiting until all of that minute's buckets are claiming at
    once: a sweep that took them one after another would time out here."""

    def __init__(self, inner: Any, parties: int, minute: Any) -> None:
        super().__init__(inner)
        self.barrier = threading.Barrier(parties, timeout=10)
        self.minute = minute
        self.threads: set[str] = set()

    def claim_bucket(self, bucket: Any, *args: Any) -> Any:
        if bucket.minute == self.minute:
            self.threads.add(threading.current_thread().name)
            self.barrier.wait()
        return self.inner.claim_bucket(bucket, *args)


class FailingTimers(TimersProxy):
    """... whose checkpoint of one bucket fails (its thread dies there)."""

    def __init__(self, inner: Any, failing_shard: int) -> None:
        super().__init__(inner)
        self.failing_shard = failing_shard
        self.failed = False

    def _fail_once(self, claim: Any) -> None:
        if claim.bucket.shard == self.failing_shard and not self.failed:
            self.failed = True
            raise ConnectionError("DynamoDB went away")

    def checkpoint(self, claim: Any, *args: Any) -> Any:
        self._fail_once(claim)
        return self.inner.checkpoint(claim, *args)

    def finish_bucket(self, claim: Any, *args: Any) -> Any:
        self._fail_once(claim)
        return self.inner.finish_bucket(claim, *args)


class OverlapTimers(TimersProxy):
    """... whose checkpoints take 20 ms (a DynamoDB transaction) and record how many that release quota overlap."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.releasing = 0
        self.most_at_once = 0
        self.guard = threading.Lock()

    def checkpoint(self, claim: Any, cursor: Any, lease_until: Any, releases: Any = None) -> Any:
        return self._timed(self.inner.checkpoint, claim, cursor, lease_until, releases)

    def finish_bucket(self, claim: Any, cursor: Any, expire_after: Any, releases: Any = None) -> Any:
        return self._timed(self.inner.finish_bucket, claim, cursor, expire_after, releases)

    def _timed(self, write: Any, claim: Any, cursor: Any, when: Any, releases: Any) -> Any:
        if not releases:
            return write(claim, cursor, when, releases)
        with self.guard:
            self.releasing += 1
            self.most_at_once = max(self.most_at_once, self.releasing)
        try:
            time.sleep(0.02)
            return write(claim, cursor, when, releases)
        finally:
            with self.guard:
                self.releasing -= 1


def config(world: MemoryCore) -> SweepConfig:
    return SweepConfig(SHARDS, world.lookahead, timedelta(minutes=2), 10_000, timedelta(seconds=5))


def herd(world: MemoryCore, count: int = 200) -> set[str]:
    """`count` one-shot jobs due in the same second, spread over the shards."""
    at = rfc3339(T0 + timedelta(seconds=30))
    return {world.create({"type": "once", "at": at}).job_id for _ in range(count)}


def test_the_buckets_of_a_minute_are_swept_at_once_and_each_occurrence_sent_once() -> None:
    world = MemoryCore.build(shard_count=SHARDS, max_active_jobs=1000)
    ids = herd(world)
    minute = T0.replace(second=0)
    timers = BarrierTimers(world.timers, SHARDS, minute)
    sweeper = Sweeper(timers, world.dispatcher, world.clock, config(world), world.metrics, "s", pool=ThreadTaskPool(8))

    report = sweeper.sweep(world.now() + timedelta(minutes=1))

    # Then all four buckets of the minute were claimed at once (the barrier let them through), each from its own
    # thread, and every job's occurrence was sent exactly once
    assert len(timers.threads) == SHARDS
    sent = [d.job_id for d in world.sent()]
    assert sorted(sent) == sorted(ids)
    assert report.dispatched == len(ids) and report.buckets_done >= SHARDS
    assert world.watermark_passed(minute)


def test_a_bucket_that_fails_holds_the_watermark_and_the_next_sweep_finishes_it_without_resending_the_others() -> None:
    world = MemoryCore.build(shard_count=SHARDS, max_active_jobs=1000)
    ids = herd(world)
    minute = T0.replace(second=0)
    failing = FailingTimers(world.timers, failing_shard=2)
    doomed = Sweeper(
        failing, world.dispatcher, world.clock, config(world), world.metrics, "doomed", pool=ThreadTaskPool(8)
    )

    # When one bucket's thread fails at its checkpoint while the others finish theirs
    with pytest.raises(ConnectionError):
        doomed.sweep(world.now() + timedelta(minutes=1))

    # Then the watermark did not pass the minute (one of its buckets is not done)
    assert not world.watermark_passed(minute)
    first = [d.job_id for d in world.sent()]

    # And once the failed bucket's lease has expired, the next sweep re-sends only that bucket's page
    world.clock.advance(150)
    heir = Sweeper(
        world.timers, world.dispatcher, world.clock, config(world), world.metrics, "heir", pool=ThreadTaskPool(8)
    )
    heir.sweep(world.now() + timedelta(minutes=1))
    resent = [d.job_id for d in world.sent()][len(first) :]
    assert set(first) | set(resent) == ids
    assert resent and {shard_of(job_id, SHARDS) for job_id in resent} == {2}  # the others were not sent again
    assert world.watermark_passed(minute)


def test_checkpoints_that_release_a_tenants_quota_are_written_one_at_a_time() -> None:
    # Given one tenant's one-shot herd over four buckets swept at once: each page's checkpoint releases the quota of
    # the jobs it completed, a transaction on the tenant's counter that DynamoDB would cancel if another held it
    world = MemoryCore.build(shard_count=SHARDS, max_active_jobs=1000)
    ids = herd(world)
    timers = OverlapTimers(world.timers)
    sweeper = Sweeper(timers, world.dispatcher, world.clock, config(world), world.metrics, "s", pool=ThreadTaskPool(8))

    sweeper.sweep(world.now() + timedelta(minutes=1))

    # Then no two releasing checkpoints overlapped, and every job was released once
    assert timers.most_at_once == 1
    assert sorted(d.job_id for d in world.sent()) == sorted(ids)
    assert world.jobs.active.get("acme", 0) == 0


def test_a_pool_runs_every_task_before_raising_and_returns_results_in_order() -> None:
    finished: list[int] = []

    def task(n: int) -> Any:
        def run() -> int:
            if n == 1:
                raise ValueError("one")
            finished.append(n)
            return n * 10

        return run

    assert ThreadTaskPool(4).run_all([task(0), task(2), task(3)]) == [0, 20, 30]
    finished.clear()
    with pytest.raises(ValueError, match="one"):
        ThreadTaskPool(4).run_all([task(0), task(1), task(2), task(3)])
    assert sorted(finished) == [0, 2, 3]
    with pytest.raises(ValueError):
        ThreadTaskPool(0)
