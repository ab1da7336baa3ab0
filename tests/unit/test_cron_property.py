"""Cron next-fire against an oracle written from docs/api.md alone: a brute-force walk over UTC minutes.

The oracle knows the documented syntax (items, ranges, steps, names, Sunday as 0 or 7, the day-field rule) and
the documented DST rules, and nothing of how the scheduler finds a next wall time: for each UTC minute it reads
the zone's wall clock and asks whether that minute runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, available_timezones

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.core.model.schedules import CronSchedule, next_occurrence

MINUTE = timedelta(minutes=1)
#: How far the oracle walks from `after`; a schedule whose next run lies beyond must not run inside it.
WINDOW = timedelta(days=1)
#: How many successive runs each example compares (enough to cross an offset change three hours ahead).
RUNS = 200
#: A repeated wall time comes again within this much (fall-back shifts are at most 2 h).
REPEAT_LOOKBACK = 180  # minutes
ZONES = sorted(available_timezones() - {"Factory", "localtime"})
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]

# name, lowest, highest value, where `*` and `a/step` end, names
FIELDS = (
    (0, 59, 59, []),
    (0, 23, 23, []),
    (1, 31, 31, []),
    (1, 12, 12, MONTHS),
    (0, 7, 6, DAYS),
)


# -- the oracle ---------------------------------------------------------------------------------------------


def number(token: str, names: list[str], low: int) -> int:
    upper = token.upper()
    return names.index(upper) + low if upper in names else int(token)


def allowed(field: str, index: int) -> set[int]:
    """The values of one field, read as docs/api.md describes them."""
    low, _, end, names = FIELDS[index]
    values: set[int] = set()
    for item in field.split(","):
        body, _, step_text = item.partition("/")
        step = int(step_text) if step_text else 1
        if body in ("*", "?"):
            first, last = low, end
        elif "-" in body:
            first_text, last_text = body.split("-")
            first, last = number(first_text, names, low), number(last_text, names, low)
            if index == 4 and last_text.upper() == "SUN" and first != 0:
                last = 7
        else:
            first = number(body, names, low)
            last = max(first, end) if step_text else first
        values |= set(range(first, last + 1, step))
    if index == 4 and 7 in values:
        values = (values - {7}) | {0}
    return values


@dataclass(frozen=True)
class Oracle:
    minutes: set[int]
    hours: set[int]
    days: set[int]
    months: set[int]
    weekdays: set[int]
    either_day: bool

    @classmethod
    def of(cls, expression: str) -> Oracle:
        fields = expression.split(" ")
        m, h, d, mo, w = (allowed(field, index) for index, field in enumerate(fields))
        either = not (fields[2][0] in "*?" or fields[4][0] in "*?")
        return cls(m, h, d, mo, w, either)

    def matches(self, wall: datetime) -> bool:
        if wall.minute not in self.minutes or wall.hour not in self.hours or wall.month not in self.months:
            return False
        on_day, on_weekday = wall.day in self.days, wall.isoweekday() % 7 in self.weekdays
        return (on_day or on_weekday) if self.either_day else (on_day and on_weekday)


def wall_clock(instant: datetime, tz: ZoneInfo) -> datetime:
    return instant.astimezone(tz).replace(tzinfo=None)


def oracle_runs(oracle: Oracle, tz: ZoneInfo, after: datetime, until: datetime, count: int) -> list[datetime]:
    """The first `count` UTC minutes in (after, until] that run: its wall time matches and that wall time has not been
    seen before (a repeated time runs once, the first time), or it is the first instant after a gap whose
    skipped wall times hold a match (a time that does not exist runs at the first valid instant after it)."""
    instant = after.replace(second=0, microsecond=0) - REPEAT_LOOKBACK * MINUTE
    seen: set[datetime] = set()
    previous: datetime | None = None
    runs: list[datetime] = []
    while instant <= until and len(runs) < count:
        wall = wall_clock(instant, tz)
        assert wall.second == 0, "the zone's offset is not whole minutes"
        if previous is not None and instant > after:
            skipped = previous + MINUTE
            in_gap = False
            while skipped < wall and not in_gap:
                in_gap = oracle.matches(skipped)
                skipped += MINUTE
            if (wall not in seen and oracle.matches(wall)) or in_gap:
                runs.append(instant)
        seen.add(wall)
        previous = wall
        instant += MINUTE
    return runs


# -- random expressions ---------------------------------------------------------------------------------------


@st.composite
def values(draw: st.DrawFn, index: int) -> str:
    low, high, _, names = FIELDS[index]
    value = draw(st.integers(low, high))
    if names and value - low < len(names) and draw(st.booleans()):
        name = names[value - low]
        return draw(st.sampled_from([name, name.lower(), name.title()]))
    return str(value)


@st.composite
def items(draw: st.DrawFn, index: int) -> str:
    low, high, _, _ = FIELDS[index]
    kind = draw(st.sampled_from(["star", "value", "range", "equal", "stepped", "from"]))
    step = f"/{draw(st.integers(1, max(2, (high - low) // 2)))}"
    if kind == "star":
        return draw(st.sampled_from(["*", "?"] if index in (2, 4) else ["*"])) + draw(st.sampled_from(["", step]))
    if kind == "value":
        return draw(values(index))
    if kind == "equal":
        token = draw(values(index))
        return f"{token}-{token}" + draw(st.sampled_from(["", step]))
    if kind == "from":
        return draw(values(index)) + step
    first, last = sorted(draw(st.lists(st.integers(low, high), min_size=2, max_size=2)))
    first_text, last_text = str(first), str(last)
    if index == 4 and draw(st.booleans()):
        first_text = DAYS[first % 7]
        last_text = "SUN" if last == 7 and first > 0 else DAYS[last] if last < 7 else "7"
    return f"{first_text}-{last_text}" + (step if kind == "stepped" else "")


@st.composite
def fields(draw: st.DrawFn, index: int) -> str:
    if index == 1 and draw(st.booleans()):
        return "*"  # every hour half the time, so that runs often fall in an offset change's gap or repeat
    return ",".join(draw(st.lists(items(index), min_size=1, max_size=3)))


@st.composite
def expressions(draw: st.DrawFn) -> str:
    return " ".join(draw(fields(index)) for index in range(5))


def transitions(tz: ZoneInfo, year: int) -> list[datetime]:
    """The UTC hours of the year by which the zone's offset changed since the hour before."""
    day = datetime(year, 1, 1, tzinfo=UTC)
    found, offset = [], day.astimezone(tz).utcoffset()
    while day.year == year:
        if (now := day.astimezone(tz).utcoffset()) != offset:
            hour = day - timedelta(days=1)
            while hour.astimezone(tz).utcoffset() == offset:
                hour += timedelta(hours=1)
            found.append(hour)
            offset = now
        day += timedelta(days=1)
    return found


