"""Schedules: once, rate and cron occurrences as UTC instants, DST rules, validation messages."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from pydantic import ValidationError

from scheduler.core.model.cron import InvalidSchedule, normalise_cron, zone
from scheduler.core.model.schedules import (
    first_occurrence,
    is_occurrence,
    next_occurrence,
    preview,
)
from tests.unit.fixtures import at, schedule

CREATED = at("2026-01-05T09:00:00")


def local(text: str, tz: str) -> datetime:
    """A wall-clock time in a zone, for readable expectations (only for times that exist once)."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz))


def cron(expression: str, tz: str = "UTC", **window: object) -> object:
    return schedule(type="cron", expression=expression, timezone=tz, **window)


# -- once ---------------------------------------------------------------------------------------------------


def test_once_at_fires_at_its_instant_converted_to_utc() -> None:
    sched = schedule(type="once", at="2026-01-05T12:30:00+02:00")

    assert first_occurrence(sched, CREATED) == at("2026-01-05T10:30")
    assert next_occurrence(sched, CREATED, CREATED) == at("2026-01-05T10:30")
    # Then: nothing after it
    assert next_occurrence(sched, at("2026-01-05T10:30"), CREATED) is None


def test_once_at_in_the_past_still_has_its_one_occurrence() -> None:
    # Given a time already past when the job is created: it is due at once (the misfire policy decides)
    sched = schedule(type="once", at="2026-01-05T08:00:00Z")

    assert first_occurrence(sched, CREATED) == at("2026-01-05T08:00")


def test_once_delay_seconds_counts_from_creation() -> None:
    sched = schedule(type="once", delay_seconds=90)

    assert first_occurrence(sched, CREATED) == at("2026-01-05T09:01:30")
    assert preview(sched, CREATED, CREATED, 5) == [at("2026-01-05T09:01:30")]


def test_once_needs_exactly_one_of_at_and_delay() -> None:
    with pytest.raises(ValidationError, match="exactly one of 'at' or 'delay_seconds'"):
        schedule(type="once")
    with pytest.raises(ValidationError, match="exactly one of 'at' or 'delay_seconds'"):
        schedule(type="once", at="2026-01-05T09:00:00Z", delay_seconds=5)


def test_once_at_without_offset_is_refused() -> None:
    with pytest.raises(ValidationError):
        schedule(type="once", at="2026-01-05T09:00:00")


# -- rate ---------------------------------------------------------------------------------------------------


def test_rate_without_start_is_anchored_one_period_after_creation() -> None:
    sched = schedule(type="rate", every_seconds=600)

    assert first_occurrence(sched, CREATED) == at("2026-01-05T09:10")
    assert preview(sched, CREATED, CREATED, 3) == [
        at("2026-01-05T09:10"),
        at("2026-01-05T09:20"),
        at("2026-01-05T09:30"),
    ]


def test_rate_with_future_start_fires_first_at_start() -> None:
    sched = schedule(type="rate", every_seconds=3600, start_at="2026-01-06T00:00:00Z")

    assert first_occurrence(sched, CREATED) == at("2026-01-06T00:00")
    assert preview(sched, CREATED, CREATED, 2) == [at("2026-01-06T00:00"), at("2026-01-06T01:00")]


def test_rate_with_past_start_keeps_the_start_phase() -> None:
    # Given a start 09:00:07 in the past: occurrences stay on :07 of each minute
    sched = schedule(type="rate", every_seconds=60, start_at="2026-01-05T08:00:07Z")

    assert first_occurrence(sched, CREATED) == at("2026-01-05T09:00:07")


def test_rate_does_not_drift_the_next_comes_from_the_scheduled_instant() -> None:
    # Given a 10-minute rate whose 09:10 run was handled late, at 09:13:27.345
    sched = schedule(type="rate", every_seconds=600)
    handled_at = at("2026-01-05T09:13:27.345")

    # When the next occurrence is computed from the scheduled instant (as the sweeper does)
    nxt = next_occurrence(sched, at("2026-01-05T09:10"), CREATED)

    # Then it stays on the 10-minute grid, not 10 minutes after the late handling
    assert nxt == at("2026-01-05T09:20")
    assert nxt != handled_at + timedelta(minutes=10)
    # And even asked from a late 'now', the grid holds
    assert next_occurrence(sched, handled_at, CREATED) == at("2026-01-05T09:20")


