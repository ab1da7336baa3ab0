"""Flow control per destination key (docs/flow-control.md): a rate and a parallelism limit on the calls made to one
destination, shared by every job of a tenant that names the key.

It reuses the two per-tenant mechanisms, keyed by (tenant, flow key) instead of by tenant:

- **Rate**: a release calendar like a tenant's dispatch budget (`scheduler.core.tenancy.fairness.book`), booked on
  every path that sends occurrences, after the tenant's budget. A key's windows are one release apart
  (`period_seconds / rate`) and hold one release each, so any second sees at most `rate / period + 1` releases of a
  key, and a herd of one key drains in scheduled order (the sweep reads its buckets in time order), never early.
  What the calendar cannot hold within SQS's horizon goes back to a later time bucket as a deferred timer.
  A retry books its release in the calendar too.
- **Start pacing**: the calendar spaces releases, but a worker that receives its messages late starts them together;
  so the worker also starts a keyed call only once the key's previous start is a rate's gap behind (one conditional
  write on the key's item), and waits out the rest (under a second in the worker, longer hidden).
- **Parallelism**: leased execution slots like a tenant's (`scheduler.core.tenancy.concurrency`), taken by the
  executor next to the tenant's slot; a worker killed mid-call frees its slot when its lease ends, and an occurrence
  without a slot waits hidden (re-sent as a fresh message after a few receives), never on a worker.
- **Feedback**: a 429 or 503 from a keyed destination halves the rate the key is held to (down to 1/32 of it),
  and it recovers by 1% of the rate a second (AIMD: additive increase, multiplicative decrease); with a
  `Retry-After`, the key is paused until then: nothing of it is released, and nothing of it starts.

Held occurrences are delayed, never dropped: every release is at or after the occurrence's fire time and the key's
pause.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.core.errors import Throttled
from scheduler.core.model.flow import FlowControl
from scheduler.core.model.timefmt import to_ms
from scheduler.core.ports import (
    BudgetCalendar,
    Clock,
    Dispatch,
    FlowControlStore,
    FlowKeyState,
    HoldReason,
    Metrics,
    TenantSlots,
)
from scheduler.core.tenancy.concurrency import Permit
from scheduler.core.tenancy.fairness import MAX_RELEASE_DELAY, WRITE_ATTEMPTS, Admitted, Allowance, book

log = logging.getLogger(__name__)

#: What a push-back multiplies the key's rate factor by (multiplicative decrease).
BACKOFF = 0.5
#: The lowest fraction of its rate a key is held to.
MIN_FACTOR = 1 / 32
#: How much of its rate a key gets back each second after a push-back (additive increase).
RECOVERY_PER_SECOND = 0.01
#: The factor moves in steps of this: the calendar's windows change size only at a step.
FACTOR_STEP = 1 / 32
#: The longest pause a destination's `Retry-After` sets.
MAX_PAUSE = timedelta(minutes=15)
#: How long a key's calendar keeps its past windows: the view's rate of the last minute reads them.
KEEP = timedelta(seconds=60)
#: The statuses by which a destination says it is overloaded.
PUSH_BACK_STATUSES = frozenset({429, 503})
_LANE_RANK = {"high": 0, "normal": 1, "low": 2}


def flow_owner(tenant: str, key: str) -> str:
    """The name of a key's slots: a key never holds '#', so no two (tenant, key) pairs share one."""
    return f"{tenant}#{key}"


def rate_factor(state: FlowKeyState, now: datetime) -> float:
    """The fraction of its rate the key is held to at `now`: what its last push-back left, recovered since."""
    if state.factor_at is None or state.rate_factor >= 1.0:
        return min(1.0, state.rate_factor)
    elapsed = max(0.0, (now - state.factor_at).total_seconds())
    recovered = min(1.0, state.rate_factor + RECOVERY_PER_SECOND * elapsed)
    return max(MIN_FACTOR, math.floor(recovered / FACTOR_STEP) * FACTOR_STEP)


