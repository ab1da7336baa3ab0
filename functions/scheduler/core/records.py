"""The records the core and its ports exchange: timers, dispatches, executions, backfills, outbox entries and
the other values a store reads and writes (frozen dataclasses, free of any adapter)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from typing import Any, Literal

from scheduler.core.model.flow import FlowControl
from scheduler.core.model.job import BackfillState, Job, JobState, MisfirePolicy, Priority, RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.schedules import Schedule
from scheduler.core.model.timefmt import rfc3339, to_ms

#: `scheduled`: an occurrence of the job's chain; `manual`: an extra one (trigger); `backfill`: an occurrence of a
#: past range materialised on request (its key is the normal occurrence key: anything that ran is not run again).
TimerKind = Literal["scheduled", "manual", "backfill"]


@dataclass(frozen=True)
class ChainPlan:
    """What the sweeper needs to advance a recurring chain without reading the job: a snapshot of the job's
    schedule and policies at the timer's version. The advance is conditional on that version, so a stale
    snapshot can never act."""

    schedule: Schedule
    anchor: datetime  # the job's created_at (anchors rate and delay schedules)
    jitter_seconds: int
    misfire_policy: MisfirePolicy


@dataclass(frozen=True)
class Occurrence:
    """One occurrence of a job, as both its timer and its ready-queue message carry it: which job, at which
    scheduled instant (its key), when it may start, from which version of the job, of what kind, in which lane."""

    job_id: str
    tenant: str
    scheduled_for: datetime
    fire_at: datetime
    version: int
    kind: TimerKind = "scheduled"
    #: The lane of the occurrence (the job's priority at that version).
    priority: Priority = "normal"
    #: The job's flow-control key at that version (scheduler.core.tenancy.flow_control), None without one: its
    #: release is booked in the key's calendar too. Kept in timers; a message leaves it out (the worker reads the
    #: key from the job it runs).
    flow_key: str | None = None

    @property
    def key(self) -> str:
        return occurrence_key(self.job_id, self.scheduled_for)

    def occurrence_fields(self) -> dict[str, Any]:
        """The occurrence's own fields (of a timer or a message), to build the other from."""
        return {f.name: getattr(self, f.name) for f in fields(Occurrence)}


@dataclass(frozen=True)
class Timer(Occurrence):
    """One pending occurrence, stored in the time bucket of its `fire_at` (or in the late lane).

    `plan` is None for manual triggers, which are extra occurrences outside the chain.
    """

    plan: ChainPlan | None = None
    #: A deferred timer: an occurrence its tenant's dispatch budget held back, due again at this instant. It lives in
    #: the bucket of this instant (not of `fire_at`); its chain has already moved on (`plan` is None).
    defer_until: datetime | None = None
    #: The first timer of a resumed chain: the previous version's plan already queued this chain's occurrences up to
    #: (not including) this instant; its first plan sends none of them that are not yet due.
    queued_until: datetime | None = None

    @property
    def due_at(self) -> datetime:
        """When the timer is due: its fire time, or when a deferred one may be tried again. Its bucket's minute."""
        return self.defer_until if self.defer_until is not None else self.fire_at

    @property
    def place(self) -> str:
        """The timer's place (and cursor) in its bucket: ordered by fire_at; job, scheduled instant, kind and version
        make it unique, so neither a manual trigger at the instant of a pending scheduled run nor an older version's
        timer written late (a sweep racing an edit) overwrites a chain's only link to its next occurrence."""
        return (
            f"{to_ms(self.fire_at):015d}#{self.job_id}#{to_ms(self.scheduled_for):015d}#{self.kind[0]}#{self.version}"
        )


@dataclass(frozen=True)
class BucketId:
    minute: datetime
    shard: int


@dataclass(frozen=True)
class BucketClaim:
    """A sweeper's hold on a bucket. `cursor` is where an earlier holder stopped (resume after it)."""

    bucket: BucketId
    owner: str
    epoch: int
    cursor: str | None = None


@dataclass(frozen=True)
class BucketBusy:
    """A bucket that cannot be claimed: already done, or held by another sweeper's live lease."""

    done: bool