def test_rate_end_at_bounds_the_occurrences_inclusively() -> None:
    sched = schedule(type="rate", every_seconds=60, start_at="2026-01-05T10:00:00Z", end_at="2026-01-05T10:03:00Z")

    assert preview(sched, CREATED, CREATED, 10) == [
        at("2026-01-05T10:00"),
        at("2026-01-05T10:01"),
        at("2026-01-05T10:02"),
        at("2026-01-05T10:03"),
    ]
    assert next_occurrence(sched, at("2026-01-05T10:03"), CREATED) is None


def test_rate_end_before_start_is_refused() -> None:
    with pytest.raises(ValidationError, match="'end_at' must be after 'start_at'"):
        schedule(type="rate", every_seconds=60, start_at="2026-01-05T10:00:00Z", end_at="2026-01-05T09:00:00Z")


def test_rate_period_must_be_positive() -> None:
    with pytest.raises(ValidationError):
        schedule(type="rate", every_seconds=0)


# -- cron ---------------------------------------------------------------------------------------------------


def test_cron_in_utc() -> None:
    sched = cron("0 9 * * 1-5")  # weekdays 09:00; 2026-01-05 is a Monday

    assert preview(sched, CREATED, CREATED, 5) == [
        at("2026-01-06T09:00"),
        at("2026-01-07T09:00"),
        at("2026-01-08T09:00"),
        at("2026-01-09T09:00"),
        at("2026-01-12T09:00"),  # the weekend is skipped
    ]


def test_cron_recurring_occurrences_start_strictly_after_creation() -> None:
    # Given a job created exactly at 09:00 with a 09:00 daily schedule: the first run is tomorrow
    assert first_occurrence(cron("0 9 * * *"), CREATED) == at("2026-01-06T09:00")


@pytest.mark.parametrize(
    ("tz", "expected_utc"),
    [
        ("Europe/Berlin", "2026-01-06T08:00"),  # CET, +01:00 in winter
        ("America/New_York", "2026-01-06T14:00"),  # EST, -05:00
        ("Asia/Kolkata", "2026-01-06T03:30"),  # +05:30, a half-hour offset
        ("Asia/Kathmandu", "2026-01-06T03:15"),  # +05:45
        ("UTC", "2026-01-06T09:00"),
    ],
)
def test_cron_is_evaluated_in_its_zone(tz: str, expected_utc: str) -> None:
    assert first_occurrence(cron("0 9 * * *", tz), at("2026-01-05T18:00")) == at(expected_utc)


def test_cron_in_berlin_follows_summer_time() -> None:
    # 09:00 Berlin is 08:00Z in January and 07:00Z in July
    sched = cron("0 9 * * *", "Europe/Berlin")

    assert first_occurrence(sched, at("2026-07-01T12:00")) == at("2026-07-02T07:00")


def test_cron_start_and_end_window() -> None:
    sched = cron("0 * * * *", start_at="2026-01-05T12:00:00Z", end_at="2026-01-05T14:00:00Z")

    assert preview(sched, CREATED, CREATED, 10) == [
        at("2026-01-05T12:00"),  # start_at itself is an occurrence
        at("2026-01-05T13:00"),
        at("2026-01-05T14:00"),  # end_at is inclusive
    ]
    assert next_occurrence(sched, at("2026-01-05T14:00"), CREATED) is None


@pytest.mark.parametrize(
    ("macro", "expected"),
    [
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"),
        ("@yearly", "0 0 1 1 *"),
        ("@ANNUALLY", "0 0 1 1 *"),
    ],
)
def test_cron_macros_expand(macro: str, expected: str) -> None:
    assert normalise_cron(macro) == expected


def test_daily_macro_fires_at_local_midnight() -> None:
    sched = cron("@daily", "America/New_York")

    assert preview(sched, CREATED, CREATED, 2) == [at("2026-01-06T05:00"), at("2026-01-07T05:00")]


