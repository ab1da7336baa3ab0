"""A heartbeat around a piece of work (the lease of a running target, the hold of a received batch): what one
beat does and when beating stops, on top of the `Heartbeats` port that schedules the beats."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import TracebackType

from scheduler.core.errors import LeaseLost
from scheduler.core.ports import Beating, Heartbeats

log = logging.getLogger(__name__)


class Heartbeat:
    """Calls `beat` every `interval` seconds while the `with` block runs (never when `interval` is None).

    A failed beat is logged and retried next period (the lease margin covers it); `LeaseLost` stops the heartbeat
    and sets `lost`, for the block to abort without writing. Leaving the block stops the heartbeat and waits for a
    beat in flight.
    """

    def __init__(self, heartbeats: Heartbeats | None, beat: Callable[[], None], interval: float | None) -> None:
        if interval and heartbeats is None:
            raise ValueError(f"a heartbeat every {interval} s needs Heartbeats to schedule it")
        self._heartbeats = heartbeats
        self._beat = beat
        self._interval = interval
        self.lost = False
        self._running: Beating | None = None

    def __enter__(self) -> Heartbeat:
        if self._interval and self._heartbeats is not None:
            self._running = self._heartbeats.start(self._once, self._interval)
        return self

    def _once(self) -> bool:
        try:
            self._beat()
        except LeaseLost:
            self.lost = True
            return False
        except Exception:  # a failed heartbeat is retried next period; the lease margin covers it
            log.exception("heartbeat failed")
        return True

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._running is not None:
            self._running.stop()
