"""Sizing provisioned pollers for a forecast peak (scheduler.core.capacity.prescale)."""

from __future__ import annotations

import pytest

from scheduler.core.capacity.prescale import WorkerCapacity, concurrency_for, pollers_for

CAPACITY = WorkerCapacity(seconds_per_occurrence=0.03, target_start_seconds=5.0, slack_seconds=2.0)


def test_a_burst_in_one_second_is_drained_within_the_target_minus_the_slack() -> None:
    # 30,000 due at once, 3 s to hand them out: 10,000 a second at 30 ms each = 300 concurrent invocations
    assert concurrency_for(30_000, 30_000, CAPACITY) == 300
    assert pollers_for(30_000, 30_000, CAPACITY) == 30


def test_a_spread_minute_is_sized_for_its_average_rate_with_headroom() -> None:
    # 60,000 spread over the minute (1,000 a second, peak second 1,000): 1,200/s x 30 ms = 36
    assert concurrency_for(1_000, 60_000, CAPACITY) == 36


def test_pollers_stay_within_the_baseline_and_the_ceiling() -> None:
    small = WorkerCapacity(0.03, ceiling_pollers=50)
    assert pollers_for(0, 0, small) == 2
    assert pollers_for(10, 10, small) == 2
    assert pollers_for(1_000_000, 1_000_000, small) == 50


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seconds_per_occurrence": 0},
        {"seconds_per_occurrence": 0.03, "baseline_pollers": 1},
        {"seconds_per_occurrence": 0.03, "ceiling_pollers": 201},
    ],
)
def test_capacities_outside_what_aws_accepts_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        WorkerCapacity(**kwargs)  # type: ignore[arg-type]