@dataclass(frozen=True)
class Dispatch(Occurrence):
    """The ready-queue message body: everything the worker needs to find and run one occurrence."""

    #: Not released before this instant (its tenant's dispatch budget delayed it). Not part of the message: the
    #: queue holds it back (DelaySeconds); the worker only ever checks the fire time.
    not_before: datetime | None = None
    #: The job as the sweep's advance left it, sent with a one-shot job's occurrence so that the worker need not
    #: read it (docs/design.md §3.4). A change of the job after that advance voids the copy in the ledger first
    #: (`Ledger.void_copies`), and a claim made on a void copy is refused, so the worker reads the job then.
    job_copy: Job | None = field(default=None, compare=False, repr=False)

    @property
    def send_at(self) -> datetime:
        """When the message should become visible: its fire time, or later if its tenant's budget says so."""
        return self.fire_at if self.not_before is None else max(self.fire_at, self.not_before)

    def deferred_to(self, instant: datetime) -> Dispatch:
        return replace(self, not_before=instant)

    @classmethod
    def of(cls, timer: Timer) -> Dispatch:
        """The message of a timer's occurrence (a deferred timer's message is not released before its instant)."""
        return cls(**timer.occurrence_fields(), not_before=timer.defer_until)


@dataclass(frozen=True)
class IdempotencyRecord:
    tenant: str
    key: str
    request_hash: str
    job_id: str
    expires_at: datetime


@dataclass(frozen=True)
class NewJob:
    """What creating a job writes at once: the job, its first timer, its idempotency record (if the request carried
    a key), and whether the timer is near enough to need a late-lane copy until the seal check has settled it."""

    job: Job
    timer: Timer
    idempotency: IdempotencyRecord | None
    late: bool


@dataclass(frozen=True)
class Advance:
    """A chain's step past one of its timers, as `JobStore.advance` records it on the job."""

    #: The chain's next occurrence; None completes the chain (the job becomes COMPLETED).
    next_run_at: datetime | None
    #: The last occurrence the step covers (dispatched or skipped).
    dispatched_for: datetime
    #: Missed occurrences the misfire policy does not run.
    skipped: int = 0
    #: When, and up to which horizon, the step was planned: a replay re-plans with them to send exactly that.
    planned_at: datetime | None = None
    planned_horizon: datetime | None = None
    #: Completing releases the job's share of the quota with the caller's progress record (see JobStore.advance).
    release_by: str | None = None


@dataclass(frozen=True)
class AdvanceResult:
    """What the sweeper learnt from advancing a job past one of its timers."""

    proceed: bool  # the chain advanced from this timer, now or in an earlier run: send its plan, write its next timer
    put_next: bool  # write the next timer
    job_state: JobState | None
    #: (planned_at, planned_horizon) when this timer's advance happened in an earlier run that may have died before
    #: sending: re-plan with these to send exactly what it planned.
    replay: tuple[datetime, datetime] | None = None
    #: This timer's advance completed the job without releasing its share of the quota (`release_by`): the caller must
    #: release it with its progress record (a bucket sweep: in the page checkpoint). True on a replay too.
    release: bool = False
    #: The job as this advance wrote it, when it completed the chain with a plain write (`step.release_by`): what a
    #: one-shot occurrence's message carries (`Dispatch.job_copy`). None otherwise, and on a replay.
    job: Job | None = None


@dataclass(frozen=True)
class OutboxEntry:
    """One recorded terminal outcome of an occurrence, waiting on the ledger item to be published.

    The ledger appends it in the same conditional write that records the outcome (so a recorded outcome always
    has its entry), and `Ledger.clear_outbox` removes it once the event was accepted by the bus.
    `event_id` names the outcome: an occurrence can have several (RECONCILING, then SUCCEEDED once resolved;
    DEAD, then SUCCEEDED after a redrive), each with its own id.
    """

    event_id: str
    state: RunState
    epoch: int
    at: datetime
    error: str | None = None
    result: str | None = None


@dataclass(frozen=True)
class HistoryEntry:
    """One step in an occurrence's life, as its ledger item's history keeps it: the state it entered, at which
    attempt (epoch) and when, and why (the attempt's error, or an operator's note)."""

    #: A history entry keeps this much of its error (the item's `last_error` keeps the whole first 1,000).
    ERROR_CHARS = 500

    epoch: int
    state: RunState
    at: datetime
    error: str | None = None

    @classmethod
    def of(cls, epoch: int, state: RunState, at: datetime, error: str | None = None) -> HistoryEntry:
        return cls(epoch, state, at, error[: cls.ERROR_CHARS] if error else None)

    def view(self) -> dict[str, Any]:
        """The entry as the API, the CLI and a dead letter show it (JSON)."""
        shown: dict[str, Any] = {"epoch": self.epoch, "state": self.state.value, "at": rfc3339(self.at)}
        if self.error:
            shown["error"] = self.error
        return shown


#: Which of its flow-control key's limits held an occurrence back: `rate` (the key's calendar released it after its
#: fire time, or start pacing made it wait), `parallelism` (every slot of the key was held), `paused` (the key's
#: destination asked for a pause, `Retry-After`).
HoldReason = Literal["rate", "parallelism", "paused"]
HOLD_REASONS: tuple[HoldReason, ...] = ("rate", "parallelism", "paused")


