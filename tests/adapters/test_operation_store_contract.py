"""OperationStore contract: the same tests run against MemoryOperationStore and DynamoOperationStore."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoOperationStore
from scheduler.adapters.memory import MemoryOperationStore
from scheduler.core.jobs import bulk
from scheduler.core.model.job import JobState
from tests.adapters.conftest import BACKENDS, jobs_table_store

# In the future: DynamoDB Local deletes items whose TTL lies in the real past.
T0 = datetime(2030, 3, 4, 9, 0, tzinfo=UTC)


@pytest.fixture(params=BACKENDS)
def operations(request: pytest.FixtureRequest) -> Any:
    return jobs_table_store(request, MemoryOperationStore, DynamoOperationStore)


def new(tenant: str = "tenant-a", key: str = "k") -> bulk.BulkOperation:
    return bulk.BulkOperation(
        bulk.operation_id(tenant, key), tenant, bulk.BulkAction.PAUSE, {"customer": "42", "x": ""}, "h", T0, T0, 9
    )


def test_an_operation_reads_back_whole_and_for_its_tenant_only(operations: Any) -> None:
    operation = new()
    assert operations.create(operation) == operation
    worked = replace(
        operation,
        pending=bulk.PendingPage(
            (bulk.PendingJob("j1", JobState.ACTIVE), bulk.PendingJob("j2", JobState.PAUSED)), "cursor-2"
        ),
        cursor="cursor-1",
        changed=3,
        unchanged=1,
        failed=(bulk.JobFailure("j0", "only an ACTIVE job can be paused; this one is CANCELLED"),),
        version=2,
    )
    assert operations.save(worked, 1)
    assert operations.get("tenant-a", operation.operation_id) == worked
    assert operations.get("tenant-b", operation.operation_id) is None
    done = replace(worked, pending=None, cursor=None, state=bulk.OperationState.DONE, version=3)
    assert operations.save(done, 2)
    assert operations.get("tenant-a", operation.operation_id) == done


def test_a_second_create_returns_the_first_and_a_stale_save_changes_nothing(operations: Any) -> None:
    first = new()
    operations.create(first)
    assert operations.create(replace(first, matched=1)) == first
    assert not operations.save(replace(first, changed=5, version=2), 7)
    assert not operations.save(replace(new(key="never-created"), version=2), 1)
    assert operations.get("tenant-a", first.operation_id) == first
