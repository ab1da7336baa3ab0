"""DynamoDB's billing rules, applied by the meter (`scheduler_bench.metering`) where the endpoint reports no units
or reports them otherwise than AWS bills: item sizes, write units in 1 KB steps, what a write costs each global
secondary index, the items a read went through; and a probe of what this endpoint reports."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any


def attribute_size(value: dict[str, Any]) -> int:
    """Bytes of one DynamoDB attribute value, per the documented item-size rules."""
    kind, inner = next(iter(value.items()))
    if kind == "S":
        return len(str(inner).encode())
    if kind == "N":
        digits = str(inner).lstrip("-").replace(".", "").lstrip("0") or "0"
        return (len(digits) + 1) // 2 + 1
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else len(str(inner))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "BS"):
        return sum(len(str(v).encode()) for v in inner)
    if kind == "NS":
        return sum(attribute_size({"N": v}) for v in inner)
    if kind == "L":
        return 3 + sum(attribute_size(v) + 1 for v in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + attribute_size(v) + 1 for k, v in inner.items())
    return 1


def item_size(item: dict[str, Any]) -> int:
    """Bytes of a DynamoDB item: attribute names plus values."""
    return sum(len(name.encode()) + attribute_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    """Write units of an item of `size` bytes: 1 KB steps, at least 1."""
    return max(1, math.ceil(size / 1024))


@dataclass(frozen=True)
class IndexShape:
    """A global secondary index: its key attributes and what it stores of an item."""

    name: str
    keys: tuple[str, ...]
    #: "ALL", "KEYS_ONLY" or "INCLUDE" (with `included`).
    projection: str
    included: tuple[str, ...] = ()

    def entry(self, item: dict[str, Any] | None, table_keys: tuple[str, ...]) -> dict[str, Any] | None:
        """What this index stores of `item`: None when the item lacks one of its key attributes (sparse)."""
        if not item or any(name not in item for name in self.keys):
            return None
        if self.projection == "ALL":
            return item
        kept = {*table_keys, *self.keys, *(self.included if self.projection == "INCLUDE" else ())}
        return {name: value for name, value in item.items() if name in kept}


@dataclass(frozen=True)
class TableShape:
    """A table's key attributes and its global secondary indexes, as DescribeTable tells them."""

    keys: tuple[str, ...]
    indexes: tuple[IndexShape, ...] = ()

    @classmethod
    def described(cls, table: dict[str, Any]) -> TableShape:
        def keys(schema: list[dict[str, str]]) -> tuple[str, ...]:
            return tuple(key["AttributeName"] for key in schema)

        indexes = tuple(
            IndexShape(
                index["IndexName"],
                keys(index["KeySchema"]),
                index["Projection"]["ProjectionType"],
                tuple(index["Projection"].get("NonKeyAttributes", ())),
            )
            for index in table.get("GlobalSecondaryIndexes", [])
        )
        return cls(keys(table["KeySchema"]), indexes)

    def index_units(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> int:
        """Write units the indexes take for a write that turns the item `old` into `new` (None: no item), as a
        write outside a transaction: nothing for an unchanged entry, its size (1 KB steps) for an entry that
        appears, goes or changes in place, both sizes for one whose index key moves."""
        units = 0
        for index in self.indexes:
            was, now = index.entry(old, self.keys), index.entry(new, self.keys)
            if was == now:
                continue
            if was is None or now is None:
                units += write_units(item_size(was or now or {}))
            elif any(was[name] != now[name] for name in index.keys):
                units += write_units(item_size(was)) + write_units(item_size(now))
            else:
                units += write_units(max(item_size(was), item_size(now)))
        return units


def items_read(operation: str, parsed: dict[str, Any]) -> int:
    """Items a read call went through (what a Query or Scan billed by, not only what it returned)."""
    if operation in ("Query", "Scan"):
        return int(parsed.get("ScannedCount", 0))
    if operation == "GetItem":
        return 1 if parsed.get("Item") else 0
    if operation == "BatchGetItem":
        return sum(len(items) for items in (parsed.get("Responses") or {}).values())
    return 0


def probe_transactions(client: Any, table: str) -> dict[str, Any]:
    """What this endpoint reports for a transaction of three small new items (AWS bills 6 units: 2 per item), and
    for an empty strongly consistent Query (AWS bills at least 1): recorded with the results."""
    keys = [{"PK": {"S": "BENCH#PROBE"}, "SK": {"S": f"{time.time_ns()}-{i}"}} for i in range(3)]
    response = client.transact_write_items(
        TransactItems=[{"Put": {"TableName": table, "Item": key}} for key in keys], ReturnConsumedCapacity="INDEXES"
    )
    consumed = response.get("ConsumedCapacity") or []
    units = sum(float((c.get("Table") or c).get("CapacityUnits", 0.0)) for c in consumed)
    for key in keys:
        client.delete_item(TableName=table, Key=key)
    empty = client.query(
        TableName=table,
        KeyConditionExpression="PK = :p",
        ExpressionAttributeValues={":p": {"S": "BENCH#NOTHING"}},
        ConsistentRead=True,
        ReturnConsumedCapacity="TOTAL",
    )
    empty_units = float((empty.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))
    return {
        "transaction_of_three_small_items": {"reported_table_units": units, "aws_bills": 6.0},
        "empty_consistent_query": {"reported_units": empty_units, "aws_bills_at_least": 1.0},
        "transaction_units": "computed by the meter from the items' images: 2 per KB an item, and each index's change",
        "empty_query_minimum_applied": empty_units < 1.0,
    }