@dataclass(frozen=True)
class Hold:
    """Why an occurrence started later than its fire time: its flow-control key `key` held it back
    (docs/flow-control.md, "What a held run shows"), from `since` (its fire time), for the `reasons` its key gave.
    Recorded on the run by its claim (a rate hold: the message carries the key's release) and, for a parallelism or
    pause hold, by one write when the hold begins (`Ledger.mark_held`), which the first claim keeps."""

    key: str
    since: datetime
    reasons: frozenset[HoldReason] = frozenset()

    @staticmethod
    def merged(first: Hold | None, then: Hold | None) -> Hold | None:
        """One hold of an occurrence from two records of it: the first's key, the earliest start, every reason."""
        if first is None or then is None:
            return first or then
        return Hold(first.key, min(first.since, then.since), first.reasons | then.reasons)

    def detail(self, until: datetime | None) -> str:
        """The hold as people read it: which key held the run, why, and since or for how long."""
        why = " and ".join(_HOLD_WHY[r] for r in HOLD_REASONS if r in self.reasons) or "its limits"
        if until is None:
            return f"waiting for flow-control key {self.key}: {why}, since {rfc3339(self.since)}"
        held = max(0.0, (until - self.since).total_seconds())
        return f"held by flow-control key {self.key} for {held:.1f} s: {why}"


_HOLD_WHY: dict[str, str] = {
    "rate": "its rate",
    "parallelism": "a slot of its parallelism",
    "paused": "its destination's pause",
}


@dataclass(frozen=True)
class Attempt:
    """A worker's attempt at an occurrence, as `Ledger.claim` starts it: who makes it, when, and until when its
    lease holds."""

    owner: str
    now: datetime
    lease_until: datetime
    #: Take over a RUNNING occurrence whose lease has expired (at-least-once jobs; at-most-once ones never do).
    take_over_expired: bool = False
    #: Keep the item in the run-history index (False: `Ledger.runs` finds it by its key).
    indexed: bool = True
    #: Made on the message's copy of the job (`Dispatch.job_copy`) rather than on a read of it: refused with
    #: `ClaimRefused.void_copy` once a change of the job has voided the copies of this occurrence.
    on_copy: bool = False
    #: What held the occurrence back before this attempt (its flow-control key's release): merged into the item's
    #: hold (its first key and start kept, the reasons added), with what `Ledger.mark_held` recorded before it.
    held: Hold | None = None


@dataclass(frozen=True)
class AttemptEnd:
    """How an attempt ends, as `Ledger.finish` records it: the state it leaves the occurrence in (RETRY_WAIT or a
    terminal one) and what goes with it."""

    state: RunState
    result: str | None = None
    error: str | None = None
    #: When a RETRY_WAIT occurrence may be claimed again.
    next_attempt_at: datetime | None = None
    #: Give the attempt back: a wait that ran nothing (an overlap buffer).
    refund_attempt: bool = False
    #: A terminal state appends its outbox entry (its completion event) in the same write, unless False.
    announce: bool = True
    #: The occurrence this one overlapped (overlap policy): it waits behind it (RETRY_WAIT, `buffered`) or was
    #: skipped for it (SKIPPED).
    overlapped: str | None = None
    #: Skipped because its job was paused (SKIPPED, "job paused"): the paused job's version. The resume may send the
    #: occurrence again (its misfire policy runs what fell due while the job was paused), and only a dispatch at a
    #: later version than this may reopen the record (`Ledger.claim`); a cancel or an overlap skip never sets it.
    paused_version: int | None = None

    @classmethod
    def buffered(cls, holder: str, now: datetime) -> AttemptEnd:
        """Parked behind the running (or about to run) occurrence `holder`: claimable at once, the attempt given
        back."""
        return cls(
            RunState.RETRY_WAIT,
            error=f"buffered behind {holder}",
            next_attempt_at=now,
            refund_attempt=True,
            overlapped=holder,
        )


@dataclass(frozen=True)
class Between:
    """What part of a job's run history to read: the runs scheduled strictly after `after` and strictly before
    `before` (None: no bound on that side)."""

    after: datetime | None = None
    before: datetime | None = None


#: The whole run history.
ALL_RUNS = Between()


