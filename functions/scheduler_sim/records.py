"""What a simulated run is set up with and what it records: the system's settings, the client's record of
each job and its acknowledged changes, the core's decisions the checker judges, and the result of a seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from scheduler.composition import Configs
from scheduler.core.execution.executor import ExecuteConfig
from scheduler.core.execution.packing import PackingConfig
from scheduler.core.execution.recovery import HoldConfig
from scheduler.core.model.job import Job
from scheduler.core.ports import OutcomeEvent
from scheduler.core.sweep.backfill import BackfillConfig
from scheduler.core.sweep.dispatch import DispatchConfig
from scheduler.core.sweep.sweeper import SweepConfig
from scheduler.core.tenancy.concurrency import ConcurrencyConfig
from scheduler.core.tenancy.fairness import FairnessConfig
from scheduler.settings import Settings
from scheduler_sim.faults import FaultProfile
from scheduler_sim.invariants import Violation
from scheduler_sim.workload import CallKind

Event = tuple[datetime, str, str]

#: Occurrences per backfill wave in the simulation.
BACKFILL_WAVE = 5
#: The occurrence lease the functions deploy (their default).
DEPLOYED_LEASE = timedelta(seconds=Settings.model_fields["lease_seconds"].default)


@dataclass(frozen=True)
class SimConfig:
    """The system's settings in the simulation (production defaults where they matter to the protocol)."""

    lookahead: timedelta = timedelta(seconds=300)
    misfire_grace: timedelta = timedelta(seconds=60)
    catchup_window: timedelta = timedelta(days=1)
    bucket_lease: timedelta = timedelta(seconds=120)
    lease: timedelta = DEPLOYED_LEASE
    #: The background heartbeat's period, as a fraction of the lease (the deployed one: `ExecuteConfig`'s default).
    heartbeat_fraction: float | None = ExecuteConfig.heartbeat_fraction
    #: >= 6x the worker timeout, as docs/design.md §2 asks.
    visibility_timeout: float = 360.0
    sweep_every: float = 60.0
    quiet: timedelta = timedelta(minutes=10)
    max_steps: int = 20_000
    #: Sweepers (concurrent invocations) in the active phase; None: drawn per seed, 1-3. Set, the seed's own draw is
    #: still made (and dropped), so the rest of the run draws as it would.
    sweepers: int | None = None

    def core(
        self,
        shards: int,
        seal_margin: timedelta,
        packing: PackingConfig,
        fairness: FairnessConfig | None,
        concurrency: ConcurrencyConfig,
    ) -> Configs:
        """The configuration the actors compose the real core with (`scheduler.composition.compose`)."""
        return Configs(
            # Every page lands on time here, however small (the deployed threshold is a cost choice; the mechanism's
            # timing and crash-safety are what a run proves).
            dispatch=DispatchConfig(
                self.lookahead,
                self.misfire_grace,
                self.catchup_window,
                seal_margin=seal_margin,
                landing_min_messages=1,
            ),
            sweep=SweepConfig(
                shard_count=shards,
                lookahead=self.lookahead,
                bucket_lease=self.bucket_lease,
                dispatch_budget=1000,
                safety=timedelta(seconds=20),
            ),
            # Completion events for the jobs that ask (`events: true`); the others get the deployed default (off).
            execute=ExecuteConfig(
                lease=self.lease,
                heartbeat_fraction=self.heartbeat_fraction,
                misfire_grace=self.misfire_grace,
                events_by_default=False,
            ),
            # Waves of a few occurrences (500 deployed: the rate a backfill drains at, not a margin), so the sim's
            # small backfills take several sweeps: a wave's cursor meets crashes, races and the dispatch budget.
            backfill=BackfillConfig(wave_size=BACKFILL_WAVE),
            hold=HoldConfig(renew_fraction=None),
            packing=packing,
            fairness=fairness,
            concurrency=concurrency,
            max_active_jobs=100,
            forecast_lookback=self.lookahead,
        )


@dataclass
class Change:
    """An acknowledged API call that returned the job: first attempted at `started`, acknowledged at `acked`."""

    kind: CallKind
    started: datetime
    acked: datetime
    job: Job


@dataclass
class JobRecord:
    """What the client knows about one workload job: the acknowledged changes, in order."""

    index: int
    description: str
    job_id: str | None = None
    changes: list[Change] = field(default_factory=list)
    cancel_acked: datetime | None = None
    triggers: list[tuple[str, datetime]] = field(default_factory=list)
    #: First attempt of a call whose outcome the client never learnt (it failed, and its retry was refused
    #: because the first attempt had taken effect and the job moved on): its eras are not judged from here.
    uncertain_from: datetime | None = None


@dataclass(frozen=True)
class VersionChange:
    """An acknowledged change of version and what it sent: `resent` messages of older versions (allowed only when
    the chain's last plan was open - its next timer not stored - at some point during the call)."""

    job_index: int
    kind: str
    version: int
    resent: int
    sent: int
    plan_open: bool


@dataclass(frozen=True)
class Misfire:
    """A misfire decision the core made and wrote: a chain timer found late, `skipped` occurrences skipped."""

    version: int
    policy: str
    scheduled_for: datetime
    fire_at: datetime
    dispatched_for: datetime
    skipped: int
    now: datetime  # the deciding actor's clock


@dataclass(frozen=True)
class InvalidOutcome:
    name: str
    outcome: str  # "rejected: <error>", "accepted" or "error: <unexpected exception>"
    changed: bool
    must_reject: bool


@dataclass(frozen=True)
class Abandoned:
    """Messages a worker held, with their hold applied, when its step ended without settling them (a crash, or
    a failed invocation): each must be received again within the hold time."""

    at: datetime
    actor: str
    message_ids: tuple[str, ...]
    keys: tuple[str, ...]
    #: Per message: whether the dead worker had claimed its occurrence (its own heartbeat may have extended the
    #: message to the lease; the next worker waits for that lease anyway).
    started: tuple[bool, ...] = ()


@dataclass
class SimResult:
    """The outcome of one seed."""

    seed: int
    violations: list[Violation]
    events: list[Event]
    profile: FaultProfile
    stats: dict[str, int]

    @property
    def ok(self) -> bool:
        return not self.violations


Fate = Literal["ok", "retryable", "throttled", "permanent", "timeout-before", "timeout-after", "pause", "slow"]
Verdict = Literal["accepted", "duplicate", "stale"]


@dataclass
class RawCall:
    """One call that reached the target."""

    at: datetime  # true time
    actor: str
    key: str
    job_id: str
    scheduled_for: datetime
    token: int
    attempt: int
    delivery: str
    job_read_at: datetime | None  # true time of the worker's last read of the job before this call
    fate: Fate
    reached: bool = False  # the call got to the point of acting (a target without dedupe would have acted)
    verdict: Verdict | None = None


@dataclass(frozen=True)
class Published:
    at: datetime  # true time
    actor: str
    event: OutcomeEvent
