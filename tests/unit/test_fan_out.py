"""The fan-out (scheduler.core.capacity.fan_out): a tick runs as many sweeps as the forecast's work inside the
look-ahead and a fresh backlog ask for, within `max_sweeps`; its sweeps share the buckets through their claims."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from scheduler.adapters.memory import FakeClock, RecordingMetrics
from scheduler.adapters.memory.fan_out import MemoryFanOutStore
from scheduler.core.capacity.fan_out import FanOut, FanOutConfig, backlog_sweeps, decide
from scheduler.core.capacity.forecast import Forecast, MinuteForecast
from scheduler.core.model.timefmt import ONE_MINUTE, minute_of, rfc3339
from scheduler.core.ports import FanOutRecord, HelperSweep
from tests.unit.fixtures import T0, MemoryCore

CONFIG = FanOutConfig(max_sweeps=8, fires_per_sweep=20_000, lookahead=timedelta(seconds=300))
MINUTE = minute_of(T0)


def record(due: dict[int, int], *, age: float = 30, backlog: int = 0, backlog_age: float = 30) -> FanOutRecord:
    """A record with `due` per minute offset from T0's minute, written `age` seconds before T0."""
    return FanOutRecord(
        due={MINUTE + offset * ONE_MINUTE: count for offset, count in due.items()},
        forecast_at=T0 - timedelta(seconds=age),
        backlog_sweeps=backlog,
        backlog_at=T0 - timedelta(seconds=backlog_age) if backlog else None,
    )


@pytest.mark.parametrize(
    ("due", "sweeps", "reason"),
    [
        ({}, 1, "one sweep"),
        ({2: 19_999}, 1, "one sweep"),
        ({2: 20_001}, 2, "forecast"),
        # the window runs from the watermark to the look-ahead's last minute: 5 minutes ahead, not 6
        ({5: 50_000}, 3, "forecast"),
        ({6: 500_000}, 1, "one sweep"),
        # what is due in the window adds up across its minutes; more than `max_sweeps` is capped
        ({1: 30_000, 3: 30_000}, 3, "forecast"),
        ({4: 500_000}, 8, "forecast"),
    ],
)
def test_the_forecast_inside_the_look_ahead_sizes_the_tick(due: dict[int, int], sweeps: int, reason: str) -> None:
    decision = decide(record(due), MINUTE, T0, CONFIG)
    assert (decision.sweeps, decision.reason) == (sweeps, reason)


def test_minutes_behind_the_watermark_do_not_count_and_a_lagging_watermark_brings_its_minutes_in() -> None:
    due = {-3: 40_000, 1: 10_000}
    assert decide(record(due), MINUTE, T0, CONFIG).due_in_window == 10_000
    assert decide(record(due), MINUTE - 3 * ONE_MINUTE, T0, CONFIG).due_in_window == 50_000


def test_a_stale_forecast_or_backlog_is_not_acted_on() -> None:
    assert decide(record({2: 100_000}, age=181), MINUTE, T0, CONFIG).sweeps == 1
    assert decide(record({}, backlog=4, backlog_age=181), MINUTE, T0, CONFIG).sweeps == 1
    fresh = decide(record({}, backlog=4), MINUTE, T0, CONFIG)
    assert (fresh.sweeps, fresh.reason) == (4, "backlog")


def test_a_backlog_doubles_the_tick_that_ran_out_within_the_maximum() -> None:
    assert [backlog_sweeps(n, CONFIG) for n in (1, 2, 3, 4, 8)] == [2, 4, 6, 8, 8]


class Launcher:
    def __init__(self, refuse: set[int] | None = None) -> None:
        self.launched: list[HelperSweep] = []
        self.refuse = refuse or set()

    def launch(self, helper: HelperSweep) -> None:
        if helper.index in self.refuse:
            raise ConnectionError("TooManyRequestsException")
        self.launched.append(helper)


def fan_out(store: MemoryFanOutStore, launcher: Launcher, config: FanOutConfig = CONFIG) -> FanOut:
    return FanOut(store, launcher, FakeClock(T0), RecordingMetrics(), config)


def test_a_tick_starts_all_sweeps_but_itself_and_counts_the_ones_refused() -> None:
    store = MemoryFanOutStore()
    store.record_forecast({MINUTE + 2 * ONE_MINUTE: 90_000}, T0)
    launcher = Launcher(refuse={3})
    service = fan_out(store, launcher)

    decision = service.start("tick-1", MINUTE)

    assert decision.sweeps == 5
    assert [(h.tick, h.index, h.sweeps) for h in launcher.launched] == [("tick-1", i, 5) for i in (1, 2, 4)]
    assert isinstance(service.metrics, RecordingMetrics)
    assert service.metrics.counts == {"SweepFanOut": 5, "SweepFanOutFailures": 1}


def test_with_one_sweep_at_most_nothing_is_read_started_or_recorded() -> None:
    store = MemoryFanOutStore()
    store.record_forecast({MINUTE: 900_000}, T0)
    launcher = Launcher()
    service = fan_out(store, launcher, FanOutConfig(1, 20_000, timedelta(seconds=300)))
    assert service.start("tick", MINUTE).sweeps == 1
    assert service.finish(ran_out=True, sweeps_in_tick=1) == 0
    assert launcher.launched == [] and store.read().backlog_sweeps == 0


