"""The fan-out's record in the jobs table (`scheduler.core.capacity.fan_out`): one item, `PK=FANOUT`, written once a
minute by the forecast and by a sweep that ran out, read by each tick (one strongly consistent read)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from scheduler.adapters.codec import n, s
from scheduler.adapters.dynamodb.common import condition_failed
from scheduler.core.model.timefmt import from_ms, to_ms
from scheduler.core.ports import FanOutRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

FAN_OUT_KEY = {"PK": s("FANOUT"), "SK": s("FANOUT")}


class DynamoFanOutStore:
    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    def read(self) -> FanOutRecord:
        item = self.client.get_item(TableName=self.table, Key=FAN_OUT_KEY, ConsistentRead=True).get("Item")
        if not item:
            return FanOutRecord()
        due = {from_ms(int(minute)): int(count["N"]) for minute, count in item.get("due", {}).get("M", {}).items()}
        return FanOutRecord(
            due=due,
            forecast_at=from_ms(int(item["forecast_ms"]["N"])) if "forecast_ms" in item else None,
            backlog_sweeps=int(item["backlog"]["N"]) if "backlog" in item else 0,
            backlog_at=from_ms(int(item["backlog_ms"]["N"])) if "backlog_ms" in item else None,
        )

    def record_forecast(self, due: Mapping[datetime, int], at: datetime) -> None:
        by_minute = {str(to_ms(minute)): n(count) for minute, count in due.items()}
        self._set("SET due = :due, forecast_ms = :at", {":due": {"M": by_minute}}, at)

    def record_backlog(self, sweeps: int, at: datetime) -> None:
        self._set("SET backlog = :sweeps, backlog_ms = :at", {":sweeps": n(sweeps)}, at)

    def claim_launch(self, minute: datetime) -> bool:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=FAN_OUT_KEY,
                UpdateExpression="SET launched_ms = :m",
                ConditionExpression="attribute_not_exists(launched_ms) OR launched_ms < :m",
                ExpressionAttributeValues={":m": n(to_ms(minute))},
            )
        except ClientError as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    def _set(self, expression: str, values: dict[str, Any], at: datetime) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=FAN_OUT_KEY,
            UpdateExpression=expression,
            ExpressionAttributeValues={**values, ":at": n(to_ms(at))},
        )
