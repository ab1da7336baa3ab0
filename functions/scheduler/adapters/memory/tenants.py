"""Each tenant's dispatch-budget calendar and execution slots in memory."""

from __future__ import annotations

import copy
import threading
from datetime import datetime

from scheduler.core.ports import BudgetCalendar


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
