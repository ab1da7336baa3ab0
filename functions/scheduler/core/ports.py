"""The ports: what the core needs from the outside world (the records they exchange are in `scheduler.core.records`,
the stores that keep its state in `scheduler.core.stores`, both re-exported here).

Adapters implement them for DynamoDB and SQS (`scheduler.adapters.dynamodb`, `scheduler.adapters.sqs`) and in
memory (`scheduler.adapters.memory`); one contract test suite runs against every implementation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, Protocol, TypeVar

from scheduler.core.records import (
    ALL_RUNS,
    HOLD_REASONS,
    Advance,
    AdvanceResult,
    Attempt,
    AttemptEnd,
    Backfill,
    Between,
    BucketBusy,
    BucketClaim,
    BucketId,
    BudgetCalendar,
    ChainPlan,
    Dispatch,
    Execution,
    FlowKeyState,
    HistoryEntry,
    Hold,
    HoldReason,
    IdempotencyRecord,
    NewJob,
    OutboxEntry,
    OutcomeEvent,
    TargetCall,
    Timer,
    TimerKind,
)
from scheduler.core.stores import (
    BackfillStore,
    FanOutRecord,
    FanOutStore,
    FlowControlStore,
    JobReader,
    JobStore,
    Ledger,
    TenantBudgetStore,
    TenantSlots,
    TimerStore,
)

__all__ = [
    "ALL_RUNS",
    "HOLD_REASONS",
    "Advance",
    "AdvanceResult",
    "Attempt",
    "AttemptEnd",
    "Backfill",
    "BackfillStore",
    "BatchVisibility",
    "Beating",
    "Between",
    "BucketBusy",
    "BucketClaim",
    "BucketId",
    "BudgetCalendar",
    "ChainPlan",
    "Clock",
    "Dispatch",
    "EventPublisher",
    "Execution",
    "FanOutRecord",
    "FanOutStore",
    "FlowControlStore",
    "FlowKeyState",
    "Heartbeats",
    "HistoryEntry",
    "Hold",
    "HoldReason",
    "IdempotencyRecord",
    "Ids",
    "JobReader",
    "JobStore",
    "Ledger",
    "MessageControl",
    "Metrics",
    "NewJob",
    "OutboxEntry",
    "OutcomeEvent",
    "PollerControl",
    "ReadyQueue",
    "TargetCall",
    "TargetFailure",
    "TargetInvoker",
    "TaskPool",
    "TenantBudgetStore",
    "TenantSlots",
    "Timer",
    "TimerKind",
    "TimerStore",
]


T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, aware UTC."""
        ...


class TaskPool(Protocol):
    """Runs independent tasks, possibly at once (the sweep's buckets of one minute). Returns their results in
    the tasks' order once all have finished; if any raised, raises one of those errors after all have finished."""

    def run_all(self, tasks: Sequence[Callable[[], T]]) -> list[T]: ...


class Ids(Protocol):
    """Where the core's identifiers come from: random in production (`scheduler.core.runtime.ids.RandomIds`), drawn from
    a seed in the simulator, so that a run is a pure function of its seed. Ids decide shards, jitter and the order of
    timers, so a replay needs them all from one source."""

    def job_id(self) -> str:
        """A new job's id: unique among all jobs (32 hex characters in production)."""
        ...

    def token(self) -> str:
        """12 hex characters that no other caller draws: the tail of an attempt's owner (so even the same worker's
        earlier attempt is fenced) and of a backfill's id."""
        ...


class EventPublisher(Protocol):
    """The completion-event bus (EventBridge on AWS and locally on the moto server)."""

    def publish(self, events: Sequence[OutcomeEvent]) -> None:
        """Put every event on the bus. Returns only when all were accepted; raises EventPublishFailed otherwise
        (the outbox keeps them, and the next attempt publishes them again)."""
        ...


