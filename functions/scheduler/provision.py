"""Create the tables and queues from the same definitions the CDK stack uses (`scheduler.schema`): for the local
stack (`scheduler_local`), the test scheduler (`punctual_sdk.testing`, on moto) and the tests. Never on AWS, where
the CDK stack creates them."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import ClientError

from scheduler.schema import (
    EXECUTIONS_TABLE,
    JOBS_TABLE,
    READY_LANES,
    READY_QUEUE,
    TableSchema,
    create_table_request,
)

#: The table of the example handler target `payments.charge` (not part of the product's schema).
EXAMPLE_TABLE = TableSchema("Example", ("PK", "S"), None, "expires_at", ())


@dataclass(frozen=True)
class Resources:
    jobs_table: str
    executions_table: str
    ready_queue_url: str
    dlq_url: str
    example_table: str = ""
    event_bus_name: str = "default"
    ready_queue_high_url: str = ""
    ready_queue_low_url: str = ""

    def env(self) -> dict[str, str]:
        return {
            "SCHEDULER_READY_QUEUE_HIGH_URL": self.ready_queue_high_url,
            "SCHEDULER_READY_QUEUE_LOW_URL": self.ready_queue_low_url,
            "SCHEDULER_JOBS_TABLE": self.jobs_table,
            "SCHEDULER_EXECUTIONS_TABLE": self.executions_table,
            "SCHEDULER_READY_QUEUE_URL": self.ready_queue_url,
            "SCHEDULER_DLQ_URL": self.dlq_url,
            "SCHEDULER_EXAMPLE_TABLE": self.example_table,
            "SCHEDULER_EVENT_BUS_NAME": self.event_bus_name,
            # The local stack and the tests: the public development secrets may be used (never on AWS).
            "SCHEDULER_LOCAL_MODE": "true",
            # The example handler targets (payments.charge) are registered on the local stack only.
            "SCHEDULER_HANDLER_MODULES": '["scheduler.examples"]',
            # One developer's tenants share the local AWS targets and example handlers; on AWS they are closed unless
            # the operator opens them (docs/security.md, "Tenant isolation at AWS targets").
            "SCHEDULER_DEFAULT_TARGETS_OPEN": os.environ.get("SCHEDULER_DEFAULT_TARGETS_OPEN", "true"),
            # One developer's herds and benchmarks are not throttled per tenant unless asked (on AWS: 20 a second).
            "SCHEDULER_TENANT_REQUEST_RATE": os.environ.get("SCHEDULER_TENANT_REQUEST_RATE", "0"),
        }


def create_table(client: Any, schema: TableSchema, name: str) -> None:
    """Create the table `name` with `schema` (and its TTL) unless it exists, and wait until it is active."""
    try:
        client.create_table(**create_table_request(schema, name))
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceInUseException":
            raise
    client.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 0.2, "MaxAttempts": 100})
    try:
        client.update_time_to_live(
            TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": schema.ttl_attribute}
        )
    except ClientError as exc:  # already enabled
        if exc.response["Error"]["Code"] not in ("ValidationException",):
            raise


def _create_event_bus(client: Any, name: str) -> str:
    try:
        client.create_event_bus(Name=name)
    except ClientError as exc:
        if exc.response["Error"]["Code"] != "ResourceAlreadyExistsException":
            raise
    return name


def deprovision(prefix: str, dynamodb: Any | None = None, sqs: Any | None = None, events: Any | None = None) -> None:
    """Delete what `provision(prefix)` created, whatever of it is there. For tests and benchmarks on the local
    emulators: a table left behind is not free there (DynamoDB Local's TTL reaper walks every table it holds, so a
    suite that kept each test's tables made the emulator busier with every test)."""
    dynamodb = dynamodb or boto3.client("dynamodb")
    sqs = sqs or boto3.client("sqs")
    events = events or boto3.client("events", region_name=sqs.meta.region_name)
    for table in (f"{prefix}-jobs", f"{prefix}-executions", f"{prefix}-example-payments"):
        with _already_gone():
            dynamodb.delete_table(TableName=table)
    for name in (f"{prefix}-ready", f"{prefix}-ready-high", f"{prefix}-ready-low", f"{prefix}-dlq"):
        with _already_gone():
            sqs.delete_queue(QueueUrl=sqs.get_queue_url(QueueName=name)["QueueUrl"])
    with _already_gone():
        events.delete_event_bus(Name=f"{prefix}-events")


@contextlib.contextmanager
def _already_gone() -> Iterator[None]:
    """A delete of something that is not there (any more) has what it wanted."""
    try:
        yield
    except ClientError as exc:
        code = exc.response["Error"]["Code"]
        if "NotFound" not in code and "NonExistent" not in code:
            raise


def provision(
    prefix: str,
    dynamodb: Any | None = None,
    sqs: Any | None = None,
    visibility_timeout: int | None = None,
    events: Any | None = None,
) -> Resources:
    """Create (idempotently) `{prefix}-jobs`, `{prefix}-executions`, the ready queues of the priority lanes
    (`{prefix}-ready-high`, `{prefix}-ready`, `{prefix}-ready-low`), `{prefix}-dlq` and the completion-event bus
    `{prefix}-events` (EventBridge on the local emulator).

    `visibility_timeout` overrides the ready queue's (6x the worker timeout), for local crash tests that cannot
    wait 12 minutes for a killed worker's messages to come back."""
    dynamodb = dynamodb or boto3.client("dynamodb")
    sqs = sqs or boto3.client("sqs")
    events = events or boto3.client("events", region_name=sqs.meta.region_name)
    jobs, executions = f"{prefix}-jobs", f"{prefix}-executions"
    create_table(dynamodb, JOBS_TABLE, jobs)
    create_table(dynamodb, EXECUTIONS_TABLE, executions)
    create_table(dynamodb, EXAMPLE_TABLE, f"{prefix}-example-payments")
    dlq_url = sqs.create_queue(
        QueueName=f"{prefix}-dlq",
        Attributes={"MessageRetentionPeriod": str(READY_QUEUE.dlq_retention_days * 86400)},
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    lanes: dict[str, str] = {}
    for priority, lane in READY_LANES.items():
        suffix = "" if priority == "normal" else f"-{priority}"
        lanes[priority] = sqs.create_queue(
            QueueName=f"{prefix}-ready{suffix}",
            Attributes={
                "VisibilityTimeout": str(visibility_timeout or lane.visibility_timeout_seconds),
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(lane.max_receive_count)}
                ),
            },
        )["QueueUrl"]
    bus = _create_event_bus(events, f"{prefix}-events")
    return Resources(
        jobs,
        executions,
        lanes["normal"],
        dlq_url,
        f"{prefix}-example-payments",
        bus,
        ready_queue_high_url=lanes["high"],
        ready_queue_low_url=lanes["low"],
    )