@st.composite
def starts(draw: st.DrawFn, tz: ZoneInfo) -> datetime:
    """A moment to search from: often in the three hours before one of the zone's offset changes."""
    year = draw(st.integers(1980, 2190))
    changes = transitions(tz, year)
    if changes and draw(st.sampled_from([True, True, True, False])):
        base = draw(st.sampled_from(changes)) - timedelta(minutes=draw(st.integers(1, 180)))
    else:
        base = datetime(year, 1, 1, tzinfo=UTC) + timedelta(
            days=draw(st.integers(0, 364)), hours=draw(st.integers(0, 23))
        )
    return base.replace(minute=0) + timedelta(
        minutes=draw(st.integers(0, 59)), seconds=draw(st.sampled_from([0, 0, 30]))
    )


#: The zones that change their offset in 2030 (most keep doing so for years either side): drawn half the time.
SHIFTING_ZONES = [name for name in ZONES if transitions(ZoneInfo(name), 2030)]


# -- the property ---------------------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    expression=expressions(),
    zone_name=st.one_of(st.sampled_from(SHIFTING_ZONES), st.sampled_from(ZONES)),
)
def test_next_fire_agrees_with_a_minute_by_minute_walk(data: st.DataObject, expression: str, zone_name: str) -> None:
    tz = ZoneInfo(zone_name)
    after = data.draw(starts(tz), label="after")
    schedule = CronSchedule(type="cron", expression=expression, timezone=zone_name)
    until = after + WINDOW

    expected = oracle_runs(Oracle.of(expression), tz, after, until, RUNS)

    # Then the scheduler walks the same runs, in order, and nothing else inside the window
    cursor = after
    for run in expected:
        assert next_occurrence(schedule, cursor, after) == run, (expression, zone_name, cursor)
        cursor = run
    if len(expected) < RUNS:
        following = next_occurrence(schedule, cursor, after)
        assert following is None or following > until, (expression, zone_name, cursor, following)