@dataclass(frozen=True)
class KeyRate:
    """A key's calendar allowance: windows one release apart, one release each."""

    window_ms: int
    capacity: int = 1

    @classmethod
    def of(cls, limits: FlowControl, factor: float) -> KeyRate:
        return cls(limits.spacing_ms(factor))


@dataclass(frozen=True)
class KeyView:
    """A key as `GET /v1/flow-controls/{key}` shows it (the live part read from its calendar and slots)."""

    state: FlowKeyState
    #: Occurrences released later than their fire time whose release is still to come.
    backlog: int
    in_flight: int
    #: Releases in the last minute, per second.
    rate_last_minute: float
    #: How late the oldest held occurrence already is (seconds), 0 when none is held.
    oldest_held_lateness: float
    #: The fraction of its rate the key is held to now (AIMD).
    rate_factor: float


@dataclass(frozen=True)
class Waiting:
    """An attempt that may not start now: its key is paused until `until`, or (None) all its slots are held;
    `reason` says which of the key's limits holds it."""

    until: datetime | None
    reason: HoldReason


@dataclass(eq=False)
class FlowKeys:
    """The flow-control keys' limits, applied: releases booked in each key's calendar (`admit`, `retry_release`),
    its slots handed out (`enter`), and its destination's push-back recorded (`pushed_back`)."""

    keys: FlowControlStore
    slots: TenantSlots
    clock: Clock
    metrics: Metrics

    def __post_init__(self) -> None:
        #: One booking per key at a time in this process (the buckets of a sweep run at once: see TenantAdmission).
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def _lock_of(self, tenant: str, key: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault((tenant, key), threading.Lock())

    # -- rate ----------------------------------------------------------------------------------------------------

    def admit(self, dispatches: Sequence[Dispatch]) -> Admitted:
        """Book the keyed dispatches' releases in their keys' calendars (after their tenants' budgets: at or after
        their `send_at`). What a key cannot release within SQS's horizon is deferred; unkeyed ones pass."""
        result = Admitted([], [])
        by_key: dict[tuple[str, str], list[Dispatch]] = {}
        for dispatch in dispatches:
            if dispatch.flow_key is None:
                result.sent.append(dispatch)
            else:
                by_key.setdefault((dispatch.tenant, dispatch.flow_key), []).append(dispatch)
        for (tenant, key), mine in by_key.items():
            with self._lock_of(tenant, key):
                self._admit_key(tenant, key, mine, result)
        return result

    def _admit_key(self, tenant: str, key: str, dispatches: list[Dispatch], into: Admitted) -> None:
        # Scheduled order within the key; on a tie the higher lane first.
        ordered = sorted(dispatches, key=lambda d: (d.send_at, _LANE_RANK.get(d.priority, 1)))
        releases, wanted, latest, window = self._book(tenant, key, [d.send_at for d in ordered])
        into.sent += [
            d if release <= d.send_at else d.deferred_to(release) for d, release in zip(ordered, releases, strict=False)
        ]
        delays = [(release - w).total_seconds() for release, w in zip(releases, wanted, strict=False)]
        held = sum(1 for delay in delays if delay > 0)
        if held:
            self.metrics.count("FlowControlThrottled", held)
            self.metrics.count("FlowControlDelaySeconds", max(delays), unit="Seconds")
            log.info(
                "flow-control key held its occurrences back: delayed",
                extra={"tenant": tenant, "flow_key": key, "delayed": held, "max_delay_s": max(delays)},
            )
        rest = ordered[len(releases) :]
        if rest:
            # Past SQS's horizon: back to the time buckets, in the key's order, from the horizon on.
            into.deferred += [(d, latest + window * (1 + i)) for i, d in enumerate(rest)]
            self.metrics.count("FlowControlDeferred", len(rest))
            log.info(
                "flow-control key held its occurrences back: deferred", extra={"flow_key": key, "deferred": len(rest)}
            )

    def _book(
        self, tenant: str, key: str, asked: list[datetime]
    ) -> tuple[list[datetime], list[datetime], datetime, timedelta]:
        """Releases for a prefix of `asked` (ascending), the instants they asked for, SQS's horizon, and the gap
        between two releases of the key."""
        first = self.keys.get(tenant, key)
        loaded = [first]

        def load() -> tuple[BudgetCalendar | None, Allowance, datetime | None]:
            state = loaded.pop() if loaded else self.keys.get(tenant, key)
            if state is None or state.limits.rate is None:
                raise _NoRate(state)
            rate = KeyRate.of(state.limits, rate_factor(state, self.clock.now()))
            return state.calendar, rate, state.paused_until

        def save(calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
            return self.keys.save_calendar(tenant, key, calendar, expected, expires)

        try:
            booking = book(load, save, self.clock, asked, keep=KEEP, rescale=True)
        except _NoRate as no_rate:
            # Parallelism alone (or a key no write named): nothing to book; only a pause holds releases back.
            now = self.clock.now()
            latest = now + MAX_RELEASE_DELAY
            pause = no_rate.state.paused_until if no_rate.state is not None else None
            wanted = [max(instant, now) for instant in asked]
            releases = [max(w, pause) if pause is not None else w for w in wanted]
            fitting = [r for r in releases if r <= latest]
            return fitting, wanted, latest, timedelta(seconds=1)
        window = timedelta(milliseconds=KeyRate.of(first.limits, 1.0).window_ms) if first is not None else timedelta()
        return booking.releases, booking.wanted, booking.latest, max(window, timedelta(milliseconds=1))

    def retry_release(self, tenant: str, key: str, due: datetime) -> datetime:
        """When a retry of the key due at `due` may start: its release booked in the key's calendar (after any
        pause). When the calendar has no room within SQS's horizon, the horizon: the retry is then shown at it."""
        with self._lock_of(tenant, key):
            releases, _, latest, _ = self._book(tenant, key, [due])
        return releases[0] if releases else latest

    # -- parallelism and pauses ----------------------------------------------------------------------------------

    def enter(self, tenant: str, key: str, holder: str, now: datetime, lease_until: datetime) -> Permit | Waiting:
        """A permit for one attempt of the key (one of its slots, leased until `lease_until`, when it has a
        parallelism), or what it waits for: the end of the key's pause, or a free slot."""
        state = self.keys.get(tenant, key)
        owner = flow_owner(tenant, key)
        if state is None:
            return Permit.unlimited(owner, holder)
        if state.paused_until is not None and state.paused_until > now:
            self.metrics.count("FlowControlThrottled")
            return Waiting(state.paused_until, "paused")
        if state.limits.parallelism is None:
            permit = Permit.unlimited(owner, holder)
        else:
            slot = self.slots.acquire(owner, state.limits.parallelism, holder, now, lease_until)
            if slot is None:
                self.metrics.count("FlowControlThrottled")
                return Waiting(None, "parallelism")
            permit = Permit(self.slots, owner, slot, holder, lease_until)
        if state.limits.rate is None:
            return permit
        try:
            start_at = self._paced(tenant, key, state, now)
        except BaseException:
            permit.release()
            raise
        if start_at is None:
            return permit
        permit.release()
        return Waiting(start_at, "rate")

    def _paced(self, tenant: str, key: str, state: FlowKeyState, now: datetime) -> datetime | None:
        """Start pacing: the key's calls start at least its rate's gap apart, whenever their messages came (a worker
        that received its messages late would otherwise start them together). None: this call starts now (the next
        may start a gap later); else when it may start."""
        current: FlowKeyState | None = state
        for _ in range(WRITE_ATTEMPTS):
            if current is None:
                return None
            gap = timedelta(milliseconds=current.limits.spacing_ms(rate_factor(current, now)))
            if current.next_start is not None and current.next_start > now:
                self.metrics.count("FlowControlPaced")
                return current.next_start
            if self.keys.take_start(tenant, key, current.next_start, now + gap):
                return None
            current = self.keys.get(tenant, key)  # another worker started one meanwhile
        return now + timedelta(seconds=1)

    # -- feedback ------------------------------------------------------------------------------------------------

    def pushed_back(self, tenant: str, key: str, retry_after: float | None, now: datetime) -> None:
        """The key's destination answered 429 or 503: halve the rate the key is held to, and with a `Retry-After`
        pause the key until then. Never raises: feedback is advice, the retry itself is recorded anyway."""
        try:
            state = self.keys.get(tenant, key)
            if state is None:
                return
            factor = max(MIN_FACTOR, rate_factor(state, now) * BACKOFF)
            pause = None
            if retry_after is not None and retry_after > 0:
                pause = now + min(timedelta(seconds=retry_after), MAX_PAUSE)
            self.keys.throttled(tenant, key, pause, factor, now)
        except Exception:
            log.exception("flow-control push-back not recorded", extra={"flow_key": key})
            return
        self.metrics.count("FlowControlPushBacks")
        log.info(
            "flow-control key's destination pushed back",
            extra={"tenant": tenant, "flow_key": key, "rate_factor": factor, "paused_until": str(pause)},
        )

    # -- limits and backpressure ---------------------------------------------------------------------------------

    def declare(self, tenant: str, limits: FlowControl) -> None:
        """Make `limits` the key's (a job created or changed naming it, or `PUT /v1/flow-controls/{key}`)."""
        self.keys.put_limits(tenant, limits, self.clock.now())

    def check_room(self, tenant: str, key: str, max_backlog: int | None) -> None:
        """Refuse (Throttled, HTTP 429) one more occurrence of a key whose backlog is at its `max_backlog` (the
        one given, else the stored key's); nothing is written."""
        state = self.keys.get(tenant, key)
        if max_backlog is None and state is not None:
            max_backlog = state.limits.max_backlog
        if max_backlog is None or state is None:
            return
        backlog = self.view(state, 0).backlog
        if backlog < max_backlog:
            return
        per_second = (state.limits.per_second or 1.0) * rate_factor(state, self.clock.now())
        wait = max(1.0, (backlog - max_backlog + 1) / per_second)
        self.metrics.count("FlowControlBacklogRefused")
        raise Throttled(
            f"flow-control key {key!r} already holds {backlog} occurrences, its max_backlog ({max_backlog}); "
            f"retry after {math.ceil(wait)} s, or raise the key's max_backlog (PUT /v1/flow-controls/{key})",
            wait,
        )

    # -- the view ------------------------------------------------------------------------------------------------

    def view(self, state: FlowKeyState, in_flight: int) -> KeyView:
        now = self.clock.now()
        calendar = state.calendar
        backlog, oldest, last_minute = 0, None, 0
        if calendar is not None:
            now_s = to_ms(now) // 1000
            for second, (count, earliest) in calendar.held.items():
                if second >= now_s:
                    backlog += count
                    oldest = earliest if oldest is None else min(oldest, earliest)
            since = to_ms(now - KEEP)
            last_minute = sum(
                count for window, count in calendar.booked.items() if since <= window * calendar.window_ms < to_ms(now)
            )
        lateness = max(0.0, (to_ms(now) - oldest) / 1000) if oldest is not None else 0.0
        return KeyView(
            state,
            backlog,
            in_flight,
            round(last_minute / KEEP.total_seconds(), 3),
            round(lateness, 3),
            rate_factor(state, now),
        )


class _NoRate(Exception):
    """A key without a rate (or without limits): its releases are not booked."""

    def __init__(self, state: FlowKeyState | None) -> None:
        super().__init__("no rate")
        self.state = state
