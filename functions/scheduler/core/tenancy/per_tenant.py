"""What every tenant gets unless it has a value of its own: the dispatch budgets (`scheduler.core.tenancy.fairness`),
the execution slots (`scheduler.core.tenancy.concurrency`) and the API request rates
(`scheduler.core.tenancy.request_limits`) are each one `PerTenant`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class PerTenant(Generic[T]):
    """`default` for every tenant, `overrides` by tenant id."""

    default: T
    overrides: Mapping[str, T] = field(default_factory=dict)

    def of(self, tenant: str) -> T:
        return self.overrides.get(tenant, self.default)
