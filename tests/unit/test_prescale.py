"""The pre-scaling control loop (scheduler.core.capacity.prescale): raise ahead of a forecast peak, lower after it,
within the ceiling; idempotent, safe with several sweepers, every change logged and counted."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from scheduler.adapters.memory import MemoryPollerControl, RecordingMetrics
from scheduler.core.capacity.forecast import Forecast, ForecastService, MinuteForecast
from scheduler.core.capacity.prescale import PrescaleConfig, Prescaler, WorkerCapacity, pollers_for, target_pollers
from tests.unit.fixtures import MemoryCore, at

CAPACITY = WorkerCapacity(seconds_per_occurrence=0.034, ceiling_pollers=100)
CONFIG = PrescaleConfig(CAPACITY, lead=timedelta(minutes=5))
PEAK = at("2026-01-05T10:00")


def herd(due: int, peak_second: int, lane: str = "normal", minute: datetime = PEAK) -> Forecast:
    """A forecast from 09:40 to 10:10 with one busy minute."""
    start = at("2026-01-05T09:40")
    rows = []
    for i in range(30):
        m = start + timedelta(minutes=i)
        load = {lane: (due, peak_second)} if m == minute else {}
        rows.append(MinuteForecast(m, due if m == minute else 0, peak_second if m == minute else 0, {}, load))
    return Forecast(start, rows, due)


def test_nothing_ahead_keeps_the_baseline() -> None:
    assert target_pollers("normal", herd(0, 0), at("2026-01-05T09:41"), CONFIG)[0] == 2


@pytest.mark.parametrize(
    ("now", "raised"),
    [
        ("2026-01-05T09:54:59", False),  # before the lead
        ("2026-01-05T09:55:00", True),  # `lead` ahead of the peak minute
        ("2026-01-05T09:59:30", True),
        ("2026-01-05T10:00:59", True),  # during the peak minute
        ("2026-01-05T10:01:00", False),  # after it: lowered again
    ],
)
def test_pollers_go_up_lead_ahead_of_the_peak_and_down_after_it(now: str, raised: bool) -> None:
    forecast = herd(50_000, 50_000)
    target, reason, peak = target_pollers("normal", forecast, at(now), CONFIG)
    expected = pollers_for(50_000, 50_000, CAPACITY)
    assert expected > 2
    assert target == (expected if raised else 2)
    assert (peak == PEAK) is raised
    assert ("50,000 due" in reason) is raised


def test_the_ceiling_caps_the_target_and_says_so() -> None:
    target, reason, _ = target_pollers("normal", herd(500_000, 500_000), at("2026-01-05T09:58"), CONFIG)
    assert target == 100 and "ceiling" in reason


def test_only_the_lane_with_the_peak_is_raised() -> None:
    forecast = herd(50_000, 50_000, lane="low")
    assert target_pollers("normal", forecast, at("2026-01-05T09:58"), CONFIG)[0] == 2
    assert target_pollers("low", forecast, at("2026-01-05T09:58"), CONFIG)[0] > 2


def test_a_run_writes_only_what_differs_and_a_repeat_writes_nothing() -> None:
    control = MemoryPollerControl({"normal": 2, "high": 2})
    metrics = RecordingMetrics()
    prescaler = Prescaler(control, CONFIG, metrics)
    first = prescaler.run(herd(50_000, 50_000), at("2026-01-05T09:56"))
    again = prescaler.run(herd(50_000, 50_000), at("2026-01-05T09:57"))
    target = pollers_for(50_000, 50_000, CAPACITY)
    assert control.writes == [("normal", target)]
    assert [c.changes for c in first] == [False, True] and not any(c.changes for c in again)
    assert metrics.counts["PrescalePollerChanges"] == 1


def test_several_sweepers_agree_and_write_the_same_value() -> None:
    control = MemoryPollerControl({"normal": 2})
    one, two = Prescaler(control, CONFIG, RecordingMetrics()), Prescaler(control, CONFIG, RecordingMetrics())
    now = at("2026-01-05T09:58")
    one.run(herd(50_000, 50_000), now)
    two.run(herd(50_000, 50_000), now)
    assert len(control.writes) == 1 and control.pollers["normal"] == pollers_for(50_000, 50_000, CAPACITY)


def test_a_busy_mapping_is_left_for_the_next_sweep() -> None:
    control = MemoryPollerControl({"normal": 2})
    metrics = RecordingMetrics()
    prescaler = Prescaler(control, CONFIG, metrics)
    control.busy.add("normal")
    (deferred,) = prescaler.run(herd(50_000, 50_000), at("2026-01-05T09:56"))
    assert not deferred.applied and control.pollers["normal"] == 2
    assert metrics.counts["PrescaleChangesDeferred"] == 1
    control.busy.clear()
    (applied,) = prescaler.run(herd(50_000, 50_000), at("2026-01-05T09:57"))
    assert applied.applied and control.pollers["normal"] > 2


def test_lowering_after_the_peak_is_counted_too() -> None:
    control = MemoryPollerControl({"normal": 2})
    metrics = RecordingMetrics()
    prescaler = Prescaler(control, CONFIG, metrics)
    prescaler.run(herd(50_000, 50_000), at("2026-01-05T09:59"))
    prescaler.run(herd(50_000, 50_000), at("2026-01-05T10:01"))
    assert [w[1] for w in control.writes] == [pollers_for(50_000, 50_000, CAPACITY), 2]
    assert metrics.counts["PrescalePollerChanges"] == 2


def test_from_stored_jobs_to_pollers() -> None:
    # Given 300 jobs due at 10:00:00 in the normal lane, created an hour ahead
    world = MemoryCore.build(shard_count=4, max_active_jobs=1000)
    for _ in range(300):
        world.create({"type": "once", "at": "2026-01-05T10:00:00Z"})
    forecasts = ForecastService(world.timers, world.clock, timedelta(minutes=7), world.metrics)
    control = MemoryPollerControl({"normal": 2, "high": 2})
    tight = PrescaleConfig(WorkerCapacity(seconds_per_occurrence=0.5), lead=timedelta(minutes=5))
    prescaler = Prescaler(control, tight, world.metrics)
    # When the sweeper's step runs every minute from 09:50 to 10:02
    seen = []
    for minute in range(50, 63):
        world.set_time(at("2026-01-05T09:00") + timedelta(minutes=minute))
        prescaler.run(forecasts.forecast(15), world.now())
        seen.append(control.pollers["normal"])
    # Then the normal lane is raised from 09:55 (300 in one second, 3 s to start them at 0.5 s each: 50 invocations,
    # 5 pollers) and back to 2 from 10:01; the high lane is never touched
    assert seen == [2] * 5 + [5] * 6 + [2] * 2
    assert control.pollers["high"] == 2 and all(lane == "normal" for lane, _ in control.writes)
