"""The backfill store in memory."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import datetime

from scheduler.core.model.job import BackfillState
from scheduler.core.ports import Backfill


class MemoryBackfillStore:
    def __init__(self) -> None:
        self.items: dict[str, Backfill] = {}
        self.lock = threading.RLock()

    def create(self, backfill: Backfill) -> None:
        with self.lock:
            if backfill.backfill_id in self.items:
                raise ValueError(f"backfill {backfill.backfill_id} exists")
            self.items[backfill.backfill_id] = backfill

    def get(self, backfill_id: str) -> Backfill | None:
        with self.lock:
            return self.items.get(backfill_id)

    def for_job(self, job_id: str, limit: int, cursor: str | None) -> tuple[list[Backfill], str | None]:
        """Newest first (ids sort by creation); the cursor is the id of the last backfill of the previous page."""
        with self.lock:
            mine = [b for _, b in sorted(self.items.items(), reverse=True) if b.job_id == job_id]
        start = 0
        if cursor:
            start = next((n + 1 for n, b in enumerate(mine) if b.backfill_id == cursor), 0)
            if start == 0:
                raise ValueError("cursor is not one this API returned for this job")
        page = mine[start : start + limit]
        more = start + limit < len(mine)
        return page, (page[-1].backfill_id if more and page else None)

    def running(self, limit: int) -> list[Backfill]:
        with self.lock:
            found = [b for _, b in sorted(self.items.items()) if b.state == BackfillState.RUNNING]
            return found[:limit]

    def advance(self, backfill: Backfill, cursor: datetime, dispatched: int, done: bool, now: datetime) -> bool:
        with self.lock:
            current = self.items.get(backfill.backfill_id)
            if current is None or current.state != BackfillState.RUNNING or current.cursor != backfill.cursor:
                return False
            self.items[backfill.backfill_id] = replace(
                current,
                cursor=cursor,
                dispatched=dispatched,
                waves=current.waves + 1,
                updated_at=now,
                state=BackfillState.COMPLETED if done else BackfillState.RUNNING,
            )
            return True

    def finish(self, backfill: Backfill, state: BackfillState, now: datetime) -> Backfill | None:
        with self.lock:
            current = self.items.get(backfill.backfill_id)
            if current is None or current.state != BackfillState.RUNNING:
                return current
            self.items[backfill.backfill_id] = replace(current, state=state, updated_at=now)
            return self.items[backfill.backfill_id]
