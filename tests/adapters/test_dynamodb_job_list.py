"""The job list in DynamoDB: a batch transaction's jobs share one entry in the keys-only by_tenant index (an item
that names them), where one-by-one jobs each have their own; a replace keeps either as it is. The listing itself
(order, pages, filters) is the job store contract's."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoJobStore
from scheduler.adapters.dynamodb.common import decode_cursor, encode_cursor
from scheduler.core.model.job import Job, JobState
from scheduler.core.ports import NewJob

pytestmark = pytest.mark.emulator

QUOTA = 100
SHARDS = 4


def entries(client: Any, table: str, tenant: str) -> list[dict[str, Any]]:
    response = client.query(
        TableName=table,
        IndexName="by_tenant",
        KeyConditionExpression="tenant_pk = :t",
        ExpressionAttributeValues={":t": {"S": f"TENANT#{tenant}"}},
    )
    return list(response["Items"])


def raw(client: Any, table: str, job: Job) -> dict[str, Any]:
    return dict(client.get_item(TableName=table, Key={"PK": {"S": f"JOB#{job.job_id}"}, "SK": {"S": "DEF"}})["Item"])


@pytest.fixture
def store(resources: Any, dynamodb_client: Any) -> DynamoJobStore:
    return DynamoJobStore(resources.jobs_table, SHARDS, dynamodb_client)


def batch(store: DynamoJobStore, make: Any, tenant: str, count: int) -> list[Job]:
    made = [make.job(tenant, created_at=make.t0 + timedelta(seconds=i)) for i in range(count)]
    assert store.create_all([NewJob(j, make.timer(j), None, False) for j in made], quota=QUOTA) == count
    return made


def test_a_batch_writes_one_list_entry_naming_its_jobs(store, resources, dynamodb_client, make) -> None:
    jobs = batch(store, make, "tenant-batch", 5)

    [entry] = entries(dynamodb_client, resources.jobs_table, "tenant-batch")

    assert entry["PK"] == {"S": f"LIST#{jobs[0].job_id}"}
    for job in jobs:
        item = raw(dynamodb_client, resources.jobs_table, job)
        assert "tenant_pk" not in item and "tenant_sk" not in item
        assert item["listed_in"] == {"S": jobs[0].job_id}


def test_one_job_alone_in_a_batch_has_its_own_entry(store, resources, dynamodb_client, make) -> None:
    [job] = batch(store, make, "tenant-single", 1)

    [entry] = entries(dynamodb_client, resources.jobs_table, "tenant-single")

    assert entry["PK"] == {"S": f"JOB#{job.job_id}"}


def test_a_replace_keeps_the_listing_and_removes_what_the_new_version_lacks(
    store, resources, dynamodb_client, make
) -> None:
    first, member, _ = batch(store, make, "tenant-replace", 3)
    single = make.job("tenant-replace", created_at=make.t0 + timedelta(minutes=1))
    store.create(single, None, None, late=False, quota=QUOTA)
    assert "next_ms" in raw(dynamodb_client, resources.jobs_table, member)

    for job in (member, single):
        paused = job.model_copy(update={"version": job.version + 1, "state": JobState.PAUSED, "next_run_at": None})
        store.replace(paused, job, None, late=False)
        assert store.get(job.job_id) == paused

    keys = sorted(e["PK"]["S"] for e in entries(dynamodb_client, resources.jobs_table, "tenant-replace"))
    assert keys == sorted([f"LIST#{first.job_id}", f"JOB#{single.job_id}"])
    item = raw(dynamodb_client, resources.jobs_table, member)
    assert "next_ms" not in item and "tenant_pk" not in item and item["listed_in"] == {"S": first.job_id}
    assert "tenant_pk" in raw(dynamodb_client, resources.jobs_table, single)


def test_a_cursor_that_names_no_batch_position_is_refused(store, make) -> None:
    jobs = batch(store, make, "tenant-cursor", 4)
    single = make.job("tenant-cursor", created_at=make.t0 + timedelta(minutes=1))
    store.create(single, None, None, late=False, quota=QUOTA)
    _, inside = store.list("tenant-cursor", None, 2, None)
    key = decode_cursor(inside)
    assert key is not None and key["at"] == 1 and key["PK"] == {"S": f"LIST#{jobs[0].job_id}"}

    on_a_job = {**key, "PK": {"S": f"JOB#{single.job_id}"}, "SK": {"S": "DEF"}}
    for forged in ({**key, "at": -1}, {**key, "at": "1"}, on_a_job):
        with pytest.raises(ValueError, match="cursor"):
            store.list("tenant-cursor", None, 2, encode_cursor(forged))
    with pytest.raises(ValueError, match="cursor"):
        store.list("tenant-other", None, 2, inside)
    # nor does a cursor of one's own that points into another tenant's batch read that tenant's jobs
    theirs = batch(store, make, "tenant-theirs", 3)
    into_theirs = {**key, "PK": {"S": f"LIST#{theirs[0].job_id}"}}
    with pytest.raises(ValueError, match="cursor"):
        store.list("tenant-cursor", None, 2, encode_cursor(into_theirs))
