"""The invariants a run is judged by (docs/design.md §6), the violations the checker reports, and how they name
instants."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.core.model.timefmt import rfc3339

INVARIANTS: dict[int, str] = {
    0: "the run completes without unexpected errors",
    1: "every occurrence of an accepted job that fell due reaches a terminal state (none lost)",
    2: "each occurrence key produces at most one accepted effect at a cooperating target",
    3: "no write from a worker whose epoch is stale is ever accepted",
    4: "nothing fires after its cancellation was acknowledged (beyond occurrences already running)",
    5: "a recurring job fires each of its occurrences once, and misses none beyond its misfire policy",
    6: "bad input never changes stored state",
    7: "once the run is quiet, each tenant's quota counter equals its jobs that can still fire (ACTIVE or PAUSED)",
    8: "a change of version sends no old version's message again unless that version's last plan was unproven",
    9: "a tenant never has more occurrences running at its target than its execution budget allows",
    10: "what a dead worker held is received again within the hold time (its lease, if claimed) of its death",
    11: "once the run is quiet, every terminal outcome of a job with events on was published and the outbox is empty; "
    "a job with events off publishes none",
    12: "once the run is quiet, a backfill of a live job has completed and every occurrence in its range reached a "
    "terminal state",
    13: "a tenant's dispatch budget holds: no release window of its calendar lets more through than its capacity",
    14: "the watermark never moves past a minute with a bucket that is not done",
    15: "a flow-control key never has more calls running at its destination than its parallelism",
}


@dataclass(frozen=True)
class Violation:
    invariant: int
    message: str

    def __str__(self) -> str:
        return f"({self.invariant}) {INVARIANTS[self.invariant]}: {self.message}"


def instant(at: datetime | None) -> str:
    """An instant as the violations write it (`-` for none)."""
    return rfc3339(at) if at is not None else "-"


def span(instants: list[datetime]) -> str:
    """A run of occurrences: the one, or how many and the first and last."""
    if len(instants) == 1:
        return instant(instants[0])
    return f"{len(instants)} occurrences {instant(instants[0])} .. {instant(instants[-1])}"
