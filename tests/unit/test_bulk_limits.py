"""What one tenant's bulk actions may take: each job a page changes counts against the tenant's API request limit, and
at most `max_running` of its operations run at once (scheduler.core.jobs.bulk)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler.adapters.memory import MemoryRequestWindows, MemoryTenantSlots, RecordingMetrics
from scheduler.core.errors import Throttled
from scheduler.core.jobs.bulk import (
    BULK_IDLE,
    BULK_TIME_BUDGET,
    BulkAction,
    BulkOperation,
    BulkService,
    OperationState,
    operation_id,
)
from scheduler.core.model.job import JobState
from scheduler.core.tenancy.per_tenant import PerTenant
from scheduler.core.tenancy.request_limits import RequestGate, RequestLimitConfig
from tests.unit.fixtures import TENANT, MemoryCore

TEAM = {"team": "a"}
EVERY_HOUR = {"type": "cron", "expression": "0 * * * *"}


def bulk(world: MemoryCore, *, rate: float = 0, max_running: int = 2) -> tuple[BulkService, MemoryRequestWindows]:
    """A bulk service over the world's jobs, with a request limit of `rate` a second (windows of 10 s; 0: none) and
    `max_running` operations of a tenant at once."""
    windows = MemoryRequestWindows()
    gate = RequestGate(windows, world.clock, RequestLimitConfig(PerTenant(rate, {})), RecordingMetrics())
    service = world.core.bulk_service()
    service.requests = gate if rate else None
    service.slots = MemoryTenantSlots()
    service.max_running = max_running
    return service, windows


def labelled(world: MemoryCore, count: int, labels: dict[str, str] = TEAM) -> list[str]:
    return [world.create(EVERY_HOUR, labels=labels).job_id for _ in range(count)]


def run(service: BulkService, key: str, labels: dict[str, str] = TEAM, seconds: float = 20) -> BulkOperation:
    return service.run(TENANT, key, BulkAction.PAUSE, labels, service.clock.now() + timedelta(seconds=seconds))


def test_each_job_a_bulk_action_changes_counts_as_a_request_of_its_tenant(world: MemoryCore) -> None:
    # Given a tenant limited to 3 requests a second (30 in a window of 10 s) and 70 jobs to pause
    world.set_time(world.now().replace(second=0))
    service, windows = bulk(world, rate=3)
    jobs = labelled(world, 70)

    # When one request works on them: its first page is 30 jobs (a whole window), the next no longer fits
    first = run(service, "pause-all")

    # Then it stops there with its progress, the window's count holding the 30 jobs it changed
    assert (first.state, first.processed, first.changed) == (OperationState.RUNNING, 30, 30)
    assert windows.counts == {(TENANT, int(world.now().timestamp()) // 10): 30}
    assert sum(world.job(j).state == JobState.PAUSED for j in jobs) == 30

    # And the same request again within that window changes nothing: a 429 saying when the next window starts
    with pytest.raises(Throttled, match="counts each job it changes as a request") as throttled:
        run(service, "pause-all")
    assert throttled.value.retry_after == pytest.approx(10)
    assert sum(world.job(j).state == JobState.PAUSED for j in jobs) == 30

    # Then each window takes 30 more, until every job is paused
    for processed in (60, 70):
        world.clock.advance(10)
        assert run(service, "pause-all").processed == processed
    assert run(service, "pause-all").state == OperationState.DONE
    assert all(world.job(j).state == JobState.PAUSED for j in jobs)


def test_without_a_request_limit_a_bulk_action_counts_nothing(world: MemoryCore) -> None:
    service, windows = bulk(world, rate=0)
    labelled(world, 60)

    assert run(service, "pause-all").state == OperationState.DONE
    assert windows.counts == {}


def test_a_third_running_operation_is_refused_before_it_reads_anything(world: MemoryCore) -> None:
    # Given two operations of the tenant running (each stopped by its time before its first page)
    service, _ = bulk(world, max_running=2)
    service.page_size = 2
    for team in ("a", "b", "c"):
        labelled(world, 5, {"team": team})
    running = [run(service, f"op-{team}", {"team": team}, seconds=0) for team in ("a", "b")]
    assert [op.state for op in running] == [OperationState.RUNNING] * 2

    # When a third starts
    with pytest.raises(Throttled, match="has 2 bulk operations running") as refused:
        run(service, "op-c", {"team": "c"})

    # Then it is refused with a Retry-After, and nothing of it exists
    assert refused.value.retry_after == BULK_TIME_BUDGET.total_seconds()
    assert service.operations.get(TENANT, operation_id(TENANT, "op-c")) is None
    # ... while the running ones go on (each holds its own slot: its requests take no second one), and another
    # tenant's starts
    assert run(service, "op-a", {"team": "a"}, seconds=0).state == OperationState.RUNNING
    service.run("other", "op-x", BulkAction.PAUSE, TEAM, world.now() + timedelta(seconds=20))

    # Once one is done, its slot is free
    assert run(service, "op-a", {"team": "a"}).state == OperationState.DONE
    assert run(service, "op-c", {"team": "c"}).state == OperationState.DONE


def test_an_operation_nobody_goes_on_with_frees_its_slot(world: MemoryCore) -> None:
    service, _ = bulk(world, max_running=1)
    service.page_size = 2
    labelled(world, 5, {"team": "a"})
    labelled(world, 5, {"team": "b"})
    assert run(service, "op-a", {"team": "a"}, seconds=0).state == OperationState.RUNNING

    with pytest.raises(Throttled):
        run(service, "op-b", {"team": "b"})

    # Its slot is kept through its request's time and BULK_IDLE after, then another may start
    world.clock.advance((BULK_IDLE + timedelta(seconds=1)).total_seconds())
    assert run(service, "op-b", {"team": "b"}).state == OperationState.DONE
    # ... and the abandoned one, asked again, waits for a slot like any other
    assert run(service, "op-a", {"team": "a"}).state == OperationState.DONE


def test_a_finished_operation_is_answered_without_a_slot(world: MemoryCore) -> None:
    service, _ = bulk(world, max_running=1)
    labelled(world, 3, {"team": "a"})
    labelled(world, 3, {"team": "b"})
    done = run(service, "op-a", {"team": "a"})
    assert done.state == OperationState.DONE
    running = run(service, "op-b", {"team": "b"}, seconds=0.0)  # holds the only slot, stopped at once
    assert running.state == OperationState.RUNNING

    # the finished one's report is read again, although no slot is free
    assert run(service, "op-a", {"team": "a"}) == done
