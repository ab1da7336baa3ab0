"""JobStore contract for labels and external ids (scheduler.core.model.labels): the same tests against MemoryJobStore
and DynamoJobStore (DynamoDB Local) - the label filters of the job list with their pagination, the index kept in step
with a job's labels on a change, and an external id unique per tenant."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.errors import ExternalIdTaken, IdempotentReplay
from scheduler.core.model.job import Job, JobQuery, JobState
from scheduler.core.model.labels import LabelSelector
from scheduler.core.ports import IdempotencyRecord, NewJob

QUOTA = 100


def labelled(make: Any, tenant: str = "tenant-a", **spec_fields: Any) -> Job:
    job = make.job(tenant)
    return job.model_copy(update={"spec": job.spec.model_copy(update=spec_fields)})


def selector(*texts: str, **rest: Any) -> JobQuery:
    return JobQuery(tuple(LabelSelector.parse(t) for t in texts), **rest)


def listed(jobs: Any, tenant: str, query: JobQuery, limit: int = 2, state: JobState | None = None) -> list[str]:
    """Every page of the list, the job ids in order (following the cursors)."""
    ids: list[str] = []
    cursor = None
    for _ in range(50):
        page, cursor = jobs.list(tenant, state, limit, cursor, query)
        assert len(page) <= limit
        ids += [j.job_id for j in page]
        if cursor is None:
            return ids
    raise AssertionError("list never ended")


def test_the_list_filters_by_labels_anded_with_stable_pages(jobs, make) -> None:
    # Given jobs of two customers and tiers, and another tenant's job with the same labels
    a1 = labelled(make, labels={"customer": "42", "tier": "gold"}, name="charge-a1")
    a2 = labelled(make, labels={"customer": "42"}, name="charge-a2")
    a3 = labelled(make, labels={"customer": "42", "tier": ""}, name="refund-a3")
    b1 = labelled(make, labels={"customer": "7", "tier": "gold"}, name="charge-b1")
    other = labelled(make, "tenant-b", labels={"customer": "42", "tier": "gold"})
    for job in (a1, a2, a3, b1, other):
        jobs.create(job, None, None, late=False, quota=QUOTA)

    # Then an exact selector lists its jobs in job-id order, a page at a time, every one once
    assert listed(jobs, "tenant-a", selector("customer:42"), limit=2) == sorted([a1.job_id, a2.job_id, a3.job_id])
    # And `key:` lists the jobs that have the key, whatever its value (by value, then job id)
    assert listed(jobs, "tenant-a", selector("tier:"), limit=1) == [a3.job_id, *sorted([a1.job_id, b1.job_id])]
    # And selectors are ANDed, with the name prefix and target type
    assert listed(jobs, "tenant-a", selector("customer:42", "tier:")) == sorted([a1.job_id, a3.job_id])
    assert listed(jobs, "tenant-a", selector("tier:gold", name_prefix="charge-")) == sorted([a1.job_id, b1.job_id])
    assert listed(jobs, "tenant-a", selector("customer:42", name_prefix="refund")) == [a3.job_id]
    assert listed(jobs, "tenant-a", selector("customer:42", target_type="sqs")) == []
    # And without a label, the other filters apply to the whole list
    assert listed(jobs, "tenant-a", JobQuery(name_prefix="charge-")) == [a1.job_id, a2.job_id, b1.job_id]
    # And an empty value is a value: `tier:` matches it, and a value that no job has matches nothing
    assert listed(jobs, "tenant-a", selector("customer:4")) == []
    # And another tenant's labels never show
    assert listed(jobs, "tenant-b", selector("customer:42")) == [other.job_id]


def index_entries(stores: Any, key: str) -> list[str]:
    """The label index's sort keys under `key` of tenant-a (DynamoDB only: the memory store has no index)."""
    jobs = stores.jobs
    found = jobs.client.query(
        TableName=jobs.table,
        KeyConditionExpression="PK = :p",
        ExpressionAttributeValues={":p": {"S": f"LABEL#tenant-a#{key}"}},
        ConsistentRead=True,
    )["Items"]
    return [item["SK"]["S"] for item in found]


