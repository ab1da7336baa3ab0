"""The sweep (docs/design.md §3.3): claim due buckets, dispatch their timers, advance the watermark.

Several sweepers may run at once: bucket claims (conditional writes with an epoch) keep them disjoint, and a
sweeper that dies mid-bucket loses its lease so another finishes the bucket from its last checkpoint. One sweep
also works on the buckets (shards) of a minute at once, through its TaskPool: each bucket is claimed, drained and
checkpointed on its own exactly as another sweeper would, so running them together needs no other order than
the per-page one (advance -> send -> next timers -> checkpoint) and the minute barrier for the watermark.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler.core.errors import ClaimLost
from scheduler.core.execution.events import Outbox
from scheduler.core.model.timefmt import ONE_MINUTE, minute_of
from scheduler.core.ports import BucketBusy, BucketClaim, BucketId, Clock, Metrics, TaskPool, TimerStore
from scheduler.core.runtime.tasks import InOrder
from scheduler.core.sweep.backfill import BackfillRunner
from scheduler.core.sweep.dispatch import Dispatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepConfig:
    shard_count: int
    lookahead: timedelta
    bucket_lease: timedelta
    #: Occurrences one invocation dispatches at most (buckets swept at once may each finish the page they took
    #: when the budget ran out: up to one page per bucket more).
    dispatch_budget: int
    #: Stop taking new pages this long before the deadline.
    safety: timedelta
    #: How long done buckets and their timers are kept before TTL removes them.
    retention: timedelta = timedelta(days=2)
    #: A first sweep starts this far back, so a timer written by an API whose clock lags is never behind it.
    initial_lag: timedelta = timedelta(minutes=10)
    #: Completion events the outbox drain publishes per sweep at most (what workers left unpublished).
    outbox_drain_limit: int = 1000


@dataclass
class SweepReport:
    dispatched: int = 0
    buckets_done: int = 0
    buckets_busy: int = 0
    late_drained: int = 0
    watermark: datetime | None = None
    lag_seconds: float = 0.0
    stopped_early: bool = False
    errors: list[str] = field(default_factory=list)
    outbox_backlog: int = 0
    events_published: int = 0
    backfill_dispatched: int = 0


@dataclass(eq=False)
class Sweeper:
    timers: TimerStore
    dispatcher: Dispatcher
    clock: Clock
    config: SweepConfig
    metrics: Metrics
    owner: str
    outbox: Outbox | None = None
    backfills: BackfillRunner | None = None
    #: Runs a minute's buckets (one per shard), at once when it is a thread pool (scheduler.adapters.threads).
    pool: TaskPool = field(default_factory=InOrder)

    def __post_init__(self) -> None:
        #: Guards the report, which the buckets of a minute update from their threads.
        self._lock = threading.Lock()
        #: Held by a bucket's checkpoint that releases quota (a transaction on tenant counters; see `_drain`).
        self._releasing = threading.Lock()

    def sweep(self, deadline: datetime, buckets_only: bool = False) -> SweepReport:
        """One sweeper invocation: drain the late lane, then the buckets from the watermark to the look-ahead.
        `buckets_only`: a fan-out sweep beside a tick (scheduler.core.capacity.fan_out) sweeps the buckets alone; the
        late lane, backfill waves and the outbox are its tick's."""
        report = SweepReport()
        now = self.clock.now()
        stop_at = deadline - self.config.safety
        last_minute = minute_of(now + self.config.lookahead)
        horizon_end = self.dispatcher.horizon_end(now)

        # Every shard any writer used: a count raised by a deploy is swept from the moment it was recorded (and a
        # lowered one keeps being swept), so no timer written with either is ever behind a watermark that skipped it.
        shards = max(self.config.shard_count, self.timers.recorded_shards())
        late = [] if buckets_only else self.timers.late_timers(self.config.dispatch_budget, shards)
        if late:
            report.late_drained = self.dispatcher.dispatch(late, horizon_end, land_on_time=True)
            for timer in late:
                self.timers.remove_late(timer)
            report.dispatched += report.late_drained

        watermark = self.timers.watermark() or self.timers.init_watermark(minute_of(now) - self.config.initial_lag)
        new_watermark = watermark
        contiguous = True
        minute = watermark
        while minute <= last_minute and not report.stopped_early:
            buckets = [BucketId(minute, shard) for shard in range(shards)]
            done = self.pool.run_all(
                [functools.partial(self._sweep_bucket, bucket, horizon_end, stop_at, report) for bucket in buckets]
            )
            minute_done = all(done)
            if minute_done and contiguous:
                new_watermark = minute + ONE_MINUTE
            else:
                contiguous = False
            minute += ONE_MINUTE

        if new_watermark > watermark:
            self.timers.advance_watermark(new_watermark, shards)

        # Backfill waves take what is left of the budget, after the buckets: on-time work never waits behind them.
        if self.backfills is not None and not report.stopped_early and not buckets_only:
            waves = self.backfills.run(self.config.dispatch_budget - report.dispatched, stop_at)
            report.backfill_dispatched = waves.dispatched
            report.dispatched += waves.dispatched
        report.watermark = new_watermark
        # Dispatch lag: how far the oldest minute not fully swept is behind now (0 while we are ahead).
        report.lag_seconds = max(0.0, (minute_of(self.clock.now()) - new_watermark).total_seconds())
        self.metrics.count("DispatchLagSeconds", report.lag_seconds, unit="Seconds")

        # Last, so that dispatching never waits on the event bus: completion events whose worker died between
        # recording the outcome and publishing it, or whose publish the bus refused (docs/design.md §2: the outbox).
        if self.outbox is not None and not buckets_only:
            drained = self.outbox.drain(self.config.outbox_drain_limit)
            report.outbox_backlog, report.events_published = drained.found, drained.published
        return report

    def _spent(self, report: SweepReport, stop_at: datetime) -> bool:
        """The budget and the deadline bound a sweep: checked before every bucket and before every page."""
        with self._lock:
            if report.dispatched >= self.config.dispatch_budget or self.clock.now() >= stop_at:
                report.stopped_early = True
            return report.stopped_early

    def _sweep_bucket(self, bucket: BucketId, horizon_end: datetime, stop_at: datetime, report: SweepReport) -> bool:
        """Claim, query page by page, dispatch, checkpoint; mark done. Returns whether the bucket is done."""
        if self._spent(report, stop_at):
            return False
        now = self.clock.now()
        claim = self.timers.claim_bucket(bucket, self.owner, now, now + self.config.bucket_lease)
        if isinstance(claim, BucketBusy):
            if not claim.done:
                with self._lock:
                    report.buckets_busy += 1
            return claim.done
        try:
            return self._drain(claim, horizon_end, stop_at, report)
        except ClaimLost:
            log.warning("bucket claim lost", extra={"minute": bucket.minute.isoformat(), "shard": bucket.shard})
            return False

    def _drain(self, claim: BucketClaim, horizon_end: datetime, stop_at: datetime, report: SweepReport) -> bool:
        expire_after = claim.bucket.minute + self.config.retention
        pages = iter(self.timers.timers(claim.bucket, claim.cursor))
        taken = next(pages, None)
        if taken is None:  # nothing (left) in it
            self.timers.complete_bucket(claim, expire_after=expire_after)
        while taken is not None:
            page, cursor = taken
            if self._spent(report, stop_at):  # before taking on another page: give the rest to the next sweep
                self.timers.release(claim)
                return False
            # The shares of the quota of the jobs this page completes are released with its checkpoint (one atomic
            # write): a crash before it re-runs the page, whose replayed advances owe the same releases.
            releases: Counter[str] = Counter()
            sent = self.dispatcher.dispatch(page, horizon_end, releases, land_on_time=True)
            with self._lock:
                report.dispatched += sent
            # The next page is read before this one's checkpoint, after its sends and next timers (so it sees any
            # the page put behind its cursor): when there is none, the checkpoint also marks the bucket done, one
            # write instead of two.
            taken = next(pages, None)
            # One releasing checkpoint at a time: each is a transaction on its tenants' quota counters, and DynamoDB
            # cancels a transaction on an item another one holds (TransactionConflict) - the buckets of a one-tenant
            # herd would cancel each other's checkpoints.
            with self._releasing if releases else contextlib.nullcontext():
                if taken is None:
                    self.timers.finish_bucket(claim, cursor, expire_after, releases)
                else:
                    self.timers.checkpoint(claim, cursor, self.clock.now() + self.config.bucket_lease, releases)
            if releases:
                self.metrics.count("QuotaReleasedAtCheckpoint", sum(releases.values()))
        with self._lock:
            report.buckets_done += 1
        return True