def test_a_sweep_that_ran_out_asks_the_next_tick_for_more_and_one_that_did_not_asks_nothing() -> None:
    store = MemoryFanOutStore()
    service = fan_out(store, Launcher())
    assert service.finish(ran_out=False, sweeps_in_tick=3) == 0
    assert store.read().backlog_at is None
    assert service.finish(ran_out=True, sweeps_in_tick=3) == 6
    assert store.read() == FanOutRecord(backlog_sweeps=6, backlog_at=T0)
    assert service.start("next", MINUTE).sweeps == 6


def test_the_forecast_is_recorded_minute_by_minute_without_the_empty_ones() -> None:
    store = MemoryFanOutStore()
    minutes = [MinuteForecast(MINUTE + i * ONE_MINUTE, due, due) for i, due in enumerate([0, 7, 0, 30_000])]
    fan_out(store, Launcher()).record_forecast(Forecast(MINUTE, minutes, 12))
    assert store.read().due == {MINUTE + ONE_MINUTE: 7, MINUTE + 3 * ONE_MINUTE: 30_000}


def test_a_tick_and_its_fan_out_sweeps_share_a_herd_each_occurrence_once_and_the_last_moves_the_watermark() -> None:
    # Given a herd bigger than three sweeps' budgets, in a deployment of 8 shards
    world = MemoryCore.build(shard_count=8, max_active_jobs=10_000)
    due = rfc3339(T0 + timedelta(seconds=90))
    herd = {world.create({"type": "once", "at": due}).job_id for _ in range(800)}
    herd_minute = minute_of(T0 + timedelta(seconds=90))
    # and a job created inside the look-ahead after its bucket was sealed, whose copy waits in the late lane
    first = sorted(herd)[0]
    world.timers.put_late(world.pending_timers(first)[0])
    budget = 150

    # When two fan-out sweeps run (each as its own invocation) before their tick's sweep
    helpers = [world.sweeper(f"helper-{i}", budget) for i in (1, 2)]
    reports = [h.sweep(world.now() + timedelta(minutes=1), buckets_only=True) for h in helpers]

    # Then they swept buckets only (the late lane is the tick's), each until its budget ran out, and neither moved
    # the watermark past the herd's minute, whose buckets they left unfinished
    assert all(r.late_drained == 0 and r.outbox_backlog == 0 and r.stopped_early for r in reports)
    assert all(r.dispatched >= budget for r in reports)
    assert not world.watermark_passed(herd_minute)
    # and the tick, then the next ticks, take the rest from the buckets' checkpoints: the sweep that finishes the
    # minute's last bucket moves the watermark past it, and every occurrence was sent once
    tick = world.sweeper("tick", budget).sweep(world.now() + timedelta(minutes=1))
    assert tick.late_drained == 1
    while world.sweep("tick", budget).stopped_early:
        pass
    sent = [d.job_id for d in world.sent()]
    assert sorted(j for j in sent if j != first) == sorted(herd - {first})
    assert 1 <= sent.count(first) <= 2  # the late-lane copy may be sent again: the ledger absorbs it
    assert world.watermark_passed(herd_minute)


def test_only_the_first_tick_of_a_minute_fans_out_and_the_next_minute_again() -> None:
    store = MemoryFanOutStore()
    store.record_forecast({MINUTE + 2 * ONE_MINUTE: 90_000}, T0)
    launcher = Launcher()
    clock = FakeClock(T0)
    service = FanOut(store, launcher, clock, RecordingMetrics(), CONFIG)

    assert service.start("tick-1", MINUTE).sweeps == 5
    # a retried tick, or the local stack's next tick a few seconds later, sweeps beside the sweeps already started
    again = service.start("tick-2", MINUTE)
    assert (again.sweeps, again.reason) == (1, "fanned out this minute already")
    clock.advance(60)
    assert service.start("tick-3", MINUTE).sweeps == 5
    assert [h.tick for h in launcher.launched] == ["tick-1"] * 4 + ["tick-3"] * 4


class BrokenStore(MemoryFanOutStore):
    def read(self) -> FanOutRecord:
        raise ConnectionError("ProvisionedThroughputExceededException")

    def record_backlog(self, sweeps: int, at: datetime) -> None:
        raise ConnectionError("ProvisionedThroughputExceededException")


def test_a_fan_out_record_that_cannot_be_read_or_written_never_keeps_a_tick_from_sweeping() -> None:
    launcher = Launcher()
    service = fan_out(BrokenStore(), launcher)

    decision = service.start("tick", MINUTE)
    asked = service.finish(ran_out=True, sweeps_in_tick=1)

    assert (decision.sweeps, decision.reason, asked) == (1, "fan-out record unavailable", 0)
    assert launcher.launched == []
    assert isinstance(service.metrics, RecordingMetrics)
    assert service.metrics.counts == {"SweepFanOutFailures": 2}
