"""TenantBudgetStore contract (memory and DynamoDB Local): one calendar per tenant, replaced only over the version
the writer read, so two sweepers never book the same window twice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoTenantBudgets
from scheduler.adapters.memory import MemoryTenantBudgets
from scheduler.core.ports import BudgetCalendar
from tests.adapters.conftest import BACKENDS, jobs_table_store


@pytest.fixture(params=BACKENDS)
def budgets(request: pytest.FixtureRequest) -> Any:
    return jobs_table_store(request, MemoryTenantBudgets, DynamoTenantBudgets)


def test_an_unknown_tenant_has_no_calendar(budgets) -> None:
    assert budgets.load("tenant-a") is None


def test_the_first_write_needs_no_calendar_and_later_ones_the_version_read(budgets, make) -> None:
    expires = make.t0 + timedelta(days=1)
    first = BudgetCalendar(1, 10_000, {189_356_040: 100, 189_356_041: 7})
    second = BudgetCalendar(2, 10_000, {189_356_041: 9})

    assert budgets.save("tenant-a", first, None, expires)
    assert not budgets.save("tenant-a", second, None, expires)  # someone wrote first
    assert budgets.load("tenant-a") == first

    assert not budgets.save("tenant-a", second, 7, expires)  # a stale read
    assert budgets.save("tenant-a", second, 1, expires)
    assert budgets.load("tenant-a") == second


def test_tenants_have_their_own_calendars(budgets, make) -> None:
    expires = make.t0 + timedelta(days=1)
    a, b = BudgetCalendar(1, 1000, {5: 1}), BudgetCalendar(1, 2000, {})
    assert budgets.save("tenant-a", a, None, expires)
    assert budgets.save("tenant-b", b, None, expires)

    assert budgets.load("tenant-a") == a
    assert budgets.load("tenant-b") == b
