"""The timer store in memory: timers by bucket, bucket claims, the watermark and the late lane."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.adapters.memory.counts import ActiveJobCounts
from scheduler.core.errors import ClaimLost
from scheduler.core.model.keys import shard_of
from scheduler.core.model.timefmt import minute_of
from scheduler.core.ports import BucketBusy, BucketClaim, BucketId, Timer

PAGE_SIZE = 100


@dataclass
class _Bucket:
    sealed: bool = False
    done: bool = False
    owner: str | None = None
    epoch: int = 0
    lease_until: datetime | None = None
    cursor: str | None = None


@dataclass
class _Marks:
    """The watermark item: the watermark and the most shards any writer recorded."""

    watermark: datetime | None = None
    shards: int = 0
    #: Every shard count a writer recorded.
    counts: set[int] = field(default_factory=set)


class MemoryTimerStore:
    #: Timers a query page holds (DynamoDB's Limit in the real store).
    page_size = PAGE_SIZE

    def __init__(self, shard_count: int) -> None:
        self.shard_count = shard_count
        self.buckets: dict[BucketId, _Bucket] = {}
        self.timer_items: dict[BucketId, dict[str, Timer]] = {}
        self.late: dict[str, Timer] = {}
        self.marks = _Marks()
        self._recorded = False
        self.lock = threading.RLock()
        #: The tenants' active-job counts, shared with the job store (one table in DynamoDB): a page checkpoint
        #: releases the jobs it completed.
        self.counts = ActiveJobCounts()

    def with_shard_count(self, shard_count: int) -> MemoryTimerStore:
        """The same table seen by a process configured with another shard count (a deploy that changed it): every
        item is shared, only the count it writes with differs."""
        view = copy.copy(self)
        view.shard_count, view._recorded = shard_count, False
        return view

    def bucket_of(self, timer: Timer) -> BucketId:
        return BucketId(minute_of(timer.due_at), shard_of(timer.job_id, self.shard_count))

    def record_shards(self) -> None:
        """Before this store's first write with its shard count: raise the recorded count to it (once)."""
        with self.lock:
            if not self._recorded:
                self.marks.counts.add(self.shard_count)
                self.marks.shards = max(self.marks.shards, self.shard_count)
                self._recorded = True

    def recorded_shards(self) -> int:
        with self.lock:
            return self.marks.shards

    def put_timer(self, timer: Timer) -> None:
        self.record_shards()
        with self.lock:
            self.timer_items.setdefault(self.bucket_of(timer), {})[timer.place] = timer

    def claim_bucket(
        self, bucket: BucketId, owner: str, now: datetime, lease_until: datetime
    ) -> BucketClaim | BucketBusy:
        with self.lock:
            item = self.buckets.setdefault(bucket, _Bucket())
            if item.done:
                return BucketBusy(done=True)
            # A lease is live until strictly after its end (as in DynamoDB: claimable when lease_until < now).
            if item.owner is not None and item.lease_until is not None and item.lease_until >= now:
                return BucketBusy(done=False)
            item.sealed = True
            item.owner = owner
            item.epoch += 1
            item.lease_until = lease_until
            return BucketClaim(bucket, owner, item.epoch, item.cursor)

    def is_sealed(self, bucket: BucketId) -> bool:
        with self.lock:
            item = self.buckets.get(bucket)
            if item is not None:
                return item.sealed
            return self.marks.watermark is not None and bucket.minute < self.marks.watermark

    def has_timer(self, timer: Timer) -> bool:
        """In its bucket under this store's shard count, or under any other count a writer recorded."""
        with self.lock:
            counts = {self.shard_count, *self.marks.counts}
            minute = minute_of(timer.due_at)
            return any(
                timer.place in self.timer_items.get(BucketId(minute, shard_of(timer.job_id, count)), {})
                for count in counts
            )

    def timers(self, bucket: BucketId, after: str | None) -> Iterator[tuple[list[Timer], str]]:
        while True:
            with self.lock:
                items = sorted(self.timer_items.get(bucket, {}).items())
            page = [(k, t) for k, t in items if after is None or k > after][: self.page_size]
            if not page:
                return
            after = page[-1][0]
            yield [t for _, t in page], after
            if len(page) < self.page_size:
                return

    def upcoming(self, minute: datetime, recorded: int | None = None) -> list[Timer]:
        with self.lock:
            return [
                timer
                for shard in range(max(self.shard_count, self.marks.shards if recorded is None else recorded))
                for _, timer in sorted(self.timer_items.get(BucketId(minute, shard), {}).items())
            ]

    def _held(self, claim: BucketClaim) -> _Bucket:
        item = self.buckets.get(claim.bucket)
        if item is None or item.epoch != claim.epoch or item.owner != claim.owner or item.done:
            raise ClaimLost(str(claim.bucket))
        return item

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        # One atomic write in DynamoDB (the checkpoint and the counters): both locks, the counts' first as in the job
        # store's `create`.
        with self.counts.lock, self.lock:
            item = self._held(claim)
            item.cursor = cursor
            item.lease_until = lease_until
            for tenant, count in (releases or {}).items():
                self.counts.release(tenant, count)

    def finish_bucket(
        self, claim: BucketClaim, cursor: str, expire_after: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        with self.counts.lock, self.lock:
            item = self._held(claim)
            self.checkpoint(claim, cursor, item.lease_until or expire_after, releases)
            item.done = True

    def release(self, claim: BucketClaim) -> None:
        with self.lock:
            item = self._held(claim)
            item.owner = None
            item.lease_until = None

    def complete_bucket(self, claim: BucketClaim, expire_after: datetime) -> None:
        with self.lock:
            self._held(claim).done = True

    def watermark(self) -> datetime | None:
        with self.lock:
            return self.marks.watermark

    def init_watermark(self, minute: datetime) -> datetime:
        with self.lock:
            if self.marks.watermark is None:
                self.marks.watermark = minute
            return self.marks.watermark

    def advance_watermark(self, minute: datetime, swept_shards: int | None = None) -> None:
        with self.lock:
            if self.marks.shards > (self.shard_count if swept_shards is None else swept_shards):
                return
            if self.marks.watermark is None or minute > self.marks.watermark:
                self.marks.watermark = minute

    def put_late(self, timer: Timer) -> None:
        self.record_shards()
        with self.lock:
            self.late[timer.place] = timer

    def late_timers(self, limit: int, shards: int | None = None) -> list[Timer]:
        with self.lock:
            return [t for _, t in sorted(self.late.items())][:limit]

    def remove_late(self, timer: Timer) -> None:
        with self.lock:
            self.late.pop(timer.place, None)