class ReadyQueue(Protocol):
    """The SQS ready queue (and its DLQ) as the core sees it."""

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        """Send each dispatch with `DelaySeconds = clamp(fire_at - now, 0, 900)`, in batches. Rounded down: a message
        arrives at most a second early and the worker waits out the rest, so precision stays sub-second and no
        occurrence ever starts before its fire time.
        Returns only when every message was accepted; raises otherwise (the caller re-runs)."""
        ...

    def dead_letter(self, dispatch: Dispatch, execution: Execution) -> None:
        """Put the occurrence, with its attempt history, on the dead-letter queue: the dispatch without its copy of
        the job (`Dispatch.job_copy`; operators read the DLQ, and a redriven occurrence reads its job)."""
        ...


class PollerControl(Protocol):
    """The worker event source mappings' provisioned pollers, one mapping per priority lane (Lambda's
    UpdateEventSourceMapping on AWS; the local worker pool locally)."""

    def lanes(self) -> list[str]:
        """The lanes whose pollers this controls."""
        ...

    def minimum_pollers(self, lane: str) -> int | None:
        """The lane mapping's MinimumPollers now (None: not in provisioned mode)."""
        ...

    def set_minimum_pollers(self, lane: str, pollers: int) -> bool:
        """Set it; False when the mapping is busy with another update (try again at the next sweep)."""
        ...


class MessageControl(Protocol):
    """The one SQS message the worker is handling."""

    receive_count: int

    def extend_visibility(self, seconds: int) -> None: ...


class BatchVisibility(Protocol):
    """The visibility of the messages of one batch a worker received (SQS: ChangeMessageVisibilityBatch)."""

    def hold(self, message_ids: Sequence[str], seconds: int) -> list[str]:
        """Hide these messages of the batch for `seconds` from now, in as few requests as the queue allows (one
        per 10 messages and lane on SQS). Returns the ids it could not hold (deleted, received again elsewhere,
        or refused); raises if the queue could not be reached at all."""
        ...


class Beating(Protocol):
    """A heartbeat that `Heartbeats.start` started."""

    def stop(self) -> None:
        """Stop beating. When this returns no beat is in flight and none starts any more."""
        ...


class Heartbeats(Protocol):
    """Beats in the background while the caller works: a lease extended while a target runs, a batch's hold renewed
    while a worker works through it (a thread per heartbeat in production: `scheduler.adapters.heartbeat`)."""

    def start(self, beat: Callable[[], bool], every: float) -> Beating:
        """Call `beat` every `every` seconds, the first time `every` seconds from now, until it returns False or
        the heartbeat is stopped. `beat` may run concurrently with the caller; it never raises."""
        ...


class TargetFailure(Exception):
    """A failed target call, classified (docs/design.md §3.4 step 6)."""

    def __init__(
        self,
        kind: Literal["retryable", "permanent", "ambiguous"],
        message: str,
        retry_after: float | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.retry_after = retry_after
        #: The HTTP status of the response that failed the call (None: not an HTTP response).
        self.status = status


class TargetInvoker(Protocol):
    def invoke(self, call: TargetCall) -> str | None:
        """Run the target once; return a short result summary, or raise TargetFailure."""
        ...


class Metrics(Protocol):
    def count(self, name: str, value: float = 1, unit: str = "Count") -> None: ...


@dataclass(frozen=True)
class HelperSweep:
    """One more sweep a tick starts beside itself (`scheduler.core.capacity.fan_out`): it sweeps buckets only."""

    tick: str
    index: int
    sweeps: int


class SweepLauncher(Protocol):
    """Starts a sweep in another invocation, without waiting for it (on AWS: an asynchronous invoke of the sweeper
    function). Raises when the start was refused; a started sweep that then fails is the next tick's to redo."""

    def launch(self, helper: HelperSweep) -> None: ...


class SealFailed(Exception):
    """A sealed value that cannot be opened: tampered with, bound to another job, or sealed under another key."""


class SecretSealer(Protocol):
    """Encrypts secrets at rest (envelope encryption): what `seal` returns is opaque text that only `open` turns
    back into the plaintext, and only with the same `context` (the job it belongs to), so a sealed value copied to
    another job does not open."""

    def seal(self, plaintext: bytes, context: Mapping[str, str]) -> str: ...

    def open(self, sealed: str, context: Mapping[str, str]) -> bytes:
        """The plaintext; SealFailed when `sealed` was not sealed under this sealer's key with this `context`."""
        ...