def test_cron_names_and_steps_are_accepted() -> None:
    assert normalise_cron("*/15 9-17 * JAN-MAR MON-FRI") == "*/15 9-17 * JAN-MAR MON-FRI"
    assert normalise_cron("  0   9  * *   *  ") == "0 9 * * *"


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        # A range with equal ends is its one value (Vixie cron, cronsim, APScheduler), not the whole field
        ("0 9 1 1-1 *", ["2027-01-01T09:00", "2028-01-01T09:00"]),
        ("0 9 1 JAN-JAN *", ["2027-01-01T09:00", "2028-01-01T09:00"]),
        ("5-5 10 * * *", ["2026-01-05T10:05", "2026-01-06T10:05"]),
        ("59-59/15 10 * * *", ["2026-01-05T10:59", "2026-01-06T10:59"]),
        ("0 10 * * Sun-Sun", ["2026-01-11T10:00", "2026-01-18T10:00"]),
        ("0 10 * * 0-0", ["2026-01-11T10:00", "2026-01-18T10:00"]),
        ("0 10 * * 7-7", ["2026-01-11T10:00", "2026-01-18T10:00"]),
    ],
)
def test_a_range_with_equal_ends_is_its_single_value(expression: str, expected: list[str]) -> None:
    assert preview(cron(expression), CREATED, CREATED, 2) == [at(e) for e in expected]


@pytest.mark.parametrize("expression", ["0 10 * * MON-SUN", "0 10 * * MON-7", "0 10 * * 1-7", "0 10 * * *"])
def test_monday_to_sunday_is_every_day_however_it_is_written(expression: str) -> None:
    assert normalise_cron(expression) == expression
    assert preview(cron(expression), CREATED, CREATED, 7) == [CREATED + timedelta(hours=1, days=d) for d in range(7)]


def test_saturday_to_sunday_is_the_weekend() -> None:
    assert preview(cron("0 10 * * SAT-SUN"), CREATED, CREATED, 3) == [
        at("2026-01-10T10:00"),
        at("2026-01-11T10:00"),
        at("2026-01-17T10:00"),
    ]


def test_leap_day_runs_again_after_the_eight_years_across_2100() -> None:
    # Given Feb 29 just passed in 2096: 2100 is not a leap year, so the next is 2104
    sched = cron("0 0 29 2 *")

    assert next_occurrence(sched, at("2096-03-01T00:00"), CREATED) == at("2104-02-29T00:00")
    assert first_occurrence(sched, at("2096-02-29T00:00")) == at("2104-02-29T00:00")


def test_leap_day_on_a_sunday_runs_again_after_forty_years() -> None:
    # `*/7` starts with `*`, so the day must be both Feb 29 and a Sunday: 2088, then 2128 (2100 skips a leap day)
    assert preview(cron("0 0 29 2 */7"), at("2080-01-01T00:00"), CREATED, 2) == [
        at("2088-02-29T00:00"),
        at("2128-02-29T00:00"),
    ]


def test_a_schedule_that_never_comes_has_no_occurrence() -> None:
    assert first_occurrence(cron("0 0 30 2 *"), CREATED) is None
    assert first_occurrence(cron("0 0 31 APR,JUN,SEP,NOV *"), CREATED) is None


@pytest.mark.parametrize(
    ("dom", "dow", "expected"),
    [
        # Both restricted: either matches (the 1st, or a Monday)
        ("1", "MON", ["2026-01-26T10:00", "2026-02-01T10:00", "2026-02-02T10:00", "2026-02-09T10:00"]),
        # A field starting with `*` leaves the other to decide: Mondays with an odd date
        ("*/2", "MON", ["2026-02-09T10:00", "2026-02-23T10:00", "2026-03-09T10:00", "2026-03-23T10:00"]),
        ("?", "MON", ["2026-01-26T10:00", "2026-02-02T10:00", "2026-02-09T10:00", "2026-02-16T10:00"]),
        # Every day of the month, written without `*`, is restricted: with Mondays, every day
        ("1-31", "MON", [f"2026-01-{d}T10:00" for d in range(20, 24)]),
    ],
)
def test_day_of_month_and_day_of_week_combine_as_in_vixie_cron(dom: str, dow: str, expected: list[str]) -> None:
    assert preview(cron(f"0 10 {dom} * {dow}"), at("2026-01-20T00:00"), CREATED, 4) == [at(e) for e in expected]


