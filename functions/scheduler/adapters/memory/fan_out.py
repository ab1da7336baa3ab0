"""The fan-out's record in memory."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime

from scheduler.core.ports import FanOutRecord


class MemoryFanOutStore:
    def __init__(self) -> None:
        self.record = FanOutRecord()
        self.launched: datetime | None = None
        self.lock = threading.Lock()

    def read(self) -> FanOutRecord:
        with self.lock:
            return self.record

    def record_forecast(self, due: Mapping[datetime, int], at: datetime) -> None:
        with self.lock:
            self.record = replace(self.record, due=dict(due), forecast_at=at)

    def record_backlog(self, sweeps: int, at: datetime) -> None:
        with self.lock:
            self.record = replace(self.record, backlog_sweeps=sweeps, backlog_at=at)

    def claim_launch(self, minute: datetime) -> bool:
        with self.lock:
            if self.launched is not None and self.launched >= minute:
                return False
            self.launched = minute
            return True
