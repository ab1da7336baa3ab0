"""FlowControlStore contract (memory and DynamoDB Local): a key's limits are last-write-wins, its calendar is replaced
only over the version the writer read (and only once the key has limits), and a push-back's pause only ever moves
later; no write undoes another's attributes."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoFlowControls
from scheduler.adapters.memory import MemoryFlowControls
from scheduler.core.model.flow import FlowControl
from scheduler.core.ports import BudgetCalendar
from tests.adapters.conftest import BACKENDS, jobs_table_store

PAYMENTS = FlowControl(key="payments-api", rate=5)


@pytest.fixture(params=BACKENDS)
def flows(request: pytest.FixtureRequest) -> Any:
    return jobs_table_store(request, MemoryFlowControls, DynamoFlowControls)


def test_a_key_no_write_named_is_unknown_and_the_last_write_sets_the_limits(flows, make) -> None:
    assert flows.get("tenant-a", "payments-api") is None
    flows.put_limits("tenant-a", PAYMENTS, make.t0)
    flows.put_limits("tenant-a", FlowControl(key="payments-api", parallelism=2), make.t0 + timedelta(seconds=1))

    state = flows.get("tenant-a", "payments-api")
    assert state.limits == FlowControl(key="payments-api", parallelism=2)
    assert state.updated_at == make.t0 + timedelta(seconds=1)
    assert state.calendar is None and state.paused_until is None and state.rate_factor == 1.0
    assert flows.get("tenant-b", "payments-api") is None  # a key belongs to its tenant


def test_a_tenants_keys_are_listed_by_key(flows, make) -> None:
    for key in ("b-api", "a-api"):
        flows.put_limits("tenant-a", FlowControl(key=key, rate=1), make.t0)
    flows.put_limits("tenant-b", FlowControl(key="c-api", rate=1), make.t0)

    assert [s.limits.key for s in flows.list("tenant-a")] == ["a-api", "b-api"]


def test_the_calendar_is_saved_over_the_version_read_and_keeps_the_limits(flows, make) -> None:
    expires = make.t0 + timedelta(days=1)
    first = BudgetCalendar(1, 200, {10: 1, 11: 1, 12: 1, 20: 1}, {2: (3, 1_000)})
    second = BudgetCalendar(2, 200, {13: 1}, {})
    assert not flows.save_calendar("tenant-a", "payments-api", first, None, expires)  # no limits yet
    flows.put_limits("tenant-a", PAYMENTS, make.t0)

    assert flows.save_calendar("tenant-a", "payments-api", first, None, expires)
    assert not flows.save_calendar("tenant-a", "payments-api", second, None, expires)  # someone wrote first
    assert not flows.save_calendar("tenant-a", "payments-api", second, 7, expires)  # a stale read
    assert flows.get("tenant-a", "payments-api").calendar == first
    assert flows.save_calendar("tenant-a", "payments-api", second, 1, expires)

    flows.put_limits("tenant-a", FlowControl(key="payments-api", rate=9), make.t0)  # the limits leave it
    state = flows.get("tenant-a", "payments-api")
    assert state.calendar == second and state.limits.rate == 9


def test_a_push_back_lowers_the_rate_and_its_pause_only_moves_later(flows, make) -> None:
    flows.put_limits("tenant-a", PAYMENTS, make.t0)
    later = make.t0 + timedelta(seconds=30)

    flows.throttled("tenant-a", "payments-api", later, 0.5, make.t0)
    flows.throttled("tenant-a", "payments-api", make.t0 + timedelta(seconds=5), 0.25, make.t0 + timedelta(seconds=1))
    flows.throttled("tenant-a", "nobody", later, 0.5, make.t0)  # a key without limits is not created

    state = flows.get("tenant-a", "payments-api")
    assert state.paused_until == later
    assert state.rate_factor == 0.25 and state.factor_at == make.t0 + timedelta(seconds=1)
    assert flows.get("tenant-a", "nobody") is None


def test_a_start_is_taken_over_the_next_start_read(flows, make) -> None:
    flows.put_limits("tenant-a", PAYMENTS, make.t0)
    gap = timedelta(milliseconds=200)
    assert not flows.take_start("tenant-b", "payments-api", None, make.t0 + gap)  # no such key

    assert flows.take_start("tenant-a", "payments-api", None, make.t0 + gap)
    assert not flows.take_start("tenant-a", "payments-api", None, make.t0 + gap)  # another worker started one
    assert flows.take_start("tenant-a", "payments-api", make.t0 + gap, make.t0 + 2 * gap)
    assert flows.get("tenant-a", "payments-api").next_start == make.t0 + 2 * gap
