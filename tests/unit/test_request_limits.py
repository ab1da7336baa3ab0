"""Per-tenant API request limits (scheduler.core.tenancy.request_limits): a tenant over its window's count waits for the
next window; the others are served."""

from __future__ import annotations

from datetime import UTC, datetime

from scheduler.adapters.memory import MemoryRequestWindows
from scheduler.adapters.memory.doubles import FakeClock, RecordingMetrics
from scheduler.core.tenancy.per_tenant import PerTenant
from scheduler.core.tenancy.request_limits import RequestGate, RequestLimitConfig

T0 = datetime(2026, 12, 4, 12, 0, 0, tzinfo=UTC)


def _gate(config: RequestLimitConfig) -> tuple[RequestGate, FakeClock, RecordingMetrics]:
    clock, metrics = FakeClock(T0), RecordingMetrics()
    return RequestGate(MemoryRequestWindows(), clock, config, metrics), clock, metrics


def test_a_tenant_over_its_window_waits_for_the_next_and_the_others_are_served() -> None:
    gate, clock, metrics = _gate(RequestLimitConfig(PerTenant(2.0), window_seconds=10))
    clock.advance(3)
    assert [gate.admit("greedy") for _ in range(20)] == [None] * 20
    refused = gate.admit("greedy")
    assert refused is not None and abs(refused - 7.0) < 1e-6
    assert gate.admit("quiet") is None
    assert metrics.counts["TenantRequestsThrottled"] == 1
    clock.advance(7)
    assert gate.admit("greedy") is None


def test_a_tenant_of_its_own_has_its_own_rate_and_zero_means_no_limit() -> None:
    gate, _, _ = _gate(RequestLimitConfig(PerTenant(1.0, {"big": 5, "free": 0}), window_seconds=10))
    assert sum(gate.admit("big") is None for _ in range(60)) == 50
    assert all(gate.admit("free") is None for _ in range(1000))
    assert sum(gate.admit("small") is None for _ in range(20)) == 10


def test_no_rate_admits_everything() -> None:
    gate, _, _ = _gate(RequestLimitConfig(PerTenant(0.0)))
    assert all(gate.admit("t") is None for _ in range(1000))


def test_the_work_of_many_requests_counts_as_many_as_the_window_still_takes() -> None:
    # A bulk action's page: 20 requests a window; the tenant made 3 requests already
    gate, clock, metrics = _gate(RequestLimitConfig(PerTenant(2.0), window_seconds=10))
    for _ in range(3):
        assert gate.admit("bulk") is None

    assert gate.admit_up_to("bulk", 50) == (10, None)  # a whole window (20) does not fit in the 17 left; 10 does
    assert gate.admit_up_to("bulk", 50) == (5, None)  # 7 left: 20 no, 10 no, 5
    assert gate.admit_up_to("bulk", 5) == (2, None)  # 2 left: 5 no, 2
    counted, wait = gate.admit_up_to("bulk", 50)
    assert counted == 0 and wait is not None and abs(wait - 10.0) < 1e-6
    assert metrics.counts["TenantRequestsThrottled"] == 1
    assert gate.admit("bulk") is not None  # the window is full for single requests too
    clock.advance(10)
    assert gate.admit_up_to("bulk", 50) == (20, None)
