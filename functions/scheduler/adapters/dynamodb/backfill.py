"""The backfill store in the jobs table."""

from __future__ import annotations

import builtins
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from scheduler.adapters.codec import BACKFILL_PK, backfill_from_item, backfill_to_item, n, s
from scheduler.adapters.dynamodb.common import (
    PAGE_SIZE,
    condition_failed,
    conditionally,
    decode_cursor,
    epoch_seconds,
    old_item,
    query_page,
    query_pages,
)
from scheduler.core.model.job import BackfillState
from scheduler.core.model.timefmt import to_ms
from scheduler.core.ports import Backfill

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

#: A finished backfill stays readable (GET .../backfill/{id}) this long.
BACKFILL_RETENTION = timedelta(days=30)


class DynamoBackfillStore:
    """Backfills in the jobs table: `PK=BACKFILL`, `SK={backfill_id}` (ids sort by creation). Few and short-lived,
    so one partition; finished ones expire by TTL after BACKFILL_RETENTION."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    def _key(self, backfill_id: str) -> dict[str, Any]:
        return {"PK": s(BACKFILL_PK), "SK": s(backfill_id)}

    def create(self, backfill: Backfill) -> None:
        self.client.put_item(
            TableName=self.table, Item=backfill_to_item(backfill), ConditionExpression="attribute_not_exists(PK)"
        )

    def get(self, backfill_id: str) -> Backfill | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(backfill_id), ConsistentRead=True).get("Item")
        return backfill_from_item(item) if item else None

    def for_job(self, job_id: str, limit: int, cursor: str | None) -> tuple[builtins.list[Backfill], str | None]:
        """Newest first, strongly consistent. Every job's backfills share the partition, so this filters on the job
        and queries on until it holds one more than `limit` or the partition ends: a page that ends at the job's
        oldest backfill carries no cursor. The cursor names the job, so it cannot page through another job's."""
        start: dict[str, Any] | None = None
        given = decode_cursor(cursor)
        if given is not None:
            sort_key = given.get("SK")
            if (
                set(given) != {"PK", "SK", "job_id"}
                or given["PK"] != s(BACKFILL_PK)
                or given["job_id"] != s(job_id)
                or not (isinstance(sort_key, dict) and set(sort_key) == {"S"} and isinstance(sort_key["S"], str))
                or not sort_key["S"]
            ):
                raise ValueError("cursor is not one this API returned for this job")
            start = {"PK": given["PK"], "SK": sort_key}
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk",
            "FilterExpression": "job_id = :job",
            "ExpressionAttributeValues": {":pk": s(BACKFILL_PK), ":job": s(job_id)},
            "ScanIndexForward": False,
            "ConsistentRead": True,
            "Limit": max(limit + 1, PAGE_SIZE),  # items read per query, before the filter
        }
        page, next_cursor = query_page(self.client, request, start, limit, ("PK", "SK", "job_id"))
        return [backfill_from_item(item) for item in page], next_cursor

    def running(self, limit: int) -> builtins.list[Backfill]:
        found: builtins.list[Backfill] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk",
            "FilterExpression": "#state = :running",
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": {":pk": s(BACKFILL_PK), ":running": s(BackfillState.RUNNING.value)},
            "ConsistentRead": True,
        }
        for items in query_pages(self.client, request):
            found += [backfill_from_item(i) for i in items]
            if len(found) >= limit:
                break
        return found[:limit]

    def advance(self, backfill: Backfill, cursor: datetime, dispatched: int, done: bool, now: datetime) -> bool:
        values: dict[str, Any] = {
            ":cursor": n(to_ms(cursor)),
            ":dispatched": n(dispatched),
            ":one": n(1),
            ":now": n(to_ms(now)),
            ":running": s(BackfillState.RUNNING.value),
            ":state": s((BackfillState.COMPLETED if done else BackfillState.RUNNING).value),
        }
        expression = "SET cursor_ms = :cursor, dispatched = :dispatched, updated_ms = :now, #state = :state"
        if done:
            expression += ", expires_at = :exp"
            values[":exp"] = epoch_seconds(now + BACKFILL_RETENTION)
        condition = "#state = :running AND "
        if backfill.cursor is None:
            condition += "attribute_not_exists(cursor_ms)"
        else:
            condition += "cursor_ms = :old"
            values[":old"] = n(to_ms(backfill.cursor))
        return conditionally(
            self.client.update_item,
            TableName=self.table,
            Key=self._key(backfill.backfill_id),
            UpdateExpression=expression + " ADD waves :one",
            ConditionExpression=condition,
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues=values,
        )

    def finish(self, backfill: Backfill, state: BackfillState, now: datetime) -> Backfill | None:
        try:
            response = self.client.update_item(
                TableName=self.table,
                Key=self._key(backfill.backfill_id),
                UpdateExpression="SET #state = :state, updated_ms = :now, expires_at = :exp",
                ConditionExpression="#state = :running",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":state": s(state.value),
                    ":now": n(to_ms(now)),
                    ":exp": epoch_seconds(now + BACKFILL_RETENTION),
                    ":running": s(BackfillState.RUNNING.value),
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if condition_failed(exc):
                old = old_item(exc)
                return backfill_from_item(old) if old else None
            raise
        return backfill_from_item(response["Attributes"])
