"""The DynamoDB DedupeStore (extra `aws`: boto3). One item per occurrence key, written with conditional writes.

Table schema (docs/receiving.md): partition key `pk` (S) = the occurrence key, no sort key; attributes
`fencing_token` (N), `state` (S: IN_PROGRESS | COMPLETED), `owner` (S), `lease_expires_at` (N, unix seconds),
`expires_at` (N, unix seconds: turn on TTL on it), `result` (S, JSON, at most the guard's `max_result_bytes`:
an item stays well under DynamoDB's 400 KB), `job_id` (S). Create it with
`create_table(client, name)` or the CloudFormation/CDK equivalent (on-demand billing is fine).
"""

from __future__ import annotations

from typing import Any

from punctual_sdk.receiver.dedupe import COMPLETED, IN_PROGRESS, DeliveryRecord, State


def _conditional_failure(exc: Exception) -> bool:
    response = getattr(exc, "response", None)
    return isinstance(response, dict) and response.get("Error", {}).get("Code") == "ConditionalCheckFailedException"


def _record(item: dict[str, Any]) -> DeliveryRecord:
    state: State = COMPLETED if item["state"]["S"] == COMPLETED else IN_PROGRESS
    return DeliveryRecord(
        occurrence_key=item["pk"]["S"],
        fencing_token=int(item["fencing_token"]["N"]),
        state=state,
        owner=item.get("owner", {}).get("S", ""),
        lease_expires_at=float(item.get("lease_expires_at", {}).get("N", "0")),
        expires_at=int(item["expires_at"]["N"]),
        result=item["result"]["S"] if "result" in item else None,
        job_id=item.get("job_id", {}).get("S", ""),
    )


def create_table(client: Any, table_name: str) -> None:
    """Create the dedupe table (on-demand) and turn TTL on for `expires_at`; waits until it exists."""
    client.create_table(
        TableName=table_name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    client.get_waiter("table_exists").wait(TableName=table_name)
    client.update_time_to_live(
        TableName=table_name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"}
    )


class DynamoDBDedupeStore:
    """A DedupeStore on a DynamoDB table (schema in the module docstring). `client`: a boto3 DynamoDB client,
    built with the default credentials when none is given."""

    def __init__(self, table_name: str, client: Any | None = None) -> None:
        if client is None:
            import boto3

            client = boto3.client("dynamodb")
        self.table_name = table_name
        self.client = client

    def claim(self, record: DeliveryRecord, now: float) -> DeliveryRecord | None:
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={
                    "pk": {"S": record.occurrence_key},
                    "fencing_token": {"N": str(record.fencing_token)},
                    "state": {"S": IN_PROGRESS},
                    "owner": {"S": record.owner},
                    "lease_expires_at": {"N": repr(record.lease_expires_at)},
                    "expires_at": {"N": str(record.expires_at)},
                    "job_id": {"S": record.job_id},
                },
                ConditionExpression=(
                    "attribute_not_exists(pk) OR expires_at <= :now OR "
                    "(#state = :in_progress AND lease_expires_at <= :now AND fencing_token <= :token)"
                ),
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":now": {"N": repr(now)},
                    ":in_progress": {"S": IN_PROGRESS},
                    ":token": {"N": str(record.fencing_token)},
                },
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except Exception as exc:
            if not _conditional_failure(exc):
                raise
            item = getattr(exc, "response", {}).get("Item")
            if item is None:  # an emulator that does not return the old item
                return self.get(record.occurrence_key) or record
            return _record(item)
        return None

    def raise_token(self, occurrence_key: str, fencing_token: int) -> None:
        self._update_if(
            occurrence_key,
            UpdateExpression="SET fencing_token = :token",
            ConditionExpression="attribute_exists(pk) AND fencing_token < :token",
            ExpressionAttributeValues={":token": {"N": str(fencing_token)}},
        )

    def complete(self, occurrence_key: str, owner: str, result: str) -> bool:
        return self._update_if(
            occurrence_key,
            UpdateExpression="SET #state = :completed, #result = :result REMOVE lease_expires_at",
            ConditionExpression="#state = :in_progress AND #owner = :owner",
            ExpressionAttributeNames={"#state": "state", "#result": "result", "#owner": "owner"},
            ExpressionAttributeValues={
                ":completed": {"S": COMPLETED},
                ":in_progress": {"S": IN_PROGRESS},
                ":owner": {"S": owner},
                ":result": {"S": result},
            },
        )

    def release(self, occurrence_key: str, owner: str) -> None:
        self._update_if(
            occurrence_key,
            UpdateExpression="SET lease_expires_at = :zero",
            ConditionExpression="#state = :in_progress AND #owner = :owner",
            ExpressionAttributeNames={"#state": "state", "#owner": "owner"},
            ExpressionAttributeValues={
                ":zero": {"N": "0"},
                ":in_progress": {"S": IN_PROGRESS},
                ":owner": {"S": owner},
            },
        )

    def get(self, occurrence_key: str) -> DeliveryRecord | None:
        answer = self.client.get_item(TableName=self.table_name, Key={"pk": {"S": occurrence_key}}, ConsistentRead=True)
        item = answer.get("Item")
        return _record(item) if item is not None else None

    def _update_if(self, occurrence_key: str, **request: Any) -> bool:
        """A conditional update of the occurrence's item: whether it took effect (its condition held)."""
        try:
            self.client.update_item(TableName=self.table_name, Key={"pk": {"S": occurrence_key}}, **request)
        except Exception as exc:
            if not _conditional_failure(exc):
                raise
            return False
        return True