def test_tabs_and_runs_of_spaces_separate_fields() -> None:
    assert normalise_cron("\t0  9\t* *  1-5 ") == "0 9 * * 1-5"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("61 * * * *", "minute must be 0-59, not 61"),
        ("0 24 * * *", "hour must be 0-23, not 24"),
        ("0 0 0 * *", "day of month must be 1-31, not 0"),
        ("0 0 * 13 *", "month must be 1-12, not 13"),
        ("0 0 * * 8", "day of week must be 0-7, not 8"),
        ("0 5-2 * * *", "hour range '5-2' runs backwards"),
        ("0 0 * * 1-0", "day of week range '1-0' runs backwards (Sunday is 7 at the end of a range)"),
        ("*/0 * * * *", "minute step must be at least 1"),
        ("x * * * *", "minute must be a number 0-59, not 'x'"),
        ("0 9 * *", "a cron expression has 5 fields (minute hour day-of-month month day-of-week), '0 9 * *' has 4"),
        ("0 9 * * * *", "has 6"),
        ("@reboot", "has 1"),
        ("0 9 * * MON#2", "day of week field 'MON#2' is not valid cron syntax"),
        # Characters that only look like cron
        ("0\u00a09 * * *", "cron fields are separated by ASCII spaces or tabs, not U+00A0 (NO-BREAK SPACE)"),
        ("0\u30009 * * *", "cron fields are separated by ASCII spaces or tabs, not U+3000 (IDEOGRAPHIC SPACE)"),
        ("0\u00859 * * *", "cron fields are separated by ASCII spaces or tabs, not U+0085"),
        ("0 9 * * *\n", "cron fields are separated by ASCII spaces or tabs, not U+000A"),
        ("\uff10 9 * * *", "a cron expression is written in ASCII; U+FF10 (FULLWIDTH DIGIT ZERO) is not allowed"),
        ("\u0663 9 * * *", "U+0663 (ARABIC-INDIC DIGIT THREE) is not allowed"),
    ],
)
def test_invalid_cron_gets_a_human_message(expression: str, message: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        normalise_cron(expression)

    assert message in str(caught.value)


def test_invalid_cron_message_reaches_the_schedule_validation_error() -> None:
    with pytest.raises(ValidationError, match="minute must be 0-59, not 61"):
        cron("61 * * * *")


def test_unknown_zone_is_refused_with_a_hint() -> None:
    with pytest.raises(InvalidSchedule, match="unknown time zone 'Mars/Olympus_Mons'; use an IANA name"):
        zone("Mars/Olympus_Mons")
    with pytest.raises(ValidationError, match="unknown time zone 'Europe/Atlantis'"):
        cron("0 9 * * *", "Europe/Atlantis")


def test_cron_end_before_start_is_refused() -> None:
    with pytest.raises(ValidationError, match="'end_at' must be after 'start_at'"):
        cron("0 * * * *", start_at="2026-01-05T12:00:00Z", end_at="2026-01-05T12:00:00Z")


# -- DST ----------------------------------------------------------------------------------------------------
# Spring forward: a local time in the gap runs at the first valid instant after it (the transition, which
# reads 03:00 local). Fall back: a local time that happens twice runs once, at its first instant.


@pytest.mark.parametrize(
    ("tz", "day_before", "gap_day_run_utc", "gap_day_local"),
    [
        # Berlin 2026-03-29: 02:00 CET -> 03:00 CEST
        ("Europe/Berlin", "2026-03-28T12:00", "2026-03-29T01:00", "2026-03-29T03:00"),
        # New York 2026-03-08: 02:00 EST -> 03:00 EDT
        ("America/New_York", "2026-03-07T12:00", "2026-03-08T07:00", "2026-03-08T03:00"),
    ],
)
def test_spring_forward_gap_runs_at_first_valid_instant(
    tz: str, day_before: str, gap_day_run_utc: str, gap_day_local: str
) -> None:
    # Given a daily 02:30 job, and a night where 02:30 does not exist
    sched = cron("30 2 * * *", tz)

    # When the next occurrence is computed on the day before the change
    runs = preview(sched, at(day_before), at(day_before), 2)

    # Then it runs once that night, at 03:00 local (the first valid instant after the gap) ...
    assert runs[0] == at(gap_day_run_utc)
    assert runs[0].astimezone(ZoneInfo(tz)).replace(tzinfo=None) == datetime.fromisoformat(gap_day_local)
    # ... and back at 02:30 local the night after
    assert runs[1].astimezone(ZoneInfo(tz)).strftime("%H:%M") == "02:30"
    assert runs[1] - runs[0] == timedelta(hours=23, minutes=30)


@pytest.mark.parametrize(
    ("tz", "start", "wall", "first_utc", "next_day_utc"),
    [
        # Berlin 2026-10-25: 03:00 CEST -> 02:00 CET; 02:30 happens at 00:30Z and again at 01:30Z
        ("Europe/Berlin", "2026-10-24T12:00", "30 2 * * *", "2026-10-25T00:30", "2026-10-26T01:30"),
        # New York 2026-11-01: 02:00 EDT -> 01:00 EST; 01:30 happens at 05:30Z and again at 06:30Z
        ("America/New_York", "2026-10-31T12:00", "30 1 * * *", "2026-11-01T05:30", "2026-11-02T06:30"),
    ],
)
def test_fall_back_repeated_time_runs_once_at_its_first_instant(
    tz: str, start: str, wall: str, first_utc: str, next_day_utc: str
) -> None:
    sched = cron(wall, tz)

    # When we ask for the occurrences around the repeated hour
    runs = preview(sched, at(start), at(start), 2)

    # Then the repeated wall time runs once, at its first instant, and the next run is the next day
    assert runs == [at(first_utc), at(next_day_utc)]
    # And asking from inside the second pass does not find the repeated time again
    second_pass = at(first_utc) + timedelta(hours=1)
    assert next_occurrence(sched, second_pass - timedelta(minutes=1), at(start)) == at(next_day_utc)


@pytest.mark.parametrize(
    ("tz", "from_utc", "to_utc", "repeat_start_utc"),
    [
        ("America/New_York", "2026-11-01T04:00", "2026-11-01T09:00", "2026-11-01T06:00"),
        ("Europe/Berlin", "2026-10-24T23:00", "2026-10-25T04:00", "2026-10-25T01:00"),
    ],
)
def test_every_15_minutes_does_not_run_twice_in_the_repeated_hour(
    tz: str, from_utc: str, to_utc: str, repeat_start_utc: str
) -> None:
    sched = cron("*/15 * * * *", tz)

    runs = [r for r in preview(sched, at(from_utc), at(from_utc), 100) if r <= at(to_utc)]

    # Then each wall time is used once ...
    walls = [r.astimezone(ZoneInfo(tz)).strftime("%H:%M") for r in runs]
    assert len(walls) == len(set(walls))
    # ... nothing runs in the second pass of the repeated hour ...
    repeat = at(repeat_start_utc)
    assert [r for r in runs if repeat <= r < repeat + timedelta(hours=1)] == []
    # ... and otherwise every 15 minutes: in (from, to], 5 real hours minus the repeated one, 4 runs an hour
    assert len(runs) == 4 * 4
    assert all(b > a for a, b in itertools.pairwise(runs))


@pytest.mark.parametrize(
    ("tz", "from_utc", "to_utc"),
    [
        ("America/New_York", "2026-03-08T05:00", "2026-03-08T09:00"),
        ("Europe/Berlin", "2026-03-28T23:00", "2026-03-29T03:00"),
    ],
)
def test_every_15_minutes_across_spring_forward_has_no_duplicate_instant(tz: str, from_utc: str, to_utc: str) -> None:
    sched = cron("*/15 * * * *", tz)

    runs = [r for r in preview(sched, at(from_utc), at(from_utc), 100) if r <= at(to_utc)]

    # Then the instants are 15 minutes apart throughout: the gap's wall times 02:15-02:45 are simply absent
    assert len(runs) == len(set(runs))
    assert {b - a for a, b in itertools.pairwise(runs)} == {timedelta(minutes=15)}


def test_lord_howe_half_hour_spring_forward_gap() -> None:
    # Lord Howe Island 2026-10-04: 02:00 +10:30 -> 02:30 +11:00 (a 30-minute shift)
    sched = cron("15 2 * * *", "Australia/Lord_Howe")

    runs = preview(sched, at("2026-10-02T12:00"), at("2026-10-02T12:00"), 3)

    # Then 02:15 (inside the gap) runs at 02:30 local, the first valid instant; the nights around it at 02:15
    assert [r.astimezone(ZoneInfo("Australia/Lord_Howe")).strftime("%m-%d %H:%M") for r in runs] == [
        "10-03 02:15",
        "10-04 02:30",
        "10-05 02:15",
    ]
    assert runs[1] == at("2026-10-03T15:30")


def test_lord_howe_half_hour_fall_back_runs_once() -> None:
    # Lord Howe Island 2026-04-05: 02:00 +11:00 -> 01:30 +10:30; 01:45 happens at 14:45Z and again at 15:15Z
    sched = cron("45 1 * * *", "Australia/Lord_Howe")

    runs = preview(sched, at("2026-04-03T20:00"), at("2026-04-03T20:00"), 2)

    assert runs == [at("2026-04-04T14:45"), at("2026-04-05T15:15")]


def test_kolkata_half_hour_offset_every_30_minutes() -> None:
    sched = cron("*/30 * * * *", "Asia/Kolkata")

    runs = preview(sched, at("2026-01-05T00:10"), at("2026-01-05T00:10"), 2)

    # The local :00 and :30 are the UTC :30 and :00
    assert runs == [at("2026-01-05T00:30"), at("2026-01-05T01:00")]
    assert [r.astimezone(ZoneInfo("Asia/Kolkata")).strftime("%H:%M") for r in runs] == ["06:00", "06:30"]


# -- preview / is_occurrence ---------------------------------------------------------------------------------


def test_preview_returns_count_strictly_after() -> None:
    sched = cron("0 * * * *")

    assert preview(sched, at("2026-01-05T10:00"), CREATED, 3) == [
        at("2026-01-05T11:00"),
        at("2026-01-05T12:00"),
        at("2026-01-05T13:00"),
    ]
    assert preview(sched, CREATED, CREATED, 0) == []


def test_is_occurrence_for_cron_rate_and_once() -> None:
    assert is_occurrence(cron("0 * * * *"), at("2026-01-05T11:00"), CREATED)
    assert not is_occurrence(cron("0 * * * *"), at("2026-01-05T11:30"), CREATED)
    assert not is_occurrence(cron("0 * * * *"), at("2026-01-05T11:00:00.001"), CREATED)

    rate = schedule(type="rate", every_seconds=600)
    assert is_occurrence(rate, at("2026-01-05T09:40"), CREATED)
    assert not is_occurrence(rate, at("2026-01-05T09:45"), CREATED)

    once = schedule(type="once", delay_seconds=30)
    assert is_occurrence(once, at("2026-01-05T09:00:30"), CREATED)
    assert not is_occurrence(once, at("2026-01-05T09:00:31"), CREATED)


def test_is_occurrence_respects_end_at() -> None:
    sched = cron("0 * * * *", end_at="2026-01-05T12:00:00Z")

    assert is_occurrence(sched, at("2026-01-05T12:00"), CREATED)
    assert not is_occurrence(sched, at("2026-01-05T13:00"), CREATED)


def test_is_occurrence_of_a_dst_shifted_run() -> None:
    # The 02:30 New York run moved to 03:00 EDT on the spring-forward night is an occurrence; 02:30 is not
    sched = cron("30 2 * * *", "America/New_York")

    assert is_occurrence(sched, at("2026-03-08T07:00"), at("2026-03-01T00:00"))
    assert not is_occurrence(sched, at("2026-03-08T07:30"), at("2026-03-01T00:00"))


def test_first_occurrence_is_none_when_the_window_is_over() -> None:
    sched = cron("0 * * * *", end_at="2026-01-05T08:00:00Z")

    assert first_occurrence(sched, CREATED) is None
    assert preview(sched, CREATED, CREATED, 5) == []


def test_occurrences_keep_millisecond_precision_only() -> None:
    sched = schedule(type="once", at="2026-01-05T09:00:00.123456Z")

    assert first_occurrence(sched, CREATED) == datetime(2026, 1, 5, 9, 0, 0, 123000, tzinfo=UTC)


@pytest.mark.parametrize("instant", ["0001-01-01T00:00:00Z", "0096-05-19T12:44:20.552Z", "1969-12-31T23:59:59Z",
                                     "2200-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])  # fmt: skip
def test_instants_outside_1970_to_2200_are_refused_with_a_clear_message(instant: str) -> None:
    # years before 1970 (e.g. 0096) would not survive the stored RFC 3339 form ("96-05-19T12:44:20.552Z")
    from pydantic import ValidationError

    from scheduler.core.model.job import BackfillRequest, JobSpec

    target = {"type": "http", "url": "https://example.com/x"}
    for body, build in (
        ({"from": instant, "to": "2026-01-01T00:00:00Z"}, BackfillRequest.model_validate),
        ({"schedule": {"type": "once", "at": instant}, "target": target}, JobSpec.model_validate),
        (
            {"schedule": {"type": "rate", "every_seconds": 60, "end_at": instant}, "target": target},
            JobSpec.model_validate,
        ),
    ):
        with pytest.raises(ValidationError, match="between 1970-01-01T00:00:00Z and 2200-01-01T00:00:00Z"):
            build(body)
