"""TenantBudgetStore contract (memory and DynamoDB Local): one calendar per tenant, replaced only over the version
the writer read, so two sweepers never book the same window twice."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoTenantBudgets
from scheduler.adapters.memory import MemoryTenantBudgets
from scheduler.adapters.memory.doubles import FakeClock, RecordingMetrics
from scheduler.core.ports import BudgetCalendar, Dispatch
from scheduler.core.tenancy.fairness import Budget, FairnessConfig, TenantAdmission
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


# -- a booking that crashes around its save (scheduler.core.tenancy.fairness.TenantAdmission) --------------------------


class Crashing:
    """The store under test, whose next save crashes before its write or after it (its answer lost)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.crash = inner, ""

    def load(self, tenant: str) -> Any:
        return self.inner.load(tenant)

    def save(self, *args: Any, **kwargs: Any) -> bool:
        crash, self.crash = self.crash, ""
        if crash == "before":
            raise ConnectionError("crashed before the save")
        saved = self.inner.save(*args, **kwargs)
        if crash == "after":
            raise ConnectionError("crashed after the save")
        return saved


@pytest.mark.parametrize("crash", ["before", "after"])
def test_a_booking_that_crashes_around_its_save_never_books_a_window_twice(budgets, make, crash) -> None:
    # Given an admission (one release per 4 s window) that has booked the tenant before
    store = Crashing(budgets)
    clock = FakeClock(make.t0)
    admission = TenantAdmission(store, clock, FairnessConfig(Budget(0.25, 1)), RecordingMetrics())
    admission.admit([Dispatch("earlier", "tenant-a", clock.now(), clock.now(), 1)])
    clock.advance(4)

    # When the booking of an occurrence due now crashes before its save, or after it (the write landed, unanswered)
    store.crash = crash
    with pytest.raises(ConnectionError):
        admission.admit([Dispatch("lost", "tenant-a", clock.now(), clock.now(), 1)])
    # and the same process books another occurrence due now (the page's re-run, or the next page)
    [again] = admission.admit([Dispatch("again", "tenant-a", clock.now(), clock.now(), 1)]).sent

    if crash == "before":
        # Then nothing was stored: it books the window open now
        assert again.send_at == clock.now()
    else:
        # Then it read the lost booking, which still holds the window open now: its release goes to the next one
        assert again.send_at == clock.now() + timedelta(seconds=4)
    stored = budgets.load("tenant-a")
    assert stored is not None and all(count <= 1 for count in stored.booked.values())
