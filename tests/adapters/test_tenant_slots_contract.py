"""TenantSlots contract (memory and DynamoDB Local): a tenant's execution slots are leased items; no two holders
ever hold one slot, a dead holder's slot frees when its lease ends, and only the holder extends or frees it."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoTenantSlots
from scheduler.adapters.memory import MemoryTenantSlots
from tests.adapters.conftest import BACKENDS, T0, jobs_table_store

LEASE = T0 + timedelta(seconds=60)


@pytest.fixture(params=BACKENDS)
def slots(request: pytest.FixtureRequest) -> Any:
    return jobs_table_store(request, MemoryTenantSlots, DynamoTenantSlots)


@pytest.fixture
def tenant() -> str:
    return f"tenant-{uuid.uuid4().hex[:8]}"


def test_a_tenant_gets_up_to_its_limit_of_distinct_slots_then_none(slots, tenant) -> None:
    taken = [slots.acquire(tenant, 3, f"h{n}", T0, LEASE) for n in range(3)]

    assert sorted(taken) == [0, 1, 2]
    assert slots.acquire(tenant, 3, "h3", T0, LEASE) is None
    # another tenant has its own slots
    assert slots.acquire(f"{tenant}-other", 3, "h4", T0, LEASE) is not None


def test_a_released_slot_can_be_taken_again_and_only_its_holder_releases_it(slots, tenant) -> None:
    first = slots.acquire(tenant, 1, "holder", T0, LEASE)
    assert first == 0

    slots.release(tenant, 0, "someone-else")  # not theirs: a no-op
    assert slots.acquire(tenant, 1, "next", T0, LEASE) is None

    slots.release(tenant, 0, "holder")
    slots.release(tenant, 0, "holder")  # twice is harmless
    assert slots.acquire(tenant, 1, "next", T0, LEASE) == 0


def test_a_dead_holders_slot_frees_when_its_lease_ends(slots, tenant) -> None:
    assert slots.acquire(tenant, 1, "dead", T0, LEASE) == 0

    assert slots.acquire(tenant, 1, "next", LEASE - timedelta(seconds=1), LEASE + timedelta(seconds=60)) is None
    assert slots.acquire(tenant, 1, "next", LEASE + timedelta(seconds=1), LEASE + timedelta(seconds=60)) == 0
    # and the dead holder can neither extend nor free it any more
    assert not slots.extend(tenant, 0, "dead", LEASE + timedelta(minutes=5))
    slots.release(tenant, 0, "dead")
    assert slots.acquire(tenant, 1, "third", LEASE + timedelta(seconds=2), LEASE + timedelta(seconds=60)) is None


def test_only_the_holder_extends_its_lease(slots, tenant) -> None:
    assert slots.acquire(tenant, 1, "holder", T0, LEASE) == 0

    assert slots.extend(tenant, 0, "holder", LEASE + timedelta(minutes=5))
    assert not slots.extend(tenant, 0, "intruder", LEASE + timedelta(hours=1))
    # extended: still held after the first lease would have ended
    assert slots.acquire(tenant, 1, "next", LEASE + timedelta(minutes=1), LEASE + timedelta(minutes=2)) is None


def test_live_holders_beyond_a_lowered_limit_still_count(slots, tenant) -> None:
    for n in range(4):
        assert slots.acquire(tenant, 4, f"h{n}", T0, LEASE) is not None
    for n in range(2):  # slots 0 and 1 (or whichever two) free up; the limit drops to 2
        held = next(slot for slot in range(4) if slots.extend(tenant, slot, f"h{n}", LEASE))
        slots.release(tenant, held, f"h{n}")

    assert slots.acquire(tenant, 2, "new", T0, LEASE) is None  # still 2 running: at the new limit


def test_concurrent_acquirers_never_exceed_the_limit(slots, tenant) -> None:
    limit, contenders = 3, 12
    won: list[tuple[str, int]] = []
    lock = threading.Lock()
    start = threading.Barrier(contenders)

    def contend(n: int) -> None:
        start.wait()
        slot = slots.acquire(tenant, limit, f"h{n}", T0, LEASE)
        if slot is not None:
            with lock:
                won.append((f"h{n}", slot))

    threads = [threading.Thread(target=contend, args=(n,)) for n in range(contenders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert 1 <= len(won) <= limit
    assert len({slot for _, slot in won}) == len(won)  # never one slot for two holders
    for holder, slot in won:
        assert slots.extend(tenant, slot, holder, LEASE)


@pytest.fixture(params=BACKENDS)
def two_kinds(request: pytest.FixtureRequest) -> Any:
    """A tenant's execution slots and its bulk operations' slots, side by side in one store."""
    return (
        jobs_table_store(request, MemoryTenantSlots, DynamoTenantSlots),
        jobs_table_store(
            request, MemoryTenantSlots, lambda table, client: DynamoTenantSlots(table, client, kind="BULK")
        ),
    )


def test_slots_of_another_kind_are_counted_apart(two_kinds, tenant) -> None:
    executions, bulk = two_kinds
    assert executions.acquire(tenant, 1, "attempt", T0, LEASE) == 0

    # the tenant's bulk slot 0 is free although its execution slot 0 is held, and each is freed on its own
    assert bulk.acquire(tenant, 1, "operation", T0, LEASE) == 0
    assert executions.acquire(tenant, 1, "another attempt", T0, LEASE) is None
    bulk.release(tenant, 0, "operation")
    assert executions.acquire(tenant, 1, "another attempt", T0, LEASE) is None
    assert bulk.acquire(tenant, 1, "another operation", T0, LEASE) == 0
