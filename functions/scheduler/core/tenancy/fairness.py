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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

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


def reserve(
    calendar: BudgetCalendar | None, wanted: Sequence[datetime], budget: Budget, now: datetime, latest: datetime
) -> tuple[list[datetime], BudgetCalendar]:
    """Release instants for a prefix of `wanted` (ascending): each in the first window at or after it with room,
    none later than `latest`. Returns them and the calendar with them booked (windows that ended more than the
    clock-skew allowance before `now` dropped)."""
    size = budget.window_ms
    kept = to_ms(now - CLOCK_SKEW) // size
    booked: dict[int, int] = {}
    if calendar is not None and calendar.window_ms == size:  # a changed budget starts a new calendar
        booked = {w: n for w, n in calendar.booked.items() if w >= kept}
    releases: list[datetime] = []
    for instant in wanted:
        window = to_ms(instant) // size
        while booked.get(window, 0) >= budget.capacity:
            window += 1
        release = max(instant, from_ms(window * size))
        if release > latest:
            break
        booked[window] = booked.get(window, 0) + 1
        releases.append(release)
    version = calendar.version + 1 if calendar is not None else 1
    return releases, BudgetCalendar(version, size, booked)


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
        releases: list[datetime] = []
        for _ in range(WRITE_ATTEMPTS):
            current = self.budgets.load(tenant)
            # The clock is read after the load: a process paused before it would book windows the others have
            # dropped as past (they look empty), and release a second window's worth into them.
            now = self.clock.now()
            # Oldest first; nothing is released before now (a past fire time asks for now: catch-up is paced too).
            ordered = sorted(dispatches, key=lambda d: max(d.send_at, now))
            wanted = [truncate_ms(max(d.send_at, now)) for d in ordered]
            latest = now + MAX_RELEASE_DELAY
            releases, booked = reserve(current, wanted, budget, now, latest)
            if not releases:
                break  # nothing fits: nothing to record
            expected = current.version if current is not None else None
            if self.budgets.save(tenant, booked, expected, expires=latest + timedelta(days=1)):
                break
            releases = []  # another sweeper booked windows meanwhile: read again
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
