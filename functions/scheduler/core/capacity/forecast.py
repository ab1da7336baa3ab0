"""The forecast: how many occurrences fall due per minute over the next hour, per tenant and overall,
from the stored timers and the recurring schedules they carry.

Cheap by construction: it reads only the buckets of the window (and a few minutes before it, whose recurring
timers may already have sent part of the window), eventually consistent, through `TimerStore.upcoming`. A stored
timer is a chain's next link; its `ChainPlan` snapshot holds the schedule, so the chain's later occurrences inside
the window are computed here, not read.

An upper bound, by design: a timer whose job was cancelled or edited since it was written still counts until the
sweep that reaches it drops it (the forecast does not read jobs). Of a job's scheduled timers only those of its
newest version count, so an edit is not counted twice.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler.core.model.keys import fire_at
from scheduler.core.model.schedules import is_recurring, next_occurrence
from scheduler.core.model.timefmt import ONE_MINUTE, minute_of
from scheduler.core.ports import Clock, Metrics, Timer, TimerStore
from scheduler.core.sweep.dispatch import MAX_EXPANSION

MAX_MINUTES = 180


@dataclass(frozen=True)
class MinuteForecast:
    minute: datetime
    due: int
    #: The most occurrences due inside one second of the minute (what a herd needs at once).
    peak_second: int
    by_tenant: dict[str, int] = field(default_factory=dict)
    #: Per priority lane (each lane has its own ready queue and worker mapping): (due, peak second).
    by_lane: dict[str, tuple[int, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class Forecast:
    start: datetime
    minutes: list[MinuteForecast]
    #: Timers read to compute it (its cost: one eventually consistent read of each).
    timers_read: int

    @property
    def total(self) -> int:
        return sum(m.due for m in self.minutes)

    @property
    def peak(self) -> MinuteForecast | None:
        return max(self.minutes, key=lambda m: (m.due, -m.minute.timestamp()), default=None)


def _occurrences(timers: list[Timer], end: datetime) -> list[tuple[str, str, datetime]]:
    """(tenant, lane, fire time) of every occurrence the timers stand for that falls due before `end`.

    A chain can have several stored timers in the buckets read (the sweep wrote the next one, the old one stays
    until its TTL): each is expanded until `end` or until it reaches an instant already counted - from there on it
    is the same chain."""
    newest: dict[str, int] = {}
    for timer in timers:
        if timer.kind == "scheduled" and timer.plan is not None:
            newest[timer.job_id] = max(newest.get(timer.job_id, timer.version), timer.version)
    out: list[tuple[str, str, datetime]] = []
    chains: dict[str, set[datetime]] = {}
    for timer in sorted(timers, key=lambda t: t.scheduled_for):
        plan = timer.plan
        if plan is None or timer.kind != "scheduled":
            out.append(
                (timer.tenant, timer.priority, timer.due_at)
            )  # a trigger, a backfill or a deferred occurrence: once
            continue
        if timer.version != newest[timer.job_id]:
            continue  # superseded by an edit: the sweep will drop it
        counted = chains.setdefault(timer.job_id, set())
        instant: datetime | None = timer.scheduled_for
        # Jitter only delays (a fire time is never before its instant), but not monotonically: an occurrence jittered
        # past `end` can be followed by one that is not. So stop at the first instant at or after `end`, not at the
        # first fire time past it.
        while instant is not None and instant < end and instant not in counted and len(counted) < MAX_EXPANSION:
            at = fire_at(timer.job_id, instant, plan.jitter_seconds)
            counted.add(instant)
            if at < end:
                out.append((timer.tenant, timer.priority, at))
            instant = next_occurrence(plan.schedule, instant, plan.anchor) if is_recurring(plan.schedule) else None
    return out


def forecast(timers: Iterable[Timer], start: datetime, minutes: int, tenant: str | None = None) -> Forecast:
    """Occurrences due per minute in [start, start + minutes) (start rounded down to its minute); only `tenant`'s
    when given. `timers` must include those of a few minutes before `start` (sent ahead by the look-ahead)."""
    first = minute_of(start)
    end = first + minutes * ONE_MINUTE
    counts: dict[datetime, dict[str, int]] = {}
    seconds: dict[datetime, Counter[int]] = {}
    lanes: dict[datetime, dict[str, Counter[int]]] = {}
    materialised = list(timers)
    for who, lane, at in _occurrences(materialised, end):
        if at < first or at >= end or (tenant is not None and who != tenant):
            continue
        minute = minute_of(at)
        per_tenant = counts.setdefault(minute, {})
        per_tenant[who] = per_tenant.get(who, 0) + 1
        second = math.floor(at.timestamp())
        seconds.setdefault(minute, Counter())[second] += 1
        lanes.setdefault(minute, {}).setdefault(lane, Counter())[second] += 1
    rows = []
    for index in range(minutes):
        minute = first + index * ONE_MINUTE
        per_tenant = counts.get(minute, {})
        rows.append(
            MinuteForecast(
                minute,
                sum(per_tenant.values()),
                max(seconds.get(minute, Counter({0: 0})).values()),
                dict(sorted(per_tenant.items())),
                {lane: (c.total(), max(c.values())) for lane, c in sorted(lanes.get(minute, {}).items())},
            )
        )
    return Forecast(first, rows, len(materialised))


class ForecastService:
    """Reads the window's buckets and forecasts them. `lookback` covers the minutes before the window whose
    timers may already have planned occurrences inside it (the sweeper's look-ahead, its last minute and the seal
    margin)."""

    def __init__(self, timers: TimerStore, clock: Clock, lookback: timedelta, metrics: Metrics) -> None:
        self.timers = timers
        self.clock = clock
        self.lookback = lookback
        self.metrics = metrics

    def forecast(self, minutes: int, tenant: str | None = None) -> Forecast:
        if not 1 <= minutes <= MAX_MINUTES:
            raise ValueError(f"minutes must be 1-{MAX_MINUTES}")
        start = minute_of(self.clock.now())
        first = minute_of(start - self.lookback)
        read: list[Timer] = []
        recorded = self.timers.recorded_shards()  # one read for the window, not one a minute
        minute = first
        while minute < start + minutes * ONE_MINUTE:
            read += self.timers.upcoming(minute, recorded)
            minute += ONE_MINUTE
        return forecast(read, start, minutes, tenant)
