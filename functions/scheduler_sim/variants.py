"""Deliberately broken protocols. The simulator must catch each of them: a checker that passes these would
be passing anything."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import partial
from typing import Any

from scheduler.adapters import memory
from scheduler.core.errors import Fenced
from scheduler.core.execution.events import Outbox, outcome_events
from scheduler.core.execution.executor import Outcome, Why
from scheduler.core.execution.packing import MessageRunner
from scheduler.core.model.job import JobState, RunState
from scheduler.core.ports import (
    Advance,
    AdvanceResult,
    AttemptEnd,
    Backfill,
    BucketBusy,
    BucketClaim,
    BucketId,
    BudgetCalendar,
    Dispatch,
    Execution,
    MessageControl,
    TaskPool,
    Timer,
)
from scheduler.core.tenancy.fairness import Admitted, TenantAdmission
from scheduler_sim.actors import SeededOrder


class UnfencedLedger(memory.MemoryLedger):
    """BROKEN on purpose: `finish` records the outcome without its `epoch = e AND owner = me` condition, so
    a worker that paused past its lease can overwrite the outcome written by the worker that took over.

    It runs the real `finish` as if the caller held the lease (an unconditional write), then puts the item's
    owner and epoch back: an update without a condition does not change who holds the occurrence."""

    def finish(self, key: str, owner: str, epoch: int, now: datetime, end: AttemptEnd) -> Any:
        with self.lock:
            item = self.items.get(key)
            if item is None:
                raise Fenced(key)
            held = item.owner, item.epoch
            item.owner, item.epoch, item.state = owner, epoch, RunState.RUNNING
            try:
                return super().finish(key, owner, epoch, now, end)
            finally:
                item.owner, item.epoch = held


class CopiesNeverVoid(memory.MemoryLedger):
    """BROKEN on purpose: `void_copies` records nothing, so a one-shot occurrence's worker keeps running on the copy
    of the job its message carries after a cancel or an edit was acknowledged."""

    def void_copies(self, key: str, now: datetime) -> None:
        return None


@dataclass(frozen=True)
class RandomKeyDispatch(Dispatch):
    """BROKEN on purpose: the occurrence key is a fresh random value per attempt instead of being derived from
    the job and the scheduled instant, so neither the ledger nor the target can recognise a repeat."""

    nonce: str = ""

    @property
    def key(self) -> str:
        return f"{self.job_id}:{self.nonce}"


def random_key_per_attempt(dispatch: Dispatch, rng: random.Random) -> Dispatch:
    return RandomKeyDispatch(
        dispatch.job_id,
        dispatch.tenant,
        dispatch.scheduled_for,
        dispatch.fire_at,
        dispatch.version,
        dispatch.kind,
        nonce=f"{rng.getrandbits(64):016x}",
    )


class ForgetfulCheckpoint(memory.MemoryTimerStore):
    """A bucket checkpoint that records progress but drops the quota releases it was handed: the jobs a sweep
    completes keep counting against their tenant's quota."""

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        super().checkpoint(claim, cursor, lease_until, None)


class FinishAtEveryPage(memory.MemoryTimerStore):
    """BROKEN on purpose: every page's checkpoint marks the bucket done, as only its last page's may (pages of 2
    here, so that buckets have several): the timers after a bucket's first page are never swept."""

    page_size = 2

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        with self.lock:
            super().checkpoint(claim, cursor, lease_until, releases)
            self.buckets[claim.bucket].done = True


class WatermarkFirstFinisher(memory.MemoryTimerStore):
    """BROKEN on purpose: a sweep counts a bucket that another invocation holds as done, so the watermark moves past
    a minute as soon as the first invocation to finish its own buckets of it is done, while the others are still
    sweeping theirs (a fan-out whose watermark follows the first finisher instead of the minute's barrier). A
    sweeper that dies holding its bucket leaves it behind the watermark, where no sweep looks again."""

    def claim_bucket(
        self, bucket: BucketId, owner: str, now: datetime, lease_until: datetime
    ) -> BucketClaim | BucketBusy:
        claim = super().claim_bucket(bucket, owner, now, lease_until)
        if isinstance(claim, BucketBusy) and not claim.done:
            return BucketBusy(done=True)
        return claim


class ShardFenceIgnored(memory.MemoryTimerStore):
    """BROKEN on purpose: a sweep moves the watermark whatever shard count was recorded since it read it, so a timer
    that a writer with a raised count puts into a bucket the sweep never looked at can fall behind the watermark,
    where no sweep looks again (runs with the shard count raised half way through a deploy)."""

    def advance_watermark(self, minute: datetime, swept_shards: int | None = None) -> None:
        with self.lock:
            if self.marks.watermark is None or minute > self.marks.watermark:
                self.marks.watermark = minute


