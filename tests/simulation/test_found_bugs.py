"""Core bugs the simulator found, each reduced to a deterministic reproduction on the real core and the
in-memory adapters (no seeds, so they stay put while the code around them changes).

A bug still open is marked `xfail(strict=True)`: the suite stays green while it is open and turns red when it is
fixed; the ones here are fixed and run as plain regression tests. Among them: a chain's plan lost when the job
changes version (a pause, edit, cancel or resume) after a sweep advanced the chain but before it sent the plan. One
mechanism covers it: before any change of version the dispatcher makes sure the version's last plan was sent - its
next timer, written after its sends, is stored - and sends that plan again only when that proof is missing
(`Dispatcher.ensure_sent`), so a change of version neither replays plans across versions nor sends the whole
look-ahead again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.memory import (
    FakeClock,
    MemoryTenantBudgets,
    MemoryTimerStore,
    RecordingMetrics,
)
from scheduler.composition import Configs, Container, Stores, compose, memory_stores
from scheduler.core.jobs.service import JobService
from scheduler.core.model.job import Job, JobSpec
from scheduler.core.model.timefmt import to_ms
from scheduler.core.ports import BucketId, Clock, Dispatch, Execution, ReadyQueue, Timer, TimerStore
from scheduler.core.runtime.ids import RANDOM_IDS
from scheduler.core.sweep.sweeper import Sweeper
from scheduler.core.tenancy.fairness import Budget, FairnessConfig, TenantAdmission
from scheduler.settings import Settings
from scheduler_sim.faults import Crash
from scheduler_sim.faulty_ports import SkewedClock

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
TENANT = "tenant-a"
LOOKAHEAD = timedelta(seconds=300)


#: The production settings that matter here (5 min look-ahead, 60 s grace, a day's catch-up, 2 min bucket lease,
#: 20 s sweep safety), on one shard.
SETTINGS = Settings(
    shard_count=1,
    lookahead_seconds=int(LOOKAHEAD.total_seconds()),
    dispatch_budget=1000,
    max_active_jobs_per_tenant=10,
    tenant_dispatch_rate=0,
    completion_events=False,
)
_DERIVED = Configs.of(SETTINGS)
#: Sends at once (no landing wait).
CONFIGS = replace(_DERIVED, dispatch=replace(_DERIVED.dispatch, landing_window=None))


class SkewableCore:
    """The core composed over memory stores at `SETTINGS`; services and sweepers may see their own clock, timers or
    queue (a skewed clock, a store that dies)."""

    def __init__(self, start: datetime = T0) -> None:
        self.clock = FakeClock(start)
        stores = memory_stores(self.clock)
        self.jobs, self.timers, self.ledger, self.queue = stores.jobs, stores.timers, stores.ledger, stores.queue
        self.metrics = RecordingMetrics()

    def core(
        self, clock: Clock | None = None, timers: TimerStore | None = None, queue: ReadyQueue | None = None
    ) -> Container:
        stores = Stores(self.jobs, timers or self.timers, self.ledger, queue or self.queue)
        return compose(SETTINGS, stores, clock or self.clock, RANDOM_IDS, self.metrics, configs=CONFIGS)

    def service(self, clock: Clock | None = None) -> JobService:
        return self.core(clock).job_service()

    def sweeper(
        self,
        owner: str,
        *,
        clock: Clock | None = None,
        timers: TimerStore | None = None,
        queue: ReadyQueue | None = None,
    ) -> Sweeper:
        return self.core(clock, timers, queue).sweeper(owner)

    def create(self, schedule: dict[str, Any], clock: Clock | None = None) -> Job:
        body = {"schedule": schedule, "target": {"type": "handler", "name": "sink"}, "misfire_policy": "run_all"}
        return self.service(clock).create(TENANT, JobSpec.model_validate(body), None, body).job

    def sweep_every_minute(self, sweeper: Sweeper, minutes: int) -> None:
        for _ in range(minutes):
            sweeper.sweep(sweeper.clock.now() + timedelta(seconds=60))
            self.clock.advance(60)

    def sent(self, job: Job) -> set[datetime]:
        """Every occurrence of `job` ever sent (nothing consumes the queue here)."""
        return {m.dispatch.scheduled_for for m in self.queue.messages.values() if m.dispatch.job_id == job.job_id}


def minutes(first: datetime, count: int) -> list[datetime]:
    return [first + timedelta(minutes=n) for n in range(count)]


class DiesOnSend:
    """A sweeper's ready queue whose process is killed when it sends."""

    def __init__(self, inner: ReadyQueue) -> None:
        self.inner = inner

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        raise Crash("the sweeper is killed before SendMessageBatch")

    def dead_letter(self, dispatch: Dispatch, execution: Execution) -> None:
        self.inner.dead_letter(dispatch, execution)


