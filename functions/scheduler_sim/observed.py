"""What the invariant checker reads of a run (`checker`, `recurrence`), handed to it by the simulation once the run
is over: the stores as they ended, what the target saw, the queue's receives and polls, the bus's events, and what
the actors recorded on the way. The checker holds no simulation: it judges these values alone."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.adapters.memory import MemoryBackfillStore, MemoryJobStore, MemoryLedger, MemoryTimerStore
from scheduler.core.execution.executor import ExecuteConfig
from scheduler.core.execution.recovery import HoldConfig
from scheduler.core.ports import Clock, Dispatch
from scheduler.core.tenancy.fairness import FairnessConfig
from scheduler_sim.records import (
    Abandoned,
    InvalidOutcome,
    JobRecord,
    Misfire,
    Published,
    RawCall,
    SimConfig,
    VersionChange,
)


@dataclass(frozen=True)
class Observed:
    clock: Clock
    config: SimConfig
    execute_config: ExecuteConfig
    hold_config: HoldConfig
    fairness: FairnessConfig | None
    records: list[JobRecord]
    # the stores as the run left them
    jobs: MemoryJobStore
    timers: MemoryTimerStore
    ledger: MemoryLedger
    backfills: MemoryBackfillStore
    # the target: every call, the effects by (job, instant), the calls over a job's execution budget
    calls: list[RawCall]
    effects: dict[tuple[str, datetime], list[RawCall]]
    over_limit: list[str]
    #: Calls that began while their flow-control key already had `parallelism` others in progress.
    over_parallelism: list[str]
    # the ready queue: each message's receives, and each poll with whether it came back full
    receives: dict[str, list[datetime]]
    polls: list[tuple[datetime, bool]]
    # the completion-event bus
    published: list[Published]
    # what the actors recorded
    errors: list[str]
    stale_writes: list[str]
    invalid_outcomes: list[InvalidOutcome]
    first_send: dict[str, datetime]
    sent_dispatch: dict[str, Dispatch]
    misfires: dict[str, list[Misfire]]
    version_changes: list[VersionChange]
    releases: dict[str, list[tuple[datetime, str]]]
    abandoned: list[Abandoned]
    stalls: list[tuple[datetime, float]]
    watermark_passed: list[str]

    def event_ids(self) -> set[str]:
        return {p.event.event_id for p in self.published}
