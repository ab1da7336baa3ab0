"""Per-tenant API request limits: one tenant's requests cannot take the stage's whole throttle from the others.

Each tenant may make `rate` requests a second on average, counted in fixed windows of `window_seconds`: a window
admits `ceil(rate * window_seconds)` requests and refuses the rest until the next window starts (the caller is told
when, as Retry-After). A count lives in the store under the tenant and the window's index, taken with a conditional
increment, so every API instance counts against the same number; a window's count expires after it.
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

    def take(self, tenant: str, window: int, limit: int, expires: datetime) -> bool:
        """Count one request of `tenant` in `window` if fewer than `limit` were counted there; False otherwise
        (nothing counted). `expires`: when the count may be forgotten."""
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
        limit = self.config.limit(tenant)
        if limit <= 0:
            return None
        now = self.clock.now().timestamp()
        size = self.config.window_seconds
        window = int(now // size)
        ends = (window + 1) * size
        if self.windows.take(tenant, window, limit, datetime.fromtimestamp(ends + size, UTC)):
            return None
        self.metrics.count("TenantRequestsThrottled")
        return max(ends - now, 0.001)