def test_a_change_of_labels_moves_the_job_in_the_label_index(jobs, make, stores) -> None:
    job = labelled(make, labels={"customer": "42", "env": "prod"})
    jobs.create(job, None, None, late=False, quota=QUOTA)

    changed = job.model_copy(
        update={"version": 2, "spec": job.spec.model_copy(update={"labels": {"customer": "43", "team": "billing"}})}
    )
    jobs.replace(changed, job, None, late=False)

    assert listed(jobs, "tenant-a", selector("customer:42")) == []
    assert listed(jobs, "tenant-a", selector("env:")) == []
    assert listed(jobs, "tenant-a", selector("customer:43")) == [job.job_id]
    assert listed(jobs, "tenant-a", selector("team:billing")) == [job.job_id]
    if stores.name == "dynamodb":  # no stale entry is left to read (the list would drop it, at a read's cost)
        assert index_entries(stores, "customer") == [f"43#{job.job_id}"]
        assert index_entries(stores, "env") == []
    # A cancelled job keeps its labels: it is listed by them, with its state
    cancelled = changed.model_copy(update={"version": 3, "state": JobState.CANCELLED, "next_run_at": None})
    jobs.replace(cancelled, changed, None, late=False)
    assert listed(jobs, "tenant-a", selector("team:billing"), state=JobState.CANCELLED) == [job.job_id]
    assert listed(jobs, "tenant-a", selector("team:billing"), state=JobState.ACTIVE) == []


def test_a_cursor_of_another_selector_or_tenant_is_refused(jobs, make, stores) -> None:
    for _ in range(3):
        jobs.create(labelled(make, labels={"customer": "42"}), None, None, late=False, quota=QUOTA)
    _, cursor = jobs.list("tenant-a", None, 1, None, selector("customer:42"))
    assert cursor is not None
    if stores.name != "dynamodb":
        pytest.skip("the memory store's cursor is a job id, not a key to check")
    with pytest.raises(ValueError):
        jobs.list("tenant-a", None, 1, cursor, selector("region:"))
    with pytest.raises(ValueError):
        jobs.list("tenant-b", None, 1, cursor, selector("customer:42"))
    with pytest.raises(ValueError):
        jobs.list("tenant-a", None, 1, cursor, JobQuery())


def test_an_external_id_is_unique_per_tenant_and_reads_its_job(jobs, make) -> None:
    first = labelled(make, external_id="order-1")
    jobs.create(first, None, None, late=False, quota=QUOTA)

    # A second job of the tenant with the id is refused, naming the job that has it; nothing of it is stored
    second = labelled(make, external_id="order-1", labels={"customer": "9"})
    with pytest.raises(ExternalIdTaken) as taken:
        jobs.create(second, None, None, late=False, quota=QUOTA)
    assert (taken.value.external_id, taken.value.job_id) == ("order-1", first.job_id)
    assert jobs.get(second.job_id) is None
    assert listed(jobs, "tenant-a", selector("customer:9")) == []
    # And a batch holding it stores nothing
    assert jobs.create_all([NewJob(labelled(make, external_id="order-1"), None, None, False)], QUOTA) == 0

    # Another tenant may use the same id; each reads its own job by it
    mine_elsewhere = labelled(make, "tenant-b", external_id="order-1")
    jobs.create(mine_elsewhere, None, None, late=False, quota=QUOTA)
    assert jobs.get_by_external_id("tenant-a", "order-1") == first
    assert jobs.get_by_external_id("tenant-b", "order-1") == mine_elsewhere
    assert jobs.get_by_external_id("tenant-a", "order-2") is None


def test_a_replayed_create_wins_over_its_own_external_id(jobs, make) -> None:
    job = labelled(make, external_id="order-1")
    record = IdempotencyRecord(job.tenant, "key-1", "hash-1", job.job_id, job.created_at.replace(year=2100))
    jobs.create(job, None, record, late=False, quota=QUOTA)

    again = labelled(make, external_id="order-1")
    replay = IdempotencyRecord(again.tenant, "key-1", "hash-1", again.job_id, record.expires_at)
    with pytest.raises(IdempotentReplay) as replayed:
        jobs.create(again, None, replay, late=False, quota=QUOTA)
    assert replayed.value.record.job_id == job.job_id


def test_a_batch_with_one_external_id_twice_stores_nothing(jobs, make) -> None:
    twins = [NewJob(labelled(make, external_id="dup"), None, None, False) for _ in range(2)]
    assert jobs.create_all(twins, QUOTA) == 0
    assert jobs.get_by_external_id("tenant-a", "dup") is None