@dataclass
class Execution:
    """One ledger item: the state of one occurrence, keyed by its occurrence key."""

    key: str
    job_id: str
    tenant: str
    scheduled_for: datetime
    state: RunState
    epoch: int
    attempts: int
    owner: str | None = None
    lease_until: datetime | None = None
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    result: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    dead_lettered: bool = False
    history: list[HistoryEntry] = field(default_factory=list)
    #: Terminal outcomes recorded but not yet published as completion events (the transactional outbox).
    outbox: list[OutboxEntry] = field(default_factory=list)
    #: Set by the attempt's end (AttemptEnd.overlapped): the occurrence this one overlapped. Cleared by a claim.
    overlapped: str | None = None
    #: Set by a pause skip (AttemptEnd.paused_version): the version of the paused job that skipped it. A SKIPPED
    #: record with it is reopened by a claim from a dispatch at a later version (the resumed chain's), which clears it.
    paused_version: int | None = None
    #: What held the occurrence back before its first attempt: its flow-control key (None: nothing did).
    held: Hold | None = None

    @classmethod
    def unstarted(cls, dispatch: Dispatch, state: RunState, now: datetime, **fields: Any) -> Execution:
        """The first record of `dispatch`'s occurrence, made at `now`: no attempt yet (epoch 0), in `state`."""
        d = dispatch
        return cls(d.key, d.job_id, d.tenant, d.scheduled_for, state, epoch=0, attempts=0, created_at=now, **fields)

    def leased(self, now: datetime) -> bool:
        """Running, with a lease that has not ended at `now`."""
        return self.state == RunState.RUNNING and self.lease_until is not None and self.lease_until > now

    @property
    def buffered(self) -> bool:
        """Parked by the overlap policy behind a running occurrence (not a failed attempt waiting to retry)."""
        return self.state == RunState.RETRY_WAIT and self.overlapped is not None

    def reopened_by(self, dispatch: Dispatch) -> bool:
        """Skipped because its job was paused, and `dispatch` is from a later version of the job than the one that
        skipped it: the resumed chain sends it again, as its misfire policy says (a copy of the message that was
        skipped, or anything else at or below that version, finds it SKIPPED)."""
        paused = self.paused_version
        return self.state == RunState.SKIPPED and paused is not None and dispatch.version > paused

    @property
    def overlap_skipped(self) -> bool:
        """Skipped by the overlap policy because another occurrence was running (or about to)."""
        return self.state == RunState.SKIPPED and self.overlapped is not None


@dataclass(frozen=True)
class OutcomeEvent:
    """A completion event: one terminal outcome of one occurrence, as published to the event bus.

    Publishing is at-least-once: consumers dedupe on `event_id` (or on `occurrence_key` and `state`)."""

    event_id: str
    occurrence_key: str
    job_id: str
    tenant: str
    scheduled_for: datetime
    state: RunState
    fencing_token: int
    attempts: int
    finished_at: datetime
    error: str | None = None
    result: str | None = None


@dataclass(frozen=True)
class Backfill:
    """A request to materialise a recurring job's occurrences in [range_from, range_to), drained in waves by the
    sweeper. `cursor` is the last occurrence dispatched (None before the first wave): the backfill itself is the
    durable record of what is left, as a timer is for one occurrence."""

    backfill_id: str
    job_id: str
    tenant: str
    range_from: datetime
    range_to: datetime
    plan: ChainPlan  # the schedule at the job's version when the backfill was requested
    version: int
    total: int
    state: BackfillState
    created_at: datetime
    updated_at: datetime
    dispatched: int = 0
    waves: int = 0
    cursor: datetime | None = None

    @property
    def remaining(self) -> int:
        return 0 if self.state == BackfillState.CANCELLED else max(0, self.total - self.dispatched)


@dataclass(frozen=True)
class BudgetCalendar:
    """A tenant's booked releases (scheduler.core.tenancy.fairness): releases per window of `window_ms`, by window index
    (epoch ms // window_ms). `version` orders writes."""

    version: int
    window_ms: int
    booked: dict[int, int]
    #: Bookings released later than they asked, by the second of their release: (how many, the earliest instant
    #: one of them asked for, epoch ms). What a flow-control key's view reads as its backlog and oldest lateness.
    held: dict[int, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class FlowKeyState:
    """One flow-control key of a tenant as stored (scheduler.core.tenancy.flow_control): its limits (those of the
    most recent write naming it), its release calendar, and what its destination's feedback set: a pause, and the
    fraction of its rate it is held to (AIMD) since `factor_at`."""

    tenant: str
    limits: FlowControl
    updated_at: datetime
    calendar: BudgetCalendar | None = None
    paused_until: datetime | None = None
    rate_factor: float = 1.0
    factor_at: datetime | None = None
    #: The earliest instant the key's next call may start (its start pacing: the gap its rate allows).
    next_start: datetime | None = None


@dataclass(frozen=True)
class TargetCall:
    """What a target receives for one attempt."""

    job: Job
    occurrence_key: str
    scheduled_for: datetime
    attempt: int
    fencing_token: int
    heartbeat: Callable[[], None]
    deadline: datetime
