"""The ledger in memory: one execution per occurrence, with its history and outbox."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol, TypeVar

from scheduler.core.errors import ClaimRefused, Fenced, LeaseLost
from scheduler.core.execution.events import outbox_entry
from scheduler.core.model.job import RunState
from scheduler.core.ports import (
    ALL_RUNS,
    Attempt,
    AttemptEnd,
    Between,
    Dispatch,
    Execution,
    HistoryEntry,
    Hold,
    OutboxEntry,
)

_T = TypeVar("_T")


class Snapshot(Protocol):
    """How the ledger copies what it hands out, so that no caller holds its items: `copy.deepcopy` unless given a
    cheaper copy that is the same snapshot of an `Execution` (the simulator's)."""

    def __call__(self, value: _T, /) -> _T: ...


class MemoryLedger:
    def __init__(self, snapshot: Snapshot = copy.deepcopy) -> None:
        self.snapshot = snapshot
        self.items: dict[str, Execution] = {}
        #: The occurrences whose copies of their job are void (`void_copies`), kept apart from their items.
        self.copies_void: set[str] = set()
        #: Holds recorded before an occurrence's first claim (`mark_held`), kept apart from the items until then.
        self.holds: dict[str, Hold] = {}
        self.lock = threading.RLock()

    def claim(self, dispatch: Dispatch, attempt: Attempt) -> Execution:
        # No index here (`attempt.indexed` changes nothing): `runs` lists every item, which is what the DynamoDB
        # adapter's merge gives.
        owner, now, lease_until, take_over_expired = (
            attempt.owner,
            attempt.now,
            attempt.lease_until,
            attempt.take_over_expired,
        )
        with self.lock:
            item = self.items.get(dispatch.key)
            claimable = (
                item is None
                or (item.state == RunState.RETRY_WAIT and (item.next_attempt_at is None or item.next_attempt_at <= now))
                or (
                    take_over_expired
                    and item.state == RunState.RUNNING
                    and item.lease_until is not None
                    and item.lease_until < now
                )
                or item.reopened_by(dispatch)
            )
            if attempt.on_copy and dispatch.key in self.copies_void:
                raise ClaimRefused(self.snapshot(item), void_copy=True)
            if not claimable:
                raise ClaimRefused(self.snapshot(item))
            if item is None:
                item = Execution.unstarted(dispatch, RunState.RUNNING, now)
                item.held = self.holds.pop(dispatch.key, None)
                self.items[dispatch.key] = item
            item.held = Hold.merged(item.held, attempt.held)
            item.state = RunState.RUNNING
            item.epoch += 1
            item.attempts += 1
            item.owner = owner
            item.lease_until = lease_until
            item.next_attempt_at = None
            item.overlapped = None
            # A reopened pause skip runs again: it is neither finished nor reopenable while it runs.
            item.finished_at = None
            item.paused_version = None
            item.updated_at = now
            return self.snapshot(item)

    def void_copies(self, key: str, now: datetime) -> None:
        with self.lock:
            self.copies_void.add(key)

    def mark_held(self, dispatch: Dispatch, hold: Hold) -> None:
        with self.lock:
            if dispatch.key not in self.items:
                self.holds[dispatch.key] = Hold.merged(self.holds.get(dispatch.key), hold) or hold

    def get(self, key: str) -> Execution | None:
        with self.lock:
            item = self.items.get(key)
            return self.snapshot(item) if item else None

    def _held(self, key: str, owner: str, epoch: int) -> Execution | None:
        item = self.items.get(key)
        if item is None or item.epoch != epoch or item.owner != owner or item.state != RunState.RUNNING:
            return None
        return item

    def heartbeat(self, key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        with self.lock:
            item = self._held(key, owner, epoch)
            if item is None:
                raise LeaseLost(key)
            item.lease_until = lease_until

    def finish(self, key: str, owner: str, epoch: int, now: datetime, end: AttemptEnd) -> Execution:
        with self.lock:
            item = self._held(key, owner, epoch)
            if item is None:
                raise Fenced(key)
            if end.refund_attempt:
                item.attempts -= 1
            item.state = end.state
            item.updated_at = now
            item.lease_until = None
            item.next_attempt_at = end.next_attempt_at
            if end.overlapped is not None:
                item.overlapped = end.overlapped
            if end.paused_version is not None:
                item.paused_version = end.paused_version
            if end.result is not None:
                item.result = end.result[:1000]
            if end.error is not None:
                item.last_error = end.error[:1000]
            if end.state.terminal:
                item.finished_at = now
                if end.announce:
                    item.outbox.append(outbox_entry(key, epoch, end.state, now, error=end.error, result=end.result))
            item.history.append(HistoryEntry.of(epoch, end.state, now, end.error))
            return self.snapshot(item)

    def record_unclaimed(self, dispatch: Dispatch, state: RunState, now: datetime, reason: str) -> bool:
        with self.lock:
            if dispatch.key in self.items:
                return False
            self.items[dispatch.key] = Execution.unstarted(
                dispatch,
                state,
                now,
                last_error=reason,
                updated_at=now,
                finished_at=now,
                history=[HistoryEntry.of(0, state, now, reason)],
                outbox=[outbox_entry(dispatch.key, 0, state, now, error=reason)],
            )
            return True

    def expire_to(
        self, key: str, epoch: int, state: RunState, now: datetime, reason: str, *, announce: bool = True
    ) -> bool:
        with self.lock:
            item = self.items.get(key)
            if (
                item is None
                or item.epoch != epoch
                or item.state != RunState.RUNNING
                or item.lease_until is None
                or item.lease_until >= now
            ):
                return False
            item.state = state
            item.last_error = reason
            item.lease_until = None
            item.updated_at = now
            item.finished_at = now
            item.history.append(HistoryEntry.of(epoch, state, now, reason))
            if announce:
                item.outbox.append(outbox_entry(key, epoch, state, now, error=reason))
            return True

    def mark_dead_lettered(self, key: str) -> None:
        with self.lock:
            item = self.items.get(key)
            if item is not None:
                item.dead_lettered = True

    def revive(self, key: str, now: datetime, note: str) -> bool:
        with self.lock:
            item = self.items.get(key)
            if item is None or item.state != RunState.DEAD:
                return False
            item.state = RunState.RETRY_WAIT
            item.attempts = 0
            item.next_attempt_at = now
            item.dead_lettered = False
            item.finished_at = None
            item.updated_at = now
            item.history.append(HistoryEntry.of(item.epoch, RunState.RETRY_WAIT, now, note))
            return True

    def runs(
        self, job_id: str, limit: int, cursor: str | None, unindexed: str | None = None, within: Between = ALL_RUNS
    ) -> tuple[list[Execution], str | None]:
        with self.lock:
            mine = sorted(
                (
                    i
                    for i in self.items.values()
                    if i.job_id == job_id
                    and (within.before is None or i.scheduled_for < within.before)
                    and (within.after is None or i.scheduled_for > within.after)
                ),
                key=lambda e: e.scheduled_for,
                reverse=True,
            )
        start = 0
        if cursor:
            start = next((n + 1 for n, e in enumerate(mine) if e.key == cursor), len(mine))
        page = [self.snapshot(e) for e in mine[start : start + limit]]
        more = start + limit < len(mine)
        return page, (page[-1].key if more and page else None)

    def resolve(self, key: str, state: RunState, now: datetime, note: str) -> Execution:
        with self.lock:
            item = self.items.get(key)
            if item is None or item.state != RunState.RECONCILING:
                raise ClaimRefused(self.snapshot(item))
            item.state = state
            item.updated_at = now
            item.next_attempt_at = now if state == RunState.RETRY_WAIT else None
            item.finished_at = now if state.terminal else None
            item.history.append(HistoryEntry.of(item.epoch, state, now, note))
            if state.terminal:
                item.outbox.append(outbox_entry(key, item.epoch, state, now, error=note))
            return self.snapshot(item)

    def pending_outbox(self, limit: int) -> list[Execution]:
        with self.lock:
            pending = sorted((i for i in self.items.values() if i.outbox), key=lambda e: e.outbox[-1].at)
            return [self.snapshot(e) for e in pending[:limit]]

    def clear_outbox(self, key: str, published: Sequence[OutboxEntry]) -> bool:
        with self.lock:
            item = self.items.get(key)
            if item is None or not published or len(item.outbox) != len(published):
                return False
            if item.outbox[-1].event_id != published[-1].event_id:
                return False
            item.outbox = []
            return True
