"""Per-tenant fairness: dispatch budgets (rate and burst) that keep one tenant's burst from flooding the workers
everyone shares.

Why a calendar, not a token bucket taken at dispatch time: the sweeper dispatches minutes ahead (SQS holds each
message until its fire time). Tokens taken when the sweep *sends* would let a tenant spend its whole look-ahead's
worth of refill in advance and then release it all at one fire time; and a bucket kept in *release* time (GCRA) is
pushed behind a tenant's own reservations minutes ahead, so an occurrence due now would wait for them. So each
tenant's budget is a calendar of release windows: window `W = max(1 s, burst / rate)` long, each holding at most
`capacity = ceil(rate * W)` (>= burst) releases. An occurrence is released in the first window at or after its fire
time that has room - at its fire time if the tenant is within budget. Any `t` seconds then see at most
`2 * capacity + rate * t` releases of one tenant, whatever order its occurrences are dispatched in.

The calendar is one DynamoDB item per tenant (windows from now to SQS's 15-minute horizon; past ones are dropped
once older than the clock-skew allowance, `CLOCK_SKEW`), written with a conditional write on its version:
concurrent sweepers never both fill the same window, whatever their clocks say within that allowance. A tenant
over its budget is *delayed, never dropped*: its messages go to SQS with a later `DelaySeconds`, and what would
have to wait beyond SQS's delay cap goes back into a later time bucket as a deferred timer, admitted by a later
sweep. Every path that sends occurrences goes through here: the sweep's buckets (so `run_all` catch-up), the late
lane, the API's direct dispatch of near-term jobs, and backfill waves.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from scheduler.core.model.timefmt import from_ms, to_ms, truncate_ms
from scheduler.core.ports import BudgetCalendar, Clock, Dispatch, Metrics, TenantBudgetStore
from scheduler.core.tenancy.per_tenant import PerTenant

log = logging.getLogger(__name__)

#: The latest release a message can be given now: SQS holds a message at most 900 s; keep a minute of margin.
MAX_RELEASE_DELAY = timedelta(seconds=840)
#: Windows this far before now stay in the calendar: another sweeper's clock may run that far behind (the seal
#: margin's allowance) and still book into them. Dropped as soon as this one's now passed them, a window a slower
#: clock still sees open would look empty to it, and take a second window's worth of releases.
CLOCK_SKEW = timedelta(seconds=30)
#: Conditional writes lost to another sweeper before the admission gives up for this pass (and defers).
WRITE_ATTEMPTS = 5


@dataclass(frozen=True)
class Budget:
    """A tenant's dispatch budget: `rate` occurrences per second on average, `burst` at once."""

    rate: float
    burst: int

    @property
    def window_ms(self) -> int:
        return max(1000, math.ceil(self.burst / self.rate * 1000))

    @property
    def capacity(self) -> int:
        """Releases one window holds: the burst, or a second's worth of rate when that is more."""
        return max(self.burst, math.ceil(self.rate * self.window_ms / 1000))


#: Dispatch budgets: `default` for everyone, `overrides` by tenant id.
FairnessConfig = PerTenant[Budget]


class Allowance(Protocol):
    """How many releases a calendar lets into each of its windows."""

    @property
    def window_ms(self) -> int: ...

    @property
    def capacity(self) -> int: ...


