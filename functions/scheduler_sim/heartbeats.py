"""The `Heartbeats` port on the simulation's clock: the background heartbeat that renews a running call's lease.

A heartbeat is due every period of simulated time from its start. Simulated steps take no time, so beats happen only
where the simulation lets time pass inside an actor's call while the actor is alive: a slow target
(`Simulation.busy`), which renews its lease as the deployed worker's heartbeat thread does, so a call of any length
keeps its lease and its execution slot. A frozen actor (`Simulation.freeze`: a stalled process, the fault that loses
a lease) does not beat.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from scheduler.core.ports import Clock


class SimBeating:
    """One heartbeat: its beat, its period and when it is next due (on the simulation's true clock)."""

    def __init__(self, beat: Callable[[], bool], every: float, due: datetime) -> None:
        self.beat = beat
        self.every = timedelta(seconds=every)
        self.due = due
        self.running = True

    def stop(self) -> None:
        self.running = False


class SimHeartbeats:
    """One actor's heartbeats; `next_due` and `beat_due` let the simulation beat them as its time passes."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.started: list[SimBeating] = []

    def start(self, beat: Callable[[], bool], every: float) -> SimBeating:
        beating = SimBeating(beat, every, self.clock.now() + timedelta(seconds=every))
        self.started = [b for b in self.started if b.running] + [beating]
        return beating

    def next_due(self) -> datetime | None:
        return min((b.due for b in self.started if b.running), default=None)

    def beat_due(self, now: datetime) -> int:
        """Every running heartbeat due by `now` beats once (one whose beat returns False stops); returns how many."""
        due = [b for b in self.started if b.running and b.due <= now]
        for beating in due:
            beating.due += beating.every
            beating.running = beating.beat()
        return len(due)
