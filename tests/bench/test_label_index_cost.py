"""What the label index and the external id cost, metered on DynamoDB Local (docs/cost.md, "Labels and external
ids"): a create pays 2 write units a label and 2 for an external id (items in its transaction); a list by label
pays a query of the label's partition and a read of each job it lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from scheduler.adapters.dynamodb import DynamoJobStore
from scheduler.core.model.job import Job, JobQuery, JobSpec, JobState
from scheduler.core.model.labels import LabelSelector
from scheduler_bench.metering import Meter

T0 = datetime(2030, 1, 1, tzinfo=UTC)


def job(n: int, **spec: Any) -> Job:
    definition = {"name": "charge", "schedule": {"type": "rate", "every_seconds": 60}, **spec}
    definition["target"] = {"type": "http", "url": "https://example.com/hook"}
    return Job(
        job_id=f"job{n:04d}",
        tenant="tenant-a",
        spec=JobSpec.model_validate(definition),
        version=1,
        state=JobState.ACTIVE,
        created_at=T0,
        updated_at=T0,
        next_run_at=T0 + timedelta(minutes=1),
    )


def test_a_label_costs_two_write_units_a_create_and_a_list_reads_its_page(resources: Any, dynamodb_client: Any) -> None:
    meter = Meter()
    client = meter.attach(boto3.client("dynamodb", config=dynamodb_client.meta.config))
    jobs = DynamoJobStore(resources.jobs_table, 2, client)

    with meter.phase("plain"):
        jobs.create(job(0), None, None, late=False, quota=100)
    with meter.phase("labelled"):
        jobs.create(job(1, labels={"customer": "42", "tier": "gold", "env": "prod"}, external_id="o-1"), None, None,
                    late=False, quota=100)  # fmt: skip
    for n in range(2, 21):
        jobs.create(job(n, labels={"customer": "42"}), None, None, late=False, quota=100)
    with meter.phase("list"):
        page, cursor = jobs.list("tenant-a", None, 10, None, JobQuery((LabelSelector("customer", "42"),)))

    plain, labelled, listed = meter.totals({"plain"}), meter.totals({"labelled"}), meter.totals({"list"})
    # The job, the quota counter (2 each in a transaction) and the job's list index entry
    assert plain.write_units == 5.0
    # Three labels and an external id: four more items in the transaction, 2 units each
    assert labelled.write_units - plain.write_units == 8.0
    # A page of 10 by label: one query (0.5, eventually consistent, under 4 KB) and the 11 jobs it read (0.5 each)
    assert len(page) == 10 and cursor is not None
    assert listed.read_units == 6.0
