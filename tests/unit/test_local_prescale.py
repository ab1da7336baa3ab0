"""The forecast drives the local worker pool: the pre-scaler writes each lane's pollers to the stack's state file
(FilePollerControl) and the pool reads how many worker pollers that stands for (scheduler_local.prescale)."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

from scheduler.adapters.file_pollers import FilePollerControl
from scheduler.core.capacity.forecast import ForecastService
from scheduler.core.capacity.prescale import PrescaleConfig, Prescaler, WorkerCapacity
from scheduler_local.prescale import FILE_NAME, forecast_workers
from tests.unit.fixtures import MemoryCore, at


def test_the_file_starts_at_the_floor_and_keeps_every_lane(tmp_path: Path) -> None:
    control = FilePollerControl(tmp_path / FILE_NAME)
    assert control.minimum_pollers("normal") == 2 and control.lanes() == ["high", "low", "normal"]
    assert control.set_minimum_pollers("normal", 7) and control.set_minimum_pollers("high", 3)
    assert (control.minimum_pollers("normal"), control.minimum_pollers("high"), control.minimum_pollers("low")) == (
        7,
        3,
        2,
    )
    assert forecast_workers(tmp_path, invocations_per_worker=10) == 5 + 1
    assert forecast_workers(tmp_path, invocations_per_worker=10, ceiling=4) == 4


def test_concurrent_writers_never_lose_a_lane(tmp_path: Path) -> None:
    control = FilePollerControl(tmp_path / FILE_NAME)
    threads = [
        threading.Thread(target=lambda lane=lane: [control.set_minimum_pollers(lane, n) for n in range(2, 30)])
        for lane in ("high", "normal", "low")
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {lane: control.minimum_pollers(lane) for lane in control.lanes()} == {"high": 29, "low": 29, "normal": 29}


def test_a_herd_scheduled_ahead_grows_the_pool_before_it_and_shrinks_it_after(tmp_path: Path) -> None:
    # Given 200 jobs due at 10:00:00 and a pre-scaler writing the local state file
    world = MemoryCore.build(shard_count=2, max_active_jobs=1000)
    for _ in range(200):
        world.create({"type": "once", "at": "2026-01-05T10:00:00Z"})
    forecasts = ForecastService(world.timers, world.clock, timedelta(minutes=7), world.metrics)
    config = PrescaleConfig(WorkerCapacity(seconds_per_occurrence=1.0), lead=timedelta(minutes=3))
    prescaler = Prescaler(FilePollerControl(tmp_path / FILE_NAME), config, world.metrics)
    # When it runs once a minute from 09:55 to 10:01
    extra = []
    for minute in range(55, 62):
        world.set_time(at("2026-01-05T09:00") + timedelta(minutes=minute))
        prescaler.run(forecasts.forecast(10), world.now())
        extra.append(forecast_workers(tmp_path, invocations_per_worker=5))
    # Then the pool is asked for more workers from 09:57 to the end of 10:00 (200 in one second, 1 s each, 3 s to
    # start them: 67 invocations, 7 pollers; 5 above the floor = 50 invocations = 10 workers of 5), none after
    assert extra == [0, 0, 10, 10, 10, 10, 0]