def reserve(
    calendar: BudgetCalendar | None,
    wanted: Sequence[datetime],
    budget: Allowance,
    now: datetime,
    latest: datetime,
    *,
    keep: timedelta = CLOCK_SKEW,
    rescale: bool = False,
) -> tuple[list[datetime], BudgetCalendar]:
    """Release instants for a prefix of `wanted` (ascending): each in the first window at or after it with room,
    none later than `latest`. Returns them and the calendar with them booked (windows that ended more than `keep`
    before `now` dropped; `keep` is at least the clock-skew allowance).

    A calendar of another window size is dropped (a changed tenant budget starts a new calendar), unless `rescale`:
    then each booked window counts in the new window it starts in, so what was booked stays booked (a flow-control
    key whose rate changes keeps its order and never releases a second time into the same instants). A booking
    that was delayed (released after it was wanted) is counted in `held`, by the second of its release."""
    size = budget.window_ms
    kept = to_ms(now - max(keep, CLOCK_SKEW)) // size
    booked: dict[int, int] = {}
    held: dict[int, tuple[int, int]] = {}
    if calendar is not None:
        if calendar.window_ms == size:
            booked = {w: n for w, n in calendar.booked.items() if w >= kept}
        elif rescale:
            for w, count in calendar.booked.items():
                window = w * calendar.window_ms // size
                if window >= kept:
                    booked[window] = booked.get(window, 0) + count
        if calendar.window_ms == size or rescale:
            first_second = to_ms(now - max(keep, CLOCK_SKEW)) // 1000
            held = {second: h for second, h in calendar.held.items() if second >= first_second}
    releases: list[datetime] = []
    window = 0
    for instant in wanted:
        # `wanted` is ascending and bookings are only added: every window before the last one booked is still full.
        window = max(to_ms(instant) // size, window)
        while booked.get(window, 0) >= budget.capacity:
            window += 1
        release = max(instant, from_ms(window * size))
        if release > latest:
            break
        booked[window] = booked.get(window, 0) + 1
        releases.append(release)
        if release > instant:
            second = to_ms(release) // 1000
            count, oldest = held.get(second, (0, to_ms(instant)))
            held[second] = (count + 1, min(oldest, to_ms(instant)))
    version = calendar.version + 1 if calendar is not None else 1
    return releases, BudgetCalendar(version, size, booked, held)


@dataclass(frozen=True)
class Booking:
    """What one booking in a calendar gave: a release instant for a prefix of `wanted` (ascending), and the latest
    instant a release could have had (SQS's horizon, from the clock read after the calendar's load)."""

    releases: list[datetime]
    wanted: list[datetime]
    latest: datetime


#: Loads a calendar for a booking: the stored calendar, the allowance to book it with, and the earliest instant a
#: release may have (None: now).
CalendarLoad = Callable[[], tuple[BudgetCalendar | None, Allowance, datetime | None]]
#: Saves a booked calendar if the stored one is still at version `expected` (None: absent); False if not.
CalendarSave = Callable[[BudgetCalendar, int | None, datetime], bool]


def book(
    load: CalendarLoad,
    save: CalendarSave,
    clock: Clock,
    asked: Sequence[datetime],
    *,
    keep: timedelta = CLOCK_SKEW,
    rescale: bool = False,
) -> Booking:
    """Book releases for `asked` (ascending) in a calendar shared by concurrent processes: read it, reserve, and
    save it conditional on the version read; a save another process beat is read again (up to WRITE_ATTEMPTS
    times, then nothing is booked). Nothing is released before now (a past instant asks for now) nor before the
    load's floor."""
    releases: list[datetime] = []
    wanted: list[datetime] = []
    latest = clock.now() + MAX_RELEASE_DELAY
    for _ in range(WRITE_ATTEMPTS):
        current, allowance, floor = load()
        # The clock is read after the load: a process paused before it would book windows the others have
        # dropped as past (they look empty), and release a second window's worth into them.
        now = clock.now()
        start = now if floor is None else max(now, floor)
        wanted = [truncate_ms(max(instant, start)) for instant in asked]
        latest = now + MAX_RELEASE_DELAY
        releases, booked = reserve(current, wanted, allowance, now, latest, keep=keep, rescale=rescale)
        if not releases:
            break  # nothing fits: nothing to record
        expected = current.version if current is not None else None
        if save(booked, expected, latest + timedelta(days=1)):
            break
        releases = []  # another process booked windows meanwhile: read again
    return Booking(releases, wanted, latest)


@dataclass
class Admitted:
    """What the budgets let through now (their release instants set), and what must wait (with when to retry)."""

    sent: list[Dispatch]
    deferred: list[tuple[Dispatch, datetime]]


@dataclass(eq=False)
class TenantAdmission:
    """Admits dispatches through their tenants' budgets (one conditional write per tenant per call)."""

    budgets: TenantBudgetStore
    clock: Clock
    config: FairnessConfig
    metrics: Metrics

    def __post_init__(self) -> None:
        #: One booking per tenant at a time in this process. A sweep's buckets are swept at once (threads): without
        #: it they race on the tenant's budget item, and a page that loses WRITE_ATTEMPTS times in a row has no
        #: release at all - its occurrences would be deferred past SQS's horizon for contention, not for budget.
        #: Other sweepers may still race; the conditional save keeps them correct.
        self._tenant_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def admit(self, dispatches: Sequence[Dispatch]) -> Admitted:
        by_tenant: dict[str, list[Dispatch]] = {}
        for dispatch in dispatches:
            by_tenant.setdefault(dispatch.tenant, []).append(dispatch)
        result = Admitted([], [])
        for tenant, mine in by_tenant.items():
            with self._lock_of(tenant):
                self._admit_tenant(tenant, mine, result)
        return result

    def _lock_of(self, tenant: str) -> threading.Lock:
        with self._locks_lock:
            return self._tenant_locks.setdefault(tenant, threading.Lock())

    def _admit_tenant(self, tenant: str, dispatches: list[Dispatch], into: Admitted) -> None:
        budget = self.config.of(tenant)
        # Oldest first; nothing is released before now (a past fire time asks for now: catch-up is paced too).
        ordered = sorted(dispatches, key=lambda d: d.send_at)
        booking = book(
            lambda: (self.budgets.load(tenant), budget, None),
            lambda calendar, expected, expires: self.budgets.save(tenant, calendar, expected, expires),
            self.clock,
            [d.send_at for d in ordered],
        )
        releases, wanted, latest = booking.releases, booking.wanted, booking.latest
        into.sent += [
            d if release <= d.fire_at else d.deferred_to(release) for d, release in zip(ordered, releases, strict=False)
        ]
        delays = [(release - w).total_seconds() for release, w in zip(releases, wanted, strict=False)]
        if delays and max(delays) > 0:
            self.metrics.count("TenantThrottledSeconds", max(delays), unit="Seconds")
            log.info(
                "tenant over its dispatch budget: delayed",
                extra={"tenant": tenant, "delayed": sum(1 for d in delays if d > 0), "max_delay_s": max(delays)},
            )
        rest = ordered[len(releases) :]
        if rest:
            # Past SQS's horizon: back to the time buckets, a window's capacity at a time, from the horizon on.
            size = timedelta(milliseconds=budget.window_ms)
            into.deferred += [(d, latest + size * (1 + i // budget.capacity)) for i, d in enumerate(rest)]
            self.metrics.count("TenantDeferred", len(rest))
            self.metrics.count("TenantThrottledSeconds", (latest - wanted[len(releases)]).total_seconds(), "Seconds")
            log.info("tenant over its dispatch budget: deferred", extra={"tenant": tenant, "deferred": len(rest)})
