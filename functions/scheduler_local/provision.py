"""Create the local tables and queues from the same definitions the CDK stack uses (`scheduler.schema`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3
from botocore.exceptions import ClientError

from scheduler.schema import EXECUTIONS_TABLE, JOBS_TABLE, READY_QUEUE, TableSchema, create_table_request

#: The table of the example handler target `payments.charge` (not part of the product's schema).
EXAMPLE_TABLE = TableSchema("Example", ("PK", "S"), None, "expires_at", ())


@dataclass(frozen=True)
class Resources:
    jobs_table: str
    executions_table: str
    ready_queue_url: str
    dlq_url: str
    example_table: str = ""

    def env(self) -> dict[str, str]:
        return {
            "SCHEDULER_JOBS_TABLE": self.jobs_table,
            "SCHEDULER_EXECUTIONS_TABLE": self.executions_table,
            "SCHEDULER_READY_QUEUE_URL": self.ready_queue_url,
            "SCHEDULER_DLQ_URL": self.dlq_url,
            "SCHEDULER_EXAMPLE_TABLE": self.example_table,
        }


def _create_table(client: Any, schema: TableSchema, name: str) -> None:
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


def provision(prefix: str, dynamodb: Any | None = None, sqs: Any | None = None) -> Resources:
    """Create (idempotently) `{prefix}-jobs`, `{prefix}-executions`, `{prefix}-ready` and `{prefix}-dlq`."""
    dynamodb = dynamodb or boto3.client("dynamodb")
    sqs = sqs or boto3.client("sqs")
    jobs, executions = f"{prefix}-jobs", f"{prefix}-executions"
    _create_table(dynamodb, JOBS_TABLE, jobs)
    _create_table(dynamodb, EXECUTIONS_TABLE, executions)
    _create_table(dynamodb, EXAMPLE_TABLE, f"{prefix}-example-payments")
    dlq_url = sqs.create_queue(
        QueueName=f"{prefix}-dlq",
        Attributes={"MessageRetentionPeriod": str(READY_QUEUE.dlq_retention_days * 86400)},
    )["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    ready_url = sqs.create_queue(
        QueueName=f"{prefix}-ready",
        Attributes={
            "VisibilityTimeout": str(READY_QUEUE.visibility_timeout_seconds),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(READY_QUEUE.max_receive_count)}
            ),
        },
    )["QueueUrl"]
    return Resources(jobs, executions, ready_url, dlq_url, f"{prefix}-example-payments")
