"""Cron: the 5-field expressions of Vixie cron, and the instants they fire at in an IANA time zone.

Two DST rules map a local wall time to its instant: a local time that does not exist (spring forward) fires at the
first valid instant after the gap, and a local time that happens twice (fall back) fires once, at its first instant.
"""

from __future__ import annotations

import re
import unicodedata
from calendar import monthrange
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import MAXYEAR, UTC, date, datetime, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_MONTHS = {
    m: i + 1 for i, m in enumerate(["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])
}
_DAYS = {d: i for i, d in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
_SUNDAY = 0
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
#: Where `*`, `?` and `a/step` end in each field: day of week runs Sunday (0) to Saturday (6); 7 is another
#: name for Sunday, written only on its own or at the end of a range.
_LAST = (59, 23, 31, 12, 6)
_DAY_OF_WEEK = 4
_ITEM = re.compile(r"^(?P<range>\*|\?|[A-Za-z0-9]+(?:-[A-Za-z0-9]+)?)(?:/(?P<step>[0-9]+))?$", re.ASCII)
_SEPARATORS = " \t"
#: How far ahead the next wall time is searched. The Gregorian calendar repeats itself, weekdays included,
#: every 400 years (146,097 days, exactly 20,871 weeks), so a time that does not come within 400 years never
#: comes. Rare schedules need more than a few years: `0 0 29 2 *` waits 8 years across 2100, which is not a
#: leap year, and "Feb 29 on a Sunday" (`0 0 29 2 */7`) waits 40 years from 2088 to 2128.
_SEARCH_YEARS = 400


class InvalidSchedule(ValueError):
    """A schedule that can never be valid; the message is written for the person who sent it."""


def _value(token: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    if token.upper() in names:
        return names[token.upper()]
    if not token.isdigit():
        raise InvalidSchedule(f"{name} must be a number {low}-{high}, not '{token}'")
    value = int(token)
    if not low <= value <= high:
        raise InvalidSchedule(f"{name} must be {low}-{high}, not {value}")
    return value


def _foreign_character(expression: str) -> str | None:
    """Why a character has no place in a cron expression, for the first that has none.

    Fields are separated by ASCII spaces and tabs only (as in Vixie cron): a no-break or ideographic space
    looks like a separator but is not one, and a reader could not tell what was meant."""
    for char in expression:
        if char in _SEPARATORS or " " < char < "\x7f":
            continue
        described = f"U+{ord(char):04X} ({unicodedata.name(char, 'a control character')})"
        if char.isspace():
            return f"cron fields are separated by ASCII spaces or tabs, not {described}"
        return f"a cron expression is written in ASCII; {described} is not allowed"
    return None


def _expand(item: str, field: str, index: int) -> set[int]:
    """The values one item of a field stands for (`*`, `5`, `1-5`, `MON-FRI`, `*/15`, `10-50/20`, `5/15`)."""
    name, low, high, names = _FIELDS[index]
    match = _ITEM.match(item)
    if not match:
        raise InvalidSchedule(f"{name} field '{field}' is not valid cron syntax")
    step = 1 if match["step"] is None else int(match["step"])
    if step == 0:
        raise InvalidSchedule(f"{name} step must be at least 1")
    bounds = match["range"]
    if bounds in ("*", "?"):
        first, last = low, _LAST[index]
    else:
        first_token, dash, last_token = bounds.partition("-")
        first = _value(first_token, name, low, high, names)
        if dash:
            last = _value(last_token, name, low, high, names)
            if index == _DAY_OF_WEEK and last == _SUNDAY and last_token.isalpha() and first != _SUNDAY:
                last = 7  # MON-SUN is Monday to Sunday, as MON-7 is
            if last < first:
                hint = " (Sunday is 7 at the end of a range)" if index == _DAY_OF_WEEK else ""
                raise InvalidSchedule(f"{name} range '{bounds}' runs backwards{hint}")
        else:
            # `5/15` runs from 5 to the end of the field; a lone `5` is 5 (so is `5-5`, and `59-59/15` is 59).
            last = max(first, _LAST[index]) if match["step"] is not None else first
    values = set(range(first, last + 1, step))
    if index == _DAY_OF_WEEK and 7 in values:
        values = (values - {7}) | {_SUNDAY}
    return values


@dataclass(frozen=True)
class _CronPlan:
    """The values each field of a cron expression allows, and how its two day fields combine."""

    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 is Sunday
    either_day: bool

    def runs_on(self, day: int, weekday: int) -> bool:
        if self.either_day:
            return day in self.days or weekday in self.weekdays
        return day in self.days and weekday in self.weekdays


def _fields(expression: str) -> list[str]:
    if reason := _foreign_character(expression):
        raise InvalidSchedule(reason)
    text = " ".join(re.split(r"[ \t]+", expression.strip(_SEPARATORS)))
    text = _MACROS.get(text.lower(), text)
    fields = text.split(" ")
    if len(fields) != 5:
        raise InvalidSchedule(
            f"a cron expression has 5 fields (minute hour day-of-month month day-of-week), "
            f"'{expression}' has {len(fields)}"
        )
    return fields


@lru_cache(maxsize=4096)
def _plan(expression: str) -> _CronPlan:
    fields = _fields(expression)
    minutes, hours, days, months, weekdays = (
        set[int]().union(*(_expand(item, field, index) for item in field.split(",")))
        for index, field in enumerate(fields)
    )
    # Vixie cron's rule: when both day fields are restricted, a day matches if either does; a field that starts
    # with `*` (or `?`) leaves the other alone to decide.
    starred = fields[2][0] in "*?" or fields[4][0] in "*?"
    return _CronPlan(
        tuple(sorted(minutes)),
        tuple(sorted(hours)),
        frozenset(days),
        frozenset(months),
        frozenset(weekdays),
        either_day=not starred,
    )


#: The fields where `?` may stand: day of month and day of week, as in EventBridge and Quartz, where it means "no
#: specific value" (here the same as `*`).
_NO_SPECIFIC_VALUE = (2, _DAY_OF_WEEK)


def misplaced_no_specific_value(expression: str) -> str | None:
    """Why `expression` has a `?` outside the day-of-month and day-of-week fields, or None. A new or changed
    schedule with one is refused: `? * * * *` reads as "no specific minute" and would run every minute. (The parser
    itself still takes it everywhere, as `*`, so a job stored before this rule is read and runs as it did.)"""
    for index, field in enumerate(_fields(expression)):
        if index in _NO_SPECIFIC_VALUE or not any(item.partition("/")[0] == "?" for item in field.split(",")):
            continue
        name = _FIELDS[index][0]
        return (
            f"{name} field '{field}': '?' (no specific value) is allowed only in the day-of-month and day-of-week "
            f"fields; write '*' for every {name}"
        )
    return None


def normalise_cron(expression: str) -> str:
    """Validate a 5-field cron expression and return it with macros expanded and single spaces between fields.

    Messages say which field is wrong and why, e.g. "minute must be 0-59, not 61".
    """
    _plan(expression)
    return " ".join(_fields(expression))


def zone(name: str) -> ZoneInfo:
    try:
        if name not in _ZONES:
            raise ZoneInfoNotFoundError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidSchedule(f"unknown time zone '{name}'; use an IANA name such as 'Europe/Berlin'") from exc


_ZONES = frozenset(available_timezones()) | {"UTC"}


def _local_to_utc(naive: datetime, tz: ZoneInfo) -> datetime:
    """Map a local wall time to its instant with the DST rules of this module.

    Repeated times (fall back) take the first instant (fold=0). Times inside a gap (spring forward) take
    the first valid instant after the gap, i.e. the transition instant itself.
    """
    candidate = naive.replace(tzinfo=tz, fold=0)
    if candidate.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == naive:
        return candidate.astimezone(UTC)
    # Inside a gap: walk forward in minutes to the first wall time that exists (gaps are <= 2 h).
    probe = naive
    for _ in range(24 * 60):
        probe += timedelta(minutes=1)
        probe = probe.replace(second=0, microsecond=0)
        aware = probe.replace(tzinfo=tz, fold=0)
        if aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == probe:
            return aware.astimezone(UTC)
    raise InvalidSchedule(f"local time {naive.isoformat()} cannot be mapped to an instant")


def _wall_times(plan: _CronPlan, after: datetime) -> Iterator[datetime]:
    """The local wall times the plan matches strictly after the naive `after`, earliest first, for
    `_SEARCH_YEARS` years."""
    year, month = after.year, after.month
    for _ in range(_SEARCH_YEARS * 12 + 1):
        if year > MAXYEAR:
            return
        length = monthrange(year, month)[1]
        if month in plan.months and (plan.either_day or min(plan.days) <= length):
            first_weekday = (date(year, month, 1).weekday() + 1) % 7  # Sunday is 0
            first_day = after.day if (year, month) == (after.year, after.month) else 1
            for day in range(first_day, length + 1):
                if not plan.runs_on(day, (first_weekday + day - 1) % 7):
                    continue
                today = (year, month, day) == (after.year, after.month, after.day)
                for hour in plan.hours:
                    if today and hour < after.hour:
                        continue
                    for minute in plan.minutes:
                        wall = datetime(year, month, day, hour, minute)
                        if wall > after:
                            yield wall
        month, year = (1, year + 1) if month == 12 else (month + 1, year)


def next_fire(expression: str, timezone: str, after: datetime) -> datetime | None:
    """The first instant strictly after the aware `after` at which `expression` fires in `timezone`, or None when
    it fires at none within `_SEARCH_YEARS` years."""
    tz = zone(timezone)
    # Walk naive local wall times; each is mapped to UTC with the DST rules, and anything not after `after` is
    # skipped (in the second pass of a repeated hour the wall clock reads "earlier", and every wall time in a
    # gap maps to the gap's end, which runs once).
    local = after.astimezone(tz).replace(tzinfo=None)
    for wall in _wall_times(_plan(expression), local):
        instant = _local_to_utc(wall, tz)
        if instant > after:
            return instant
    return None
