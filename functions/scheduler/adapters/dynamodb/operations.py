"""The bulk operation store in the jobs table."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from scheduler.adapters.codec import n, s
from scheduler.adapters.dynamodb.common import condition_failed, conditionally, epoch_seconds
from scheduler.core.jobs.bulk import (
    OPERATION_RETENTION,
    BulkAction,
    BulkOperation,
    JobFailure,
    OperationState,
    PendingJob,
    PendingPage,
)
from scheduler.core.model.job import JobState
from scheduler.core.model.timefmt import from_ms, to_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def operation_pk(tenant: str) -> str:
    return f"OP#{tenant}"


def operation_to_item(operation: BulkOperation) -> dict[str, Any]:
    """One item: the keys, the version (the conditions' attribute), and the rest as one JSON document (an
    operation is read and written whole; 1,000 failures of 200 characters stay well under 400 KB)."""
    pending = operation.pending
    document = {
        "action": operation.action.value,
        "labels": dict(operation.labels),
        "request_hash": operation.request_hash,
        "created_ms": to_ms(operation.created_at),
        "updated_ms": to_ms(operation.updated_at),
        "matched": operation.matched,
        "cursor": operation.cursor,
        "pending": None
        if pending is None
        else {"jobs": [[p.job_id, p.state.value] for p in pending.jobs], "next_cursor": pending.next_cursor},
        "changed": operation.changed,
        "unchanged": operation.unchanged,
        "failed": [[f.job_id, f.reason] for f in operation.failed],
    }
    return {
        "PK": s(operation_pk(operation.tenant)),
        "SK": s(operation.operation_id),
        "kind": s("operation"),
        "tenant": s(operation.tenant),
        "state": s(operation.state.value),
        "version": n(operation.version),
        "document": s(json.dumps(document, separators=(",", ":"))),
        "expires_at": epoch_seconds(operation.updated_at + OPERATION_RETENTION),
    }


def operation_from_item(item: dict[str, Any]) -> BulkOperation:
    doc = json.loads(item["document"]["S"])
    pending = doc["pending"]
    return BulkOperation(
        operation_id=item["SK"]["S"],
        tenant=item["tenant"]["S"],
        action=BulkAction(doc["action"]),
        labels=doc["labels"],
        request_hash=doc["request_hash"],
        created_at=from_ms(doc["created_ms"]),
        updated_at=from_ms(doc["updated_ms"]),
        matched=doc["matched"],
        state=OperationState(item["state"]["S"]),
        cursor=doc["cursor"],
        pending=None
        if pending is None
        else PendingPage(tuple(PendingJob(j, JobState(st)) for j, st in pending["jobs"]), pending["next_cursor"]),
        changed=doc["changed"],
        unchanged=doc["unchanged"],
        failed=tuple(JobFailure(j, r) for j, r in doc["failed"]),
        version=int(item["version"]["N"]),
    )


class DynamoOperationStore:
    """Bulk operations in the jobs table: `PK=OP#{tenant}`, `SK={operation id}`, so a tenant reads only its own.
    They expire by TTL OPERATION_RETENTION after their last change."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    def create(self, operation: BulkOperation) -> BulkOperation:
        try:
            self.client.put_item(
                TableName=self.table,
                Item=operation_to_item(operation),
                ConditionExpression="attribute_not_exists(PK)",
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            existing = self.get(operation.tenant, operation.operation_id)
            if existing is None:  # expired between the write and the read: there is nothing to go on from
                raise
            return existing
        return operation

    def get(self, tenant: str, operation_id: str) -> BulkOperation | None:
        key = {"PK": s(operation_pk(tenant)), "SK": s(operation_id)}
        item = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True).get("Item")
        return operation_from_item(item) if item else None

    def save(self, operation: BulkOperation, expected_version: int) -> bool:
        return conditionally(
            self.client.put_item,
            TableName=self.table,
            Item=operation_to_item(operation),
            ConditionExpression="#version = :expected",
            ExpressionAttributeNames={"#version": "version"},
            ExpressionAttributeValues={":expected": n(expected_version)},
        )