def test_a_sweeper_killed_between_advancing_a_chain_and_sending_loses_no_occurrence() -> None:
    # Given a job every minute from 09:04
    world = SkewableCore()
    job = world.create({"type": "rate", "every_seconds": 60, "start_at": "2026-01-05T09:04:00Z"})

    # When the sweeper that plans 09:04-09:06 is killed before it sends them
    with pytest.raises(Crash):
        world.sweeper("sweeper-1", queue=DiesOnSend(world.queue)).sweep(T0 + timedelta(seconds=60))
    # and another sweeper takes the bucket over once the lease has run out, then sweeps every minute
    world.clock.advance(121)
    world.sweep_every_minute(world.sweeper("sweeper-2"), 10)

    # Then every occurrence was sent
    missing = [at for at in minutes(datetime(2026, 1, 5, 9, 4, tzinfo=UTC), 8) if at not in world.sent(job)]
    assert not missing, f"never dispatched: {[f'{m:%H:%M}' for m in missing]}"


def test_a_job_created_into_a_bucket_a_slightly_fast_sweeper_already_sealed_is_dispatched() -> None:
    # Given a sweeper whose clock runs 1.9 s ahead and an API whose clock runs 0.6 s behind (NTP-synced)
    world = SkewableCore(T0 + timedelta(milliseconds=100))
    sweeper_clock, api_clock = SkewedClock(world.clock), SkewedClock(world.clock)
    sweeper_clock.offset = timedelta(seconds=1.9)
    api_clock.offset = timedelta(seconds=-0.6)
    sweeper = world.sweeper("sweeper-1", clock=sweeper_clock)

    # When the sweeper (reading 09:00:02) seals the buckets up to 09:05, and right after the API (reading
    # 08:59:59.5) creates a job due at 09:05:45.5
    sweeper.sweep(sweeper_clock.now() + timedelta(seconds=60))
    job = world.create({"type": "once", "delay_seconds": 346}, clock=api_clock)
    assert job.next_run_at is not None
    world.sweep_every_minute(sweeper, 10)

    # Then the occurrence was dispatched
    assert world.sent(job) == {job.next_run_at}


