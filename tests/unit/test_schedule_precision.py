"""Walking a schedule always moves forward, whatever the precision of its anchor."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler.core.model.schedules import RateSchedule, preview


def test_a_rate_anchored_at_a_sub_millisecond_instant_still_advances() -> None:
    created = datetime(2026, 1, 5, 9, 0, 0, 123456, tzinfo=UTC)
    runs = preview(RateSchedule(type="rate", every_seconds=1), created, created, 5)
    assert len(set(runs)) == 5
    assert runs == sorted(runs)
    assert all(r.microsecond % 1000 == 0 for r in runs)