class ReleaseOnEveryReplay(memory.MemoryJobStore):
    """Owes a quota release whenever a timer replays the advance that completed its job, whoever made that advance:
    a one-shot job completed from the late lane (whose write released it) is released again by its bucket's sweep,
    and so is a page re-run after its checkpoint."""

    def advance(self, timer: Timer, step: Advance) -> AdvanceResult:
        result = super().advance(timer, step)
        job = self.jobs.get(timer.job_id)
        replayed = result.proceed and not result.release and step.release_by is not None
        if (
            replayed
            and job is not None
            and job.state == JobState.COMPLETED
            and job.advanced_from == timer.scheduled_for
        ):
            return replace(result, release=True)
        return result


class DoneWithoutWaiting(SeededOrder):
    """BROKEN on purpose: the sweep's TaskPool runs a minute's buckets but reports each done whatever it returned
    (a sweep that awaits its threads and drops their results): the watermark then passes a minute whose bucket
    another sweeper holds, a crash left half-swept or the budget left for later - and no sweep returns to it."""

    def run_all(self, tasks: Sequence[Callable[[], Any]]) -> list[Any]:
        super().run_all(tasks)
        return [True] * len(tasks)


class OverbookedSlots(memory.MemoryTenantSlots):
    """BROKEN on purpose: an execution slot is taken whoever holds it (the slot's put without its "free or lease
    ended" condition), so a tenant with an execution budget runs more occurrences at once than its limit."""

    def acquire(self, tenant: str, limit: int, holder: str, now: datetime, lease_until: datetime) -> int | None:
        with self.lock:
            slot = sum(holder.encode()) % limit
            self.held[(tenant, slot)] = (holder, lease_until)
            return slot