class EditLandsFirst:
    """The sweeper's timer store: its next-timer put is delayed until `edit` has run (a slow request)."""

    def __init__(self, inner: MemoryTimerStore, edit: Callable[[], object]) -> None:
        self.inner = inner
        self.edit: Callable[[], object] | None = edit
        self.shard_count = inner.shard_count

    def put_timer(self, timer: Timer) -> None:
        if self.edit is not None:
            edit, self.edit = self.edit, None
            edit()
        self.inner.put_timer(timer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def bucket_of(self, timer: Timer) -> BucketId:
        return self.inner.bucket_of(timer)

    def timers(self, bucket: BucketId, after: str | None) -> Iterator[tuple[list[Timer], str]]:
        return self.inner.timers(bucket, after)


def test_an_edit_racing_the_sweepers_next_timer_put_keeps_the_chain_alive() -> None:
    # Given a job every minute, and an edit (a new payload) that lands while the sweeper's next-timer put is
    # in flight
    world = SkewableCore()
    job = world.create({"type": "rate", "every_seconds": 60})
    service = world.service()

    def edit() -> object:
        return service.update(TENANT, job.job_id, {"payload": {"edited": True}}, None)

    # When the sweeper dispatches 09:01-09:06 and writes the 09:07 timer after the edit wrote its own
    world.sweeper("sweeper-1", timers=EditLandsFirst(world.timers, edit)).sweep(T0 + timedelta(seconds=60))
    world.clock.advance(60)
    world.sweep_every_minute(world.sweeper("sweeper-2"), 10)

    # Then the chain goes on after 09:06
    missing = [at for at in minutes(datetime(2026, 1, 5, 9, 7, tzinfo=UTC), 5) if at not in world.sent(job)]
    assert not missing, f"never dispatched: {[f'{m:%H:%M}' for m in missing]}"


def _advanced_then_killed(world: SkewableCore) -> Job:
    """A job every five minutes from 09:05, whose 09:05 occurrence was planned by a sweep (its chain advanced to
    09:10) that was killed before it sent anything."""
    job = world.create({"type": "rate", "every_seconds": 300, "start_at": "2026-01-05T09:05:00Z"})
    world.clock.set(datetime(2026, 1, 5, 9, 1, tzinfo=UTC))
    with pytest.raises(Crash):
        world.sweeper("sweeper-1", queue=DiesOnSend(world.queue)).sweep(world.clock.now() + timedelta(seconds=60))
    stored = world.jobs.get(job.job_id)
    assert stored is not None and stored.next_run_at == datetime(2026, 1, 5, 9, 10, tzinfo=UTC)
    assert world.sent(job) == set()
    return job


def test_a_pause_after_a_sweep_advanced_a_chain_and_died_before_sending_loses_no_occurrence() -> None:
    # Given a plan the killed sweep never sent
    world = SkewableCore()
    job = _advanced_then_killed(world)

    # When the job is paused before another sweeper re-runs that bucket (lease ended)
    world.service().pause(TENANT, job.job_id)
    world.clock.advance(180)
    world.sweep_every_minute(world.sweeper("sweeper-2"), 3)

    # Then 09:05 was sent, for the worker to record (skipped while the job is paused), not silently dropped
    assert datetime(2026, 1, 5, 9, 5, tzinfo=UTC) in world.sent(job)


def test_a_resume_whose_new_chain_advances_first_still_sends_the_old_plan() -> None:
    # Given a plan the killed sweep never sent, and after an outage a second sweep that replays it
    # and is killed before sending too (it holds the 09:05 bucket for two minutes)
    world = SkewableCore()
    job = _advanced_then_killed(world)
    world.clock.set(datetime(2026, 1, 5, 10, 0, tzinfo=UTC))
    with pytest.raises(Crash):
        world.sweeper("sweeper-2", queue=DiesOnSend(world.queue)).sweep(world.clock.now() + timedelta(seconds=60))
    # and a third sweep that seals every later bucket (the 09:05 one is still held)
    world.clock.advance(30)
    world.sweeper("sweeper-3").sweep(world.clock.now() + timedelta(seconds=60))
    assert world.sent(job) == set()

    # When the job is paused and resumed: its new chain starts at 09:10, in a sealed bucket, so the API dispatches
    # it at once and the chain advances from a timer of the new version before the old timer is re-run
    service = world.service()
    service.pause(TENANT, job.job_id)
    service.resume(TENANT, job.job_id)
    world.clock.advance(150)
    world.sweep_every_minute(world.sweeper("sweeper-3"), 3)

    # Then 09:05 was sent all the same: the pause found that plan's next timer missing and sent the plan again
    assert datetime(2026, 1, 5, 9, 5, tzinfo=UTC) in world.sent(job)
    assert {datetime(2026, 1, 5, 9, m, tzinfo=UTC) for m in (10, 15, 20)} <= world.sent(job)


def test_the_reproductions_pass_without_their_fault() -> None:
    """Control: the same scenarios with no crash, no skew and no race dispatch everything (so the xfails above
    fail because of the fault, not because the scenario is wrong)."""
    world = SkewableCore()
    job = world.create({"type": "rate", "every_seconds": 60, "start_at": "2026-01-05T09:04:00Z"})
    world.sweep_every_minute(world.sweeper("sweeper-1"), 12)
    assert set(minutes(datetime(2026, 1, 5, 9, 4, tzinfo=UTC), 8)) <= world.sent(job)

    world = SkewableCore(T0 + timedelta(milliseconds=100))
    sweeper = world.sweeper("sweeper-1")
    sweeper.sweep(world.clock.now() + timedelta(seconds=60))
    once = world.create({"type": "once", "delay_seconds": 346})
    world.sweep_every_minute(sweeper, 10)
    assert once.next_run_at is not None
    assert world.sent(once) == {once.next_run_at}

    world = SkewableCore()
    job = world.create({"type": "rate", "every_seconds": 60})
    world.sweep_every_minute(world.sweeper("sweeper-1"), 12)
    world.service().update(TENANT, job.job_id, {"payload": {"edited": True}}, None)
    world.sweep_every_minute(world.sweeper("sweeper-1"), 3)
    assert set(minutes(datetime(2026, 1, 5, 9, 7, tzinfo=UTC), 5)) <= world.sent(job)


def _window_of(instant: datetime, budget: Budget) -> int:
    return to_ms(instant) // budget.window_ms


def test_an_admission_whose_clock_runs_behind_books_no_second_release_in_a_window_a_faster_one_dropped() -> None:
    # Given a tenant with one release per 4 s window, one release booked in the window open now (00:48:36-40), and
    # two sweepers whose clocks differ by 2 s
    budget = Budget(0.25, 1)
    budgets = MemoryTenantBudgets()
    true_clock = FakeClock(datetime(2026, 10, 25, 0, 48, 38, 500_000, tzinfo=UTC))
    ahead, behind = SkewedClock(true_clock), SkewedClock(true_clock)
    ahead.offset, behind.offset = timedelta(seconds=1.5), timedelta(seconds=-0.5)  # 00:48:40.0 and 00:48:38.0
    fast, slow = (TenantAdmission(budgets, c, FairnessConfig(budget), RecordingMetrics()) for c in (ahead, behind))

    def due(at: datetime) -> Dispatch:
        return Dispatch("job", TENANT, at, at, 1)

    first = slow.admit([due(datetime(2026, 10, 25, 0, 48, 37, tzinfo=UTC))]).sent[0]

    # When the sweeper running ahead books (its now is in the next window: it drops the one before as past)
    fast.admit([due(datetime(2026, 10, 25, 0, 48, 50, tzinfo=UTC))])
    # and the one running behind books an occurrence due now
    again = slow.admit([due(datetime(2026, 10, 25, 0, 48, 38, tzinfo=UTC))]).sent[0]

    # Then its release goes to a window with room, not into the one that already holds a release
    assert _window_of(first.send_at, budget) == _window_of(datetime(2026, 10, 25, 0, 48, 37, tzinfo=UTC), budget)
    assert _window_of(again.send_at, budget) != _window_of(first.send_at, budget)


class PausedLoad(MemoryTenantBudgets):
    """A budget store whose next load first lets `meanwhile` run (the admission's process paused before the load)."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: Callable[[], None] | None = None

    def load(self, tenant: str) -> Any:
        pause, self.meanwhile = self.meanwhile, None
        if pause is not None:
            pause()
        return super().load(tenant)


def test_an_admission_paused_before_its_load_books_no_second_release_in_a_window_the_others_dropped() -> None:
    # Given a tenant with one release per 2 s window and a release booked in the window open now
    budget = Budget(0.5, 1)
    budgets = PausedLoad()
    clock = FakeClock(datetime(2026, 1, 5, 9, 19, 35, tzinfo=UTC))
    paused, other = (TenantAdmission(budgets, clock, FairnessConfig(budget), RecordingMetrics()) for _ in range(2))

    def due(job_id: str, at: datetime) -> Dispatch:
        return Dispatch(job_id, TENANT, at, at, 1)

    first = paused.admit([due("a", clock.now())]).sent[0]

    # When the next admission pauses before its load for six minutes, while another books (dropping the windows
    # that are past by then)
    def six_minutes_of_others() -> None:
        clock.advance(360)
        other.admit([due("b", clock.now())])

    budgets.meanwhile = six_minutes_of_others
    again = paused.admit([due("c", datetime(2026, 1, 5, 9, 19, 35, tzinfo=UTC))]).sent[0]

    # Then its release is booked where the calendar still counts (now), not in the window it read the clock in
    assert _window_of(again.send_at, budget) != _window_of(first.send_at, budget)
    assert again.send_at >= clock.now() - timedelta(seconds=1)
