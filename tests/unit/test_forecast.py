"""The forecast (scheduler.core.capacity.forecast): occurrences due per minute, from stored timers and their
schedules."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from scheduler.core.capacity.forecast import ForecastService, forecast
from scheduler.core.model.timefmt import minute_of
from tests.unit.fixtures import T0, MemoryCore, at

LOOKBACK = timedelta(minutes=7)


def service(world: MemoryCore) -> ForecastService:
    return ForecastService(world.timers, world.clock, LOOKBACK, world.metrics)


def by_minute(result: Any) -> dict[str, int]:
    return {m.minute.strftime("%H:%M"): m.due for m in result.minutes if m.due}


def test_one_shot_jobs_count_in_the_minute_they_fall_due(world: MemoryCore) -> None:
    for _ in range(3):
        world.create({"type": "once", "at": "2026-01-05T09:20:30Z"})
    world.create({"type": "once", "at": "2026-01-05T09:45:00Z"})
    world.create({"type": "once", "at": "2026-01-05T11:00:00Z"})  # beyond the hour
    result = service(world).forecast(60)
    assert by_minute(result) == {"09:20": 3, "09:45": 1}
    assert result.total == 4 and result.peak is not None and result.peak.minute == at("2026-01-05T09:20")
    assert result.peak.peak_second == 3


def test_a_recurring_schedule_is_expanded_from_its_one_stored_timer(world: MemoryCore) -> None:
    world.create({"type": "rate", "every_seconds": 600})  # first at 09:10, then every 10 minutes
    world.create({"type": "cron", "expression": "*/15 * * * *", "timezone": "Europe/Berlin"})
    result = service(world).forecast(60)
    assert result.timers_read == 2
    assert by_minute(result) == {
        "09:10": 1,
        "09:15": 1,
        "09:20": 1,
        "09:30": 2,
        "09:40": 1,
        "09:45": 1,
        "09:50": 1,
    }


def test_a_tenant_sees_only_its_own_and_the_overall_view_splits_by_tenant(world: MemoryCore) -> None:
    world.create({"type": "once", "at": "2026-01-05T09:05:00Z"}, tenant="acme")
    world.create({"type": "once", "at": "2026-01-05T09:05:10Z"}, tenant="globex")
    overall = service(world).forecast(10)
    assert overall.minutes[5].by_tenant == {"acme": 1, "globex": 1}
    mine = service(world).forecast(10, tenant="globex")
    assert mine.total == 1 and mine.minutes[5].by_tenant == {"globex": 1}


def test_an_edited_job_counts_once_on_its_new_schedule(world: MemoryCore) -> None:
    job = world.create({"type": "rate", "every_seconds": 300})
    world.service.update(job.tenant, job.job_id, {"schedule": {"type": "rate", "every_seconds": 1200}}, None)
    result = service(world).forecast(60)
    assert result.timers_read == 2  # both versions' timers are stored
    assert by_minute(result) == {"09:20": 1, "09:40": 1}  # only the new version's schedule counts


@pytest.mark.parametrize("every", [10, 60, 600])
def test_what_the_forecast_says_is_what_the_sweeps_then_send(every: int) -> None:
    # Given recurring jobs (sub-minute ones too: the look-ahead sends several per timer) and one-shot jobs
    world = MemoryCore.build(shard_count=2)
    for offset in range(4):
        world.create({"type": "rate", "every_seconds": every}, jitter_seconds=offset * 7)
    world.create({"type": "once", "at": "2026-01-05T09:12:34Z"})
    for minute in range(4):  # a sweep a minute; part of the window is already in SQS (look-ahead)
        world.set_time(T0 + timedelta(minutes=minute))
        world.sweep()
    predicted = service(world).forecast(20)
    # When the sweeps run on through the window
    for minute in range(4, 30):
        world.set_time(T0 + timedelta(minutes=minute))
        world.sweep()
    # Then each minute's messages are what was forecast
    sent = Counter(minute_of(d.fire_at) for d in world.sent())
    assert {m.minute: m.due for m in predicted.minutes} == {m.minute: sent.get(m.minute, 0) for m in predicted.minutes}
    assert predicted.total > 0


def test_the_window_is_bounded(world: MemoryCore) -> None:
    with pytest.raises(ValueError):
        service(world).forecast(0)
    with pytest.raises(ValueError):
        service(world).forecast(181)


def test_triggers_and_deferred_occurrences_count_once_at_their_due_instant() -> None:
    job_world = MemoryCore.build()
    job = job_world.create({"type": "once", "at": "2026-01-05T09:30:00Z"})
    stored = job_world.pending_timers(job.job_id)
    deferred = replace(stored[0], plan=None, defer_until=at("2026-01-05T09:41:00"))
    result = forecast([deferred], T0, 60)
    assert by_minute(result) == {"09:41": 1}


def test_a_jittered_occurrence_past_the_window_does_not_hide_the_next_one_inside_it() -> None:
    from scheduler.core.model.keys import fire_at
    from scheduler.core.model.schedules import RateSchedule
    from scheduler.core.ports import ChainPlan, Timer

    # Given a rate-10 s chain with 21 s of jitter whose occurrence at 09:19:40 fires after the window's end
    # (09:20) while the one at 09:19:50 fires before it (jitter delays each by its own amount)
    end = at("2026-01-05T09:20")
    before, after = at("2026-01-05T09:19:40"), at("2026-01-05T09:19:50")
    job_id = next(
        f"job-{n}" for n in range(10_000) if fire_at(f"job-{n}", before, 21) >= end > fire_at(f"job-{n}", after, 21)
    )
    plan = ChainPlan(RateSchedule(type="rate", every_seconds=10), T0, 21, "run_once")
    first = at("2026-01-05T09:19:00")
    timer = Timer(job_id, "acme", first, fire_at(job_id, first, 21), 1, "scheduled", plan=plan)

    # When the forecast of 09:00-09:20 is read
    result = forecast([timer], T0, 20)

    # Then the later occurrence, due inside the window, is counted
    expected = sum(1 for k in range(6) if fire_at(job_id, first + timedelta(seconds=10 * k), 21) < end)
    assert result.total == expected and expected >= 1
    assert result.minutes[-1].due == expected  # all in its last minute, 09:19


def test_a_forecast_reads_the_recorded_shard_count_once_for_its_whole_window(world: MemoryCore) -> None:
    # Given a herd in the window, and a timer store that counts the reads of the recorded count
    for _ in range(3):
        world.create({"type": "once", "at": "2026-01-05T09:20:30Z"})
    reads = Counter[str]()
    recorded_shards = world.timers.recorded_shards

    def counted() -> int:
        reads["recorded_shards"] += 1
        return recorded_shards()

    world.timers.recorded_shards = counted  # type: ignore[method-assign]

    # When a forecast of an hour reads its window (the look-back and 60 minutes)
    result = service(world).forecast(60)

    # Then it read the count once, and found the herd in every shard it recorded
    assert reads == Counter({"recorded_shards": 1})
    assert by_minute(result) == {"09:20": 3}
