"""Schedules and their occurrences.

Occurrences are UTC instants. Each next occurrence is computed from the *scheduled* instant of the previous
one, never from `now`, so a recurring job does not drift. Cron runs in an IANA zone with two DST rules
(`scheduler.core.model.cron`): a local time that does not exist (spring forward) runs at the first valid instant
after the gap, and a local time that happens twice (fall back) runs once, at its first instant.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from scheduler.core.model.cron import next_fire, normalise_cron, zone
from scheduler.core.model.timefmt import truncate_ms, utc

MAX_DELAY_SECONDS = 5 * 365 * 24 * 3600
MAX_RATE_SECONDS = 366 * 24 * 3600

#: The instants the API accepts: far enough on both sides for any schedule, and always four-digit years (RFC 3339).
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_INSTANT = datetime(2200, 1, 1, tzinfo=UTC)


def _sane_instant(value: datetime) -> datetime:
    if not EARLIEST_INSTANT <= value < LATEST_INSTANT:
        raise ValueError("must be between 1970-01-01T00:00:00Z and 2200-01-01T00:00:00Z")
    return value


def _date_time_text(value: object) -> object:
    """An RFC 3339 string (or a datetime built in code), never a number: pydantic would read 0 as 1970-01-01."""
    if isinstance(value, str | datetime):
        return value
    raise ValueError("must be an RFC 3339 date-time string, e.g. 2026-12-01T09:00:00+01:00")


#: An offset-aware date-time within [EARLIEST_INSTANT, LATEST_INSTANT).
Instant = Annotated[
    AwareDatetime,
    BeforeValidator(_date_time_text),
    AfterValidator(_sane_instant),
    Field(
        description="an RFC 3339 date-time with an offset, from 1970-01-01T00:00:00Z to before 2200",
        json_schema_extra={"pattern": "^(19[7-9][0-9]|2[01][0-9]{2})-"},
    ),
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _exactly_one_of_at_or_delay(schema: dict[str, Any]) -> None:
    """The JSON schema says what the validator below checks: exactly one of the two, neither null."""
    properties = schema.get("properties", {})
    for name in ("at", "delay_seconds"):
        options = [o for o in properties.get(name, {}).pop("anyOf", []) if o.get("type") != "null"]
        if options:
            properties[name].update(options[0])
        properties.get(name, {}).pop("default", None)
    schema["oneOf"] = [{"required": ["at"]}, {"required": ["delay_seconds"]}]


class OnceSchedule(_Strict):
    """Fire once: at an instant with an explicit offset, or `delay_seconds` after the job is created."""

    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_exactly_one_of_at_or_delay)

    type: Literal["once"]
    at: Instant | None = None
    delay_seconds: int | None = Field(strict=True, default=None, ge=0, le=MAX_DELAY_SECONDS)

    @model_validator(mode="before")
    @classmethod
    def _no_nulls(cls, value: Any) -> Any:
        if isinstance(value, dict) and any(value.get(k, 0) is None for k in ("at", "delay_seconds")):
            raise ValueError("'at' and 'delay_seconds' cannot be null: give exactly one of them")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> OnceSchedule:
        if (self.at is None) == (self.delay_seconds is None):
            raise ValueError("a 'once' schedule needs exactly one of 'at' or 'delay_seconds'")
        return self


class CronSchedule(_Strict):
    """A 5-field cron expression evaluated in an IANA time zone, optionally bounded by start/end."""

    type: Literal["cron"]
    expression: str = Field(min_length=1, max_length=200)
    timezone: str = "UTC"
    start_at: Instant | None = None
    end_at: Instant | None = None

    @field_validator("expression")
    @classmethod
    def _valid_cron(cls, value: str) -> str:
        return normalise_cron(value)

    @field_validator("timezone")
    @classmethod
    def _valid_zone(cls, value: str) -> str:
        zone(value)
        return value

    @model_validator(mode="after")
    def _ordered(self) -> CronSchedule:
        _check_window(self.start_at, self.end_at)
        return self


class RateSchedule(_Strict):
    """Every `every_seconds` (at least 1), anchored at `start_at` or one period after creation."""

    type: Literal["rate"]
    every_seconds: int = Field(strict=True, ge=1, le=MAX_RATE_SECONDS)
    start_at: Instant | None = None
    end_at: Instant | None = None

    @model_validator(mode="after")
    def _ordered(self) -> RateSchedule:
        _check_window(self.start_at, self.end_at)
        return self


def _check_window(start: datetime | None, end: datetime | None) -> None:
    if start is not None and end is not None and end <= start:
        raise ValueError("'end_at' must be after 'start_at'")


Schedule = Annotated[OnceSchedule | CronSchedule | RateSchedule, Field(discriminator="type")]


def is_recurring(schedule: Schedule) -> bool:
    return not isinstance(schedule, OnceSchedule)


def _next_rate(schedule: RateSchedule, after: datetime, created_at: datetime) -> datetime:
    period = timedelta(seconds=schedule.every_seconds)
    if schedule.start_at is not None:
        anchor = utc(schedule.start_at)
        if after < anchor:
            return anchor
    else:
        anchor = created_at
    steps = (after - anchor) // period + 1
    return anchor + steps * period


def next_occurrence(schedule: Schedule, after: datetime, created_at: datetime) -> datetime | None:
    """The first occurrence strictly after `after`, or None when the schedule has no more.

    `created_at` anchors `once`+`delay_seconds` and `rate` schedules without a `start_at`.
    """
    after = utc(after)
    # Occurrences are millisecond instants; an anchor finer than that would make a rate's truncated next
    # occurrence land at or before `after`, and a caller walking the schedule would never move on.
    created_at = truncate_ms(created_at)
    result: datetime | None
    if isinstance(schedule, OnceSchedule):
        at = first_once_instant(schedule, created_at)
        result = at if at > after else None
    elif isinstance(schedule, CronSchedule):
        if schedule.start_at is not None and after < utc(schedule.start_at):
            after = utc(schedule.start_at) - timedelta(milliseconds=1)
        result = next_fire(schedule.expression, schedule.timezone, after)
    else:
        result = _next_rate(schedule, after, created_at)
    if result is None:
        return None
    end = getattr(schedule, "end_at", None)
    if end is not None and result > utc(end):
        return None
    return truncate_ms(result)


def first_once_instant(schedule: OnceSchedule, created_at: datetime) -> datetime:
    if schedule.at is not None:
        return truncate_ms(utc(schedule.at))
    return truncate_ms(created_at + timedelta(seconds=schedule.delay_seconds or 0))


def first_occurrence(schedule: Schedule, created_at: datetime) -> datetime | None:
    """The first occurrence of a schedule for a job created (or resumed) at `created_at`.

    A `once` schedule always has its one occurrence, even when `at` is already past (it is then due at
    once and the misfire policy decides). Recurring schedules start strictly after `created_at`.
    """
    if isinstance(schedule, OnceSchedule):
        return first_once_instant(schedule, created_at)
    return next_occurrence(schedule, created_at, created_at)


def preview(schedule: Schedule, after: datetime, created_at: datetime, count: int) -> list[datetime]:
    """The next `count` occurrences strictly after `after`."""
    found: list[datetime] = []
    cursor = after
    while len(found) < count:
        nxt = next_occurrence(schedule, cursor, created_at)
        if nxt is None:
            break
        found.append(nxt)
        cursor = nxt
    return found


def is_occurrence(schedule: Schedule, instant: datetime, created_at: datetime) -> bool:
    """Whether `instant` is one of the schedule's occurrences (used to spot superseded dispatches)."""
    if isinstance(schedule, OnceSchedule):
        return first_once_instant(schedule, created_at) == instant
    return next_occurrence(schedule, instant - timedelta(milliseconds=1), created_at) == instant


def unindexed_occurrence(schedule: Schedule, created_at: datetime) -> datetime | None:
    """The one occurrence of a job that its run history reads by key instead of from the index: a one-shot job's
    scheduled instant (its key is known from the job). Its ledger item stays out of the run-history index, which
    saves the index writes of its claim and finish (2 write units a fire). None for recurring jobs: the overlap
    policy reads their running occurrences from the index."""
    if isinstance(schedule, OnceSchedule):
        return first_once_instant(schedule, created_at)
    return None
