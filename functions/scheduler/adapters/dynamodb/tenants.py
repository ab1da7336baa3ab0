"""Each tenant's dispatch-budget calendar and execution slots in the jobs table."""

from __future__ import annotations

import builtins
import json
import random
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from scheduler.adapters.codec import n, s
from scheduler.adapters.dynamodb.common import condition_failed, conditionally, epoch_seconds, query_pages
from scheduler.core.model.flow import FlowControl
from scheduler.core.model.timefmt import from_ms, to_ms
from scheduler.core.ports import BudgetCalendar, FlowKeyState

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoTenantBudgets:
    """Each tenant's dispatch-budget calendar in the jobs table: `PK=TENANT#{tenant}`, `SK=BUDGET`, next to the
    tenant's quota counter; its `slots` attribute maps a window index to the releases booked in it
    (`BudgetCalendar.booked`). Replaced with a conditional write on `version`, so concurrent sweepers never both fill
    the same window; an idle tenant's item expires."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    @staticmethod
    def _key(tenant: str) -> dict[str, Any]:
        return {"PK": s(f"TENANT#{tenant}"), "SK": s("BUDGET")}

    def load(self, tenant: str) -> BudgetCalendar | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(tenant), ConsistentRead=True).get("Item")
        if not item:
            return None
        booked = {int(window): int(count["N"]) for window, count in item.get("slots", {}).get("M", {}).items()}
        return BudgetCalendar(int(item["version"]["N"]), int(item["window_ms"]["N"]), booked)

    def save(self, tenant: str, calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
        item = {
            **self._key(tenant),
            "version": n(calendar.version),
            "window_ms": n(calendar.window_ms),
            "slots": {"M": {str(window): n(count) for window, count in calendar.booked.items()}},
            "expires_at": epoch_seconds(expires),
        }
        request: dict[str, Any] = {"TableName": self.table, "Item": item}
        if expected is None:
            request["ConditionExpression"] = "attribute_not_exists(PK)"
        else:
            request["ConditionExpression"] = "#version = :v"
            request["ExpressionAttributeNames"] = {"#version": "version"}
            request["ExpressionAttributeValues"] = {":v": n(expected)}
        return conditionally(self.client.put_item, **request)


class DynamoTenantSlots:
    """Each tenant's execution slots in the jobs table: `PK=TENANT#{tenant}`, `SK=SLOT#{n:05d}`, next to its quota
    counter and budget calendar, so one query reads them all. A slot item exists while it is held (or until its
    dead holder's lease ends): taking one is a conditional put (absent, or its lease ended), releasing it a
    conditional delete (still ours). Every holder's item expires by TTL a day after its lease, whatever happens.

    `kind` names another set of slots of each tenant beside its execution slots (`SK={kind}#{n:05d}`): its running
    bulk operations' (`BULK`, scheduler.core.jobs.bulk)."""

    #: Free slots tried (in random order, so concurrent workers spread out) before the tenant counts as full.
    ATTEMPTS = 3

    def __init__(
        self,
        table_name: str,
        client: DynamoDBClient | None = None,
        renewals: DynamoDBClient | None = None,
        *,
        kind: str = "SLOT",
    ) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")
        #: The client a held slot's extension (the lease's heartbeat) goes through; default: `client`.
        self.renewals: Any = renewals or self.client
        self.prefix = f"{kind}#"

    def _key(self, tenant: str, slot: int) -> dict[str, Any]:
        return {"PK": s(f"TENANT#{tenant}"), "SK": s(f"{self.prefix}{slot:05d}")}

    def _held(self, tenant: str, now: datetime) -> dict[int, int]:
        """Slot -> lease end (epoch ms) of every live holder."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :slot)",
            "ExpressionAttributeValues": {":pk": s(f"TENANT#{tenant}"), ":slot": s(self.prefix)},
            "ProjectionExpression": "SK, lease_until",
            "ConsistentRead": True,
        }
        held: dict[int, int] = {}
        for items in query_pages(self.client, request):
            for item in items:
                until = int(item["lease_until"]["N"])
                if until >= to_ms(now):
                    held[int(item["SK"]["S"].removeprefix(self.prefix))] = until
        return held

    def acquire(self, tenant: str, limit: int, holder: str, now: datetime, lease_until: datetime) -> int | None:
        held = self._held(tenant, now)
        if len(held) >= limit:
            return None
        free = [slot for slot in range(limit) if slot not in held]
        random.shuffle(free)
        for slot in free[: self.ATTEMPTS]:
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item={
                        **self._key(tenant, slot),
                        "holder": s(holder),
                        "lease_until": n(to_ms(lease_until)),
                        "expires_at": epoch_seconds(lease_until + timedelta(days=1)),
                    },
                    ConditionExpression="attribute_not_exists(PK) OR lease_until < :now",
                    ExpressionAttributeValues={":now": n(to_ms(now))},
                )
            except ClientError as exc:
                if condition_failed(exc):
                    continue  # another worker took it since the query
                raise
            return slot
        return None

    def in_use(self, tenant: str, now: datetime) -> int:
        return len(self._held(tenant, now))

    def extend(self, tenant: str, slot: int, holder: str, lease_until: datetime) -> bool:
        return conditionally(
            self.renewals.update_item,
            TableName=self.table,
            Key=self._key(tenant, slot),
            UpdateExpression="SET lease_until = :until, expires_at = :exp",
            ConditionExpression="holder = :holder",
            ExpressionAttributeValues={
                ":holder": s(holder),
                ":until": n(to_ms(lease_until)),
                ":exp": epoch_seconds(lease_until + timedelta(days=1)),
            },
        )

    def release(self, tenant: str, slot: int, holder: str) -> None:
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=self._key(tenant, slot),
                ConditionExpression="holder = :holder",
                ExpressionAttributeValues={":holder": s(holder)},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise


class DynamoRequestWindows:
    """Each tenant's request count per window in the jobs table: `PK=TENANT#{tenant}`, `SK=REQUESTS#{window}`, taken
    with one conditional increment (one write unit a request), expiring after its window."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    def take(self, tenant: str, window: int, limit: int, expires: datetime, count: int = 1) -> bool:
        return conditionally(
            self.client.update_item,
            TableName=self.table,
            Key={"PK": s(f"TENANT#{tenant}"), "SK": s(f"REQUESTS#{window}")},
            UpdateExpression="ADD #count :count SET expires_at = :expires",
            ConditionExpression="attribute_not_exists(#count) OR #count <= :room",
            ExpressionAttributeNames={"#count": "count"},
            ExpressionAttributeValues={
                ":count": n(count),
                ":room": n(limit - count),
                ":expires": epoch_seconds(expires),
            },
        )


class DynamoFlowControls:
    """Each tenant's flow-control keys in the jobs table: `PK=TENANT#{tenant}`, `SK=FLOW#{key}`, one item a key (a
    key never holds '#'), so one query lists a tenant's keys. The limits are written last-write-wins by an update of
    their attributes only; the calendar (`cal`: its booked windows as runs of equal counts, and its held releases)
    is replaced by an update conditional on `cal_version`, and the feedback (`paused_until`, `rate_factor`,
    `factor_at`) by an update of its own: no write undoes another's attributes. The key's slots are items of their
    own (`DynamoTenantSlots` with `kind="FLOWSLOT"`, owner `{tenant}#{key}`)."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    @staticmethod
    def _key(tenant: str, key: str) -> dict[str, Any]:
        return {"PK": s(f"TENANT#{tenant}"), "SK": s(f"FLOW#{key}")}

    def put_limits(self, tenant: str, limits: FlowControl, now: datetime) -> None:
        self.client.update_item(
            TableName=self.table,
            Key=self._key(tenant, limits.key),
            UpdateExpression="SET limits = :limits, updated_ms = :now",
            ExpressionAttributeValues={
                ":limits": s(limits.model_dump_json(exclude_none=True)),
                ":now": n(to_ms(now)),
            },
        )

    def get(self, tenant: str, key: str) -> FlowKeyState | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(tenant, key), ConsistentRead=True).get("Item")
        return self._state(tenant, item) if item else None

    def list(self, tenant: str) -> builtins.list[FlowKeyState]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :flow)",
            "ExpressionAttributeValues": {":pk": s(f"TENANT#{tenant}"), ":flow": s("FLOW#")},
            "ConsistentRead": True,
        }
        states = [self._state(tenant, item) for items in query_pages(self.client, request) for item in items]
        return [state for state in states if state is not None]

    @staticmethod
    def _state(tenant: str, item: dict[str, Any]) -> FlowKeyState | None:
        if "limits" not in item:
            return None  # a calendar or a push-back written for a key whose limits no write named yet
        calendar = None
        if "cal_version" in item:
            raw = json.loads(item["cal"]["S"])
            booked = {start + i: count for start, length, count in raw["runs"] for i in range(length)}
            held = {int(second): (count, earliest) for second, (count, earliest) in raw["held"].items()}
            calendar = BudgetCalendar(int(item["cal_version"]["N"]), int(item["window_ms"]["N"]), booked, held)
        return FlowKeyState(
            tenant=tenant,
            limits=FlowControl.model_validate_json(item["limits"]["S"]),
            updated_at=from_ms(int(item["updated_ms"]["N"])),
            calendar=calendar,
            paused_until=from_ms(int(item["paused_ms"]["N"])) if "paused_ms" in item else None,
            rate_factor=float(item["rate_factor"]["N"]) if "rate_factor" in item else 1.0,
            factor_at=from_ms(int(item["factor_ms"]["N"])) if "factor_ms" in item else None,
            next_start=from_ms(int(item["next_start_ms"]["N"])) if "next_start_ms" in item else None,
        )

    @staticmethod
    def _runs(booked: dict[int, int]) -> builtins.list[builtins.list[int]]:
        """Booked windows as runs `[first window, windows, count]`: a key's drain books consecutive windows, so its
        calendar stays a few runs long however many releases it holds."""
        runs: builtins.list[builtins.list[int]] = []
        for window in sorted(booked):
            count = booked[window]
            if runs and runs[-1][0] + runs[-1][1] == window and runs[-1][2] == count:
                runs[-1][1] += 1
            else:
                runs.append([window, 1, count])
        return runs

    def save_calendar(
        self, tenant: str, key: str, calendar: BudgetCalendar, expected: int | None, expires: datetime
    ) -> bool:
        raw = {
            "runs": self._runs(calendar.booked),
            "held": {str(second): [count, earliest] for second, (count, earliest) in calendar.held.items()},
        }
        values: dict[str, Any] = {
            ":v": n(calendar.version),
            ":w": n(calendar.window_ms),
            ":cal": s(json.dumps(raw, separators=(",", ":"))),
        }
        if expected is None:
            condition = "attribute_exists(limits) AND attribute_not_exists(cal_version)"
        else:
            condition = "cal_version = :expected"
            values[":expected"] = n(expected)
        return conditionally(
            self.client.update_item,
            TableName=self.table,
            Key=self._key(tenant, key),
            UpdateExpression="SET cal_version = :v, window_ms = :w, cal = :cal",
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
        )

    def take_start(self, tenant: str, key: str, seen: datetime | None, next_start: datetime) -> bool:
        values: dict[str, Any] = {":next": n(to_ms(next_start))}
        if seen is None:
            condition = "attribute_exists(limits) AND attribute_not_exists(next_start_ms)"
        else:
            condition = "next_start_ms = :seen"
            values[":seen"] = n(to_ms(seen))
        return conditionally(
            self.client.update_item,
            TableName=self.table,
            Key=self._key(tenant, key),
            UpdateExpression="SET next_start_ms = :next",
            ConditionExpression=condition,
            ExpressionAttributeValues=values,
        )

    def throttled(
        self, tenant: str, key: str, paused_until: datetime | None, rate_factor: float, now: datetime
    ) -> None:
        values: dict[str, Any] = {":f": n(rate_factor), ":at": n(to_ms(now))}
        # The pause moves only later: a shorter Retry-After arriving after a longer one does not shorten it.
        if paused_until is not None and conditionally(
            self.client.update_item,
            TableName=self.table,
            Key=self._key(tenant, key),
            UpdateExpression="SET rate_factor = :f, factor_ms = :at, paused_ms = :p",
            ConditionExpression="attribute_exists(limits) AND (attribute_not_exists(paused_ms) OR paused_ms < :p)",
            ExpressionAttributeValues={**values, ":p": n(to_ms(paused_until))},
        ):
            return
        conditionally(
            self.client.update_item,
            TableName=self.table,
            Key=self._key(tenant, key),
            UpdateExpression="SET rate_factor = :f, factor_ms = :at",
            ConditionExpression="attribute_exists(limits)",
            ExpressionAttributeValues=values,
        )
