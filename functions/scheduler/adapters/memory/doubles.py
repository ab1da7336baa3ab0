"""The rest of the outside world in memory: a clock that moves when told, heartbeats that beat when told, recorded
metrics, an event bus and the pollers' control."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

from scheduler.core.errors import EventPublishFailed
from scheduler.core.ports import OutcomeEvent


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)

    def set(self, when: datetime) -> None:
        self._now = when


class ManualBeating:
    """A heartbeat of `ManualHeartbeats`: beats only when `ManualHeartbeats.beat` says so."""

    def __init__(self, beat: Callable[[], bool], every: float) -> None:
        self.beat = beat
        self.every = every
        self.running = True

    def stop(self) -> None:
        self.running = False


class ManualHeartbeats:
    """The `Heartbeats` port without threads: every heartbeat started is kept, and `beat()` makes each one still
    running beat once, on the caller's thread (a test decides when a period has passed)."""

    def __init__(self) -> None:
        self.started: list[ManualBeating] = []

    def start(self, beat: Callable[[], bool], every: float) -> ManualBeating:
        beating = ManualBeating(beat, every)
        self.started.append(beating)
        return beating

    def beat(self) -> int:
        """One period passes: every running heartbeat beats (one whose beat returns False stops). Returns how many
        beat."""
        running = [b for b in self.started if b.running]
        for beating in running:
            beating.running = beating.beat()
        return len(running)


class MemoryEventPublisher:
    """An event bus that keeps what it was given; `failing` makes it refuse (as an unreachable bus would)."""

    def __init__(self) -> None:
        self.published: list[OutcomeEvent] = []
        self.failing = False
        self.lock = threading.RLock()

    def publish(self, events: Sequence[OutcomeEvent]) -> None:
        with self.lock:
            if self.failing:
                raise EventPublishFailed(f"{len(events)} events refused")
            self.published.extend(events)


class RecordingMetrics:
    def __init__(self) -> None:
        self.counts: dict[str, float] = {}

    def count(self, name: str, value: float = 1, unit: str = "Count") -> None:
        self.counts[name] = self.counts.get(name, 0) + value


class MemoryPollerControl:
    """PollerControl in memory: each lane's MinimumPollers, every write recorded; lanes in `busy` refuse writes
    (as a mapping with another update under way does)."""

    def __init__(self, pollers: dict[str, int | None]) -> None:
        self.pollers = dict(pollers)
        self.busy: set[str] = set()
        self.writes: list[tuple[str, int]] = []
        self.lock = threading.Lock()

    def lanes(self) -> list[str]:
        return sorted(self.pollers)

    def minimum_pollers(self, lane: str) -> int | None:
        with self.lock:
            return self.pollers[lane]

    def set_minimum_pollers(self, lane: str, pollers: int) -> bool:
        with self.lock:
            if lane in self.busy:
                return False
            self.pollers[lane] = pollers
            self.writes.append((lane, pollers))
            return True
