"""Each tenant's dispatch-budget calendar, execution slots and flow-control keys in memory."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace
from datetime import datetime

from scheduler.core.model.flow import FlowControl
from scheduler.core.ports import BudgetCalendar, FlowKeyState


class MemoryTenantBudgets:
    def __init__(self) -> None:
        self.calendars: dict[str, BudgetCalendar] = {}
        self.lock = threading.RLock()

    def load(self, tenant: str) -> BudgetCalendar | None:
        with self.lock:
            current = self.calendars.get(tenant)
            return copy.deepcopy(current) if current is not None else None

    def save(self, tenant: str, calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
        with self.lock:
            current = self.calendars.get(tenant)
            if (current.version if current is not None else None) != expected:
                return False
            self.calendars[tenant] = copy.deepcopy(calendar)
            return True


class MemoryTenantSlots:
    """Execution slots: (tenant, slot) -> (holder, lease end)."""

    def __init__(self) -> None:
        self.held: dict[tuple[str, int], tuple[str, datetime]] = {}
        self.lock = threading.RLock()

    def live(self, tenant: str, now: datetime) -> dict[int, str]:
        """The tenant's live holders by slot (for tests and the simulator's checker)."""
        with self.lock:
            return {slot: h for (t, slot), (h, until) in self.held.items() if t == tenant and until >= now}

    def acquire(self, tenant: str, limit: int, holder: str, now: datetime, lease_until: datetime) -> int | None:
        with self.lock:
            live = self.live(tenant, now)
            if len(live) >= limit:
                return None
            free = [i for i in range(limit) if i not in live]
            if not free:
                return None
            slot = free[0]
            self.held[(tenant, slot)] = (holder, lease_until)
            return slot

    def extend(self, tenant: str, slot: int, holder: str, lease_until: datetime) -> bool:
        with self.lock:
            current = self.held.get((tenant, slot))
            if current is None or current[0] != holder:
                return False
            self.held[(tenant, slot)] = (holder, lease_until)
            return True

    def release(self, tenant: str, slot: int, holder: str) -> None:
        with self.lock:
            current = self.held.get((tenant, slot))
            if current is not None and current[0] == holder:
                del self.held[(tenant, slot)]

    def in_use(self, tenant: str, now: datetime) -> int:
        return len(self.live(tenant, now))


class MemoryFlowControls:
    """Flow-control keys: (tenant, key) -> the key's state."""

    def __init__(self) -> None:
        self.states: dict[tuple[str, str], FlowKeyState] = {}
        self.lock = threading.RLock()

    def put_limits(self, tenant: str, limits: FlowControl, now: datetime) -> None:
        with self.lock:
            current = self.states.get((tenant, limits.key))
            if current is None:
                self.states[(tenant, limits.key)] = FlowKeyState(tenant, limits, now)
            else:
                self.states[(tenant, limits.key)] = replace(current, limits=limits, updated_at=now)

    def get(self, tenant: str, key: str) -> FlowKeyState | None:
        with self.lock:
            return copy.deepcopy(self.states.get((tenant, key)))

    def list(self, tenant: str) -> list[FlowKeyState]:
        with self.lock:
            return [copy.deepcopy(s) for (t, k), s in sorted(self.states.items()) if t == tenant]

    def save_calendar(
        self, tenant: str, key: str, calendar: BudgetCalendar, expected: int | None, expires: datetime
    ) -> bool:
        with self.lock:
            current = self.states.get((tenant, key))
            stored = current.calendar if current is not None else None
            if (stored.version if stored is not None else None) != expected or current is None:
                return False
            self.states[(tenant, key)] = replace(current, calendar=copy.deepcopy(calendar))
            return True

    def take_start(self, tenant: str, key: str, seen: datetime | None, next_start: datetime) -> bool:
        with self.lock:
            current = self.states.get((tenant, key))
            if current is None or current.next_start != seen:
                return False
            self.states[(tenant, key)] = replace(current, next_start=next_start)
            return True

    def throttled(
        self, tenant: str, key: str, paused_until: datetime | None, rate_factor: float, now: datetime
    ) -> None:
        with self.lock:
            current = self.states.get((tenant, key))
            if current is None:
                return
            pause = current.paused_until
            if paused_until is not None and (pause is None or paused_until > pause):
                pause = paused_until
            self.states[(tenant, key)] = replace(current, paused_until=pause, rate_factor=rate_factor, factor_at=now)


class MemoryRequestWindows:
    """Request counts: (tenant, window) -> count (expiry is not simulated: windows are never reused)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], int] = {}
        self.lock = threading.RLock()

    def take(self, tenant: str, window: int, limit: int, expires: datetime, count: int = 1) -> bool:
        with self.lock:
            counted = self.counts.get((tenant, window), 0)
            if counted + count > limit:
                return False
            self.counts[(tenant, window)] = counted + count
            return True