class UnconditionalBudgets(memory.MemoryTenantBudgets):
    """BROKEN on purpose: a tenant's calendar is saved without its version condition, so of two sweepers booking at
    once the later write erases the other's bookings, and a window lets more releases through than it holds."""

    def save(self, tenant: str, calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
        with self.lock:
            current = self.calendars.get(tenant)
            return super().save(tenant, calendar, current.version if current is not None else None, expires)


class _BrokenAdmission(TenantAdmission):
    """A broken tenant admission, put in place of an actor's own (`Variant.admission`)."""

    @classmethod
    def instead_of(cls, admission: TenantAdmission) -> TenantAdmission:
        return cls(admission.budgets, admission.clock, admission.config, admission.metrics)


class DropDeferred(_BrokenAdmission):
    """BROKEN on purpose: what the budget cannot release within SQS's horizon is dropped instead of going back to
    the time buckets as deferred timers (a tenant over its budget is delayed, never dropped)."""

    def admit(self, dispatches: Sequence[Dispatch]) -> Admitted:
        return Admitted(super().admit(dispatches).sent, [])


class DoneAtFirstWave(memory.MemoryBackfillStore):
    """BROKEN on purpose: the first wave's cursor write marks the backfill completed, whatever is left of its range
    (the waves after it are never sent)."""

    def advance(self, backfill: Backfill, cursor: datetime, dispatched: int, done: bool, now: datetime) -> bool:
        return super().advance(backfill, cursor, dispatched, True, now)


class ClearBeforePublish(Outbox):
    """BROKEN on purpose: the outbox is cleared before its events are published, so a publish that fails (or a
    crash between the two) loses the completion event."""

    @classmethod
    def instead_of(cls, outbox: Outbox) -> Outbox:
        return cls(outbox.ledger, outbox.publisher, outbox.metrics, outbox.clock, outbox.settle)

    def _publish_and_clear(self, executions: Sequence[Execution]) -> int:
        for execution in executions:
            self.ledger.clear_outbox(execution.key, execution.outbox)
        events = [event for execution in executions for event in outcome_events(execution)]
        self.publisher.publish(events)
        return len(events)


class DropsKeptOccurrences(MessageRunner):
    """BROKEN on purpose: a message of several occurrences is acknowledged once each has run, without sending again
    the ones the executor would keep (a retry's backoff, another worker's live lease, a throttled tenant): those
    are lost with the message."""

    @classmethod
    def instead_of(cls, runner: MessageRunner) -> MessageRunner:
        return cls(runner.executor, runner.queue, runner.clock, runner.metrics, runner.pool, runner.bind)

    def run(self, dispatches: Sequence[Dispatch], message: MessageControl) -> Outcome:
        if len(dispatches) == 1:
            return super().run(dispatches, message)
        self.pool.run_all([partial(self.executor.execute, dispatch, message) for dispatch in dispatches])
        return Outcome.acknowledge(Why.SETTLED, "kept ones dropped")


@dataclass(frozen=True)
class Variant:
    """A change to the protocol under test: a different store (ledger, timers, jobs, execution slots, budget
    calendars, backfills), tenant admission or outbox, a rewrite of each received dispatch, or a different bucket
    pool."""

    name: str
    description: str
    ledger: Callable[[memory.Snapshot], memory.MemoryLedger] = memory.MemoryLedger
    rewrite: Callable[[Dispatch, random.Random], Dispatch] | None = None
    timers: Callable[[int], memory.MemoryTimerStore] = memory.MemoryTimerStore
    jobs: Callable[[memory.MemoryTimerStore], memory.MemoryJobStore] = memory.MemoryJobStore
    slots: Callable[[], memory.MemoryTenantSlots] = memory.MemoryTenantSlots
    #: The flow-control keys' slots.
    flow_slots: Callable[[], memory.MemoryTenantSlots] = memory.MemoryTenantSlots
    budgets: Callable[[], memory.MemoryTenantBudgets] = memory.MemoryTenantBudgets
    backfills: Callable[[], memory.MemoryBackfillStore] = memory.MemoryBackfillStore
    #: Replaces each actor's tenant admission (dispatch budgets), when the run has budgets.
    admission: Callable[[TenantAdmission], TenantAdmission] | None = None
    #: Replaces each actor's completion-event outbox.
    outbox: Callable[[Outbox], Outbox] | None = None
    #: False: the worker never shortens its batch's visibility (a dead worker's batch waits out the timeout).
    batch_hold: bool = True
    #: The sweep's TaskPool over a minute's buckets, from its own seeded stream (None: the simulator's own).
    buckets: Callable[[random.Random], TaskPool] | None = None
    #: Replaces each worker's runner of a message's occurrences.
    runner: Callable[[MessageRunner], MessageRunner] | None = None
    #: Every run has a deploy that raised the shard count half done (otherwise a third of the runs).
    shard_change: bool = False


VARIANTS: dict[str, Variant] = {
    "unfenced-finish": Variant(
        "unfenced-finish",
        "Ledger.finish ignores the epoch/owner condition (a stale worker's completion is accepted)",
        ledger=UnfencedLedger,
    ),
    "copies-never-void": Variant(
        "copies-never-void",
        "a change of a one-shot job after its sweep does not void the copy of the job its message carries",
        ledger=CopiesNeverVoid,
    ),
    "no-batch-hold": Variant(
        "no-batch-hold",
        "the worker leaves the queue's visibility timeout on its batch (no visibility change to the hold time)",
        batch_hold=False,
    ),
    "random-key": Variant(
        "random-key",
        "the worker uses a random occurrence key per attempt instead of the derived one",
        rewrite=random_key_per_attempt,
    ),
    "forgetful-checkpoint": Variant(
        "forgetful-checkpoint",
        "the sweeper's page checkpoint drops the quota releases of the jobs the page completed",
        timers=ForgetfulCheckpoint,
    ),
    "finish-at-every-page": Variant(
        "finish-at-every-page",
        "a bucket sweep's every page checkpoint marks the bucket done, not only its last page's",
        timers=FinishAtEveryPage,
    ),
    "done-without-waiting": Variant(
        "done-without-waiting",
        "a sweep counts every bucket of a minute done once it ran, whatever it returned (the watermark passes it)",
        buckets=DoneWithoutWaiting,
    ),
    "shard-fence-ignored": Variant(
        "shard-fence-ignored",
        "a sweep moves the watermark even after a writer recorded more shards than it swept (a deploy raising it)",
        timers=ShardFenceIgnored,
        shard_change=True,
    ),
    "watermark-first-finisher": Variant(
        "watermark-first-finisher",
        "a bucket another sweeper holds counts as done: the watermark moves when the first invocation is done",
        timers=WatermarkFirstFinisher,
    ),
    "overbooked-slots": Variant(
        "overbooked-slots",
        "a tenant's execution slot is taken whoever holds it (its condition dropped): more run than the limit",
        slots=OverbookedSlots,
    ),
    "overbooked-flow-slots": Variant(
        "overbooked-flow-slots",
        "a flow-control key's slot is taken whoever holds it (its condition dropped): more run than its parallelism",
        flow_slots=OverbookedSlots,
    ),
    "unconditional-budget-save": Variant(
        "unconditional-budget-save",
        "a tenant's dispatch-budget calendar is saved without its version condition (racing bookings overwrite)",
        budgets=UnconditionalBudgets,
    ),
    "drop-deferred": Variant(
        "drop-deferred",
        "the tenant admission drops what its dispatch budget holds back past SQS's horizon instead of deferring it",
        admission=DropDeferred.instead_of,
    ),
    "done-at-first-wave": Variant(
        "done-at-first-wave",
        "a backfill is marked completed by its first wave's cursor write (the rest of its range is never sent)",
        backfills=DoneAtFirstWave,
    ),
    "clear-before-publish": Variant(
        "clear-before-publish",
        "the completion-event outbox is cleared before its events are published (a failed publish loses them)",
        outbox=ClearBeforePublish.instead_of,
    ),
    "drops-kept-occurrences": Variant(
        "drops-kept-occurrences",
        "a message of several occurrences is acknowledged without sending again the occurrences the worker keeps",
        runner=DropsKeptOccurrences.instead_of,
    ),
    "release-on-every-replay": Variant(
        "release-on-every-replay",
        "a bucket sweep releases the quota of every completed job it replays, not only of those it completed",
        jobs=ReleaseOnEveryReplay,
    ),
}
