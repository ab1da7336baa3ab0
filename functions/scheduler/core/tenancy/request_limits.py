"""Per-tenant API request limits: one tenant's requests cannot take the stage's whole throttle from the others.

Each tenant may make `rate` requests a second on average, counted in fixed windows of `window_seconds`: a window
admits `ceil(rate * window_seconds)` requests and refuses the rest until the next window starts (the caller is told
when, as Retry-After). A count lives in the store under the tenant and the window's index, taken with a conditional
increment, so every API instance counts against the same number; a window's count expires after it.

A request that does the work of many counts as many: a bulk action counts each job it changes
(`scheduler.core.jobs.bulk`), a page of them at once, as many as the window still takes (`admit_up_to`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from scheduler.core.ports import Clock, Metrics
from scheduler.core.tenancy.per_tenant import PerTenant


class RequestWindows(Protocol):
    """The count of requests of each tenant in each window."""

    def take(self, tenant: str, window: int, limit: int, expires: datetime, count: int = 1) -> bool:
        """Count `count` requests (1 to `limit`) of `tenant` in `window` if at most `limit - count` were counted
        there; False otherwise (nothing counted). `expires`: when the count may be forgotten."""
        ...


@dataclass(frozen=True)
class RequestLimitConfig:
    #: Requests a second a tenant may make on average (the default, and tenants with a rate of their own); 0: no
    #: limit.
    rates: PerTenant[float]
    window_seconds: int = 10

    def limit(self, tenant: str) -> int:
        """Requests `tenant` may make in one window (0: no limit)."""
        rate = self.rates.of(tenant)
        return math.ceil(rate * self.window_seconds) if rate > 0 else 0


@dataclass(eq=False)
class RequestGate:
    """Admits a tenant's request, or says how long until it may try again."""

    windows: RequestWindows
    clock: Clock
    config: RequestLimitConfig
    metrics: Metrics

    def admit(self, tenant: str) -> float | None:
        """None when the request is admitted; otherwise the seconds until the tenant's next window."""
        counted, wait = self.admit_up_to(tenant, 1)
        return None if counted else wait

    def admit_up_to(self, tenant: str, count: int) -> tuple[int, float | None]:
        """Count as many of `count` requests as the tenant's window still takes: all at once (at most a window's
        worth), else half as many, and so on down to one - a conditional write each. Returns how many were counted
        and, when not even one was, the seconds until the tenant's next window. Without a limit: all, uncounted."""
        limit = self.config.limit(tenant)
        if limit <= 0 or count <= 0:
            return max(count, 0), None
        now = self.clock.now().timestamp()
        size = self.config.window_seconds
        window = int(now // size)
        ends = (window + 1) * size
        expires = datetime.fromtimestamp(ends + size, UTC)
        wanted = min(count, limit)
        while wanted >= 1:
            if self.windows.take(tenant, window, limit, expires, wanted):
                return wanted, None
            wanted //= 2
        self.metrics.count("TenantRequestsThrottled")
        return 0, max(ends - now, 0.001)
