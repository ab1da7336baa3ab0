"""The accounting rules of the benchmark's meter, without an emulator."""

from __future__ import annotations

from typing import Any

from scheduler_bench.burst import percentile
from scheduler_bench.metering import Meter, item_size, write_units


class Model:
    def __init__(self, name: str) -> None:
        self.name = name


def test_item_size_follows_the_dynamodb_rules() -> None:
    # names + values: "PK" (2) + "abc" (3); "n" (1) + 123 (2 significant-digit pairs + 1 = 3); "b" (1) + true (1)
    assert item_size({"PK": {"S": "abc"}, "n": {"N": "123"}, "b": {"BOOL": True}}) == 5 + 4 + 2
    assert write_units(1024) == 1 and write_units(1025) == 2 and write_units(0) == 1


def after(meter: Meter, operation: str, parsed: dict[str, Any], params: dict[str, Any]) -> None:
    context = {"bench_params": params, "bench_phase": "p"}
    meter._dynamodb_after(parsed=parsed, model=Model(operation), context=context)


def test_transactions_cost_two_units_per_kb_of_each_item_whatever_the_endpoint_reports() -> None:
    # Given a transaction of a 1.5 KB item and a tiny one, reported as DynamoDB Local does (not per item)
    meter = Meter()
    big = {"PK": {"S": "a"}, "x": {"S": "y" * 1500}}
    small = {"PK": {"S": "b"}}
    actions = [{"Put": {"TableName": "t", "Item": big}}, {"Put": {"TableName": "t", "Item": small}}]
    consumed = [{"TableName": "t", "CapacityUnits": 5.0, "GlobalSecondaryIndexes": {"i": {"CapacityUnits": 1.0}}}]

    # When the meter counts it
    after(meter, "TransactWriteItems", {"ConsumedCapacity": consumed}, {"TransactItems": actions})

    # Then the table's units follow AWS's rule (2 x 2 KB + 2 x 1 KB) and the index's are as reported
    totals = meter.totals()
    assert totals.transactional_write_units == 6.0 and totals.index_write_units == 1.0
    assert totals.write_units == 7.0


def test_unreported_units_are_estimated() -> None:
    meter = Meter()
    # an empty strongly consistent Query reported as 0 costs AWS's minimum of 1 read unit
    after(meter, "Query", {"ConsumedCapacity": {"CapacityUnits": 0.0}, "ScannedCount": 0}, {"ConsistentRead": True})
    # a failed conditional write costs at least 1 write unit, more for a large old item
    big = {"PK": {"S": "x" * 1500}}
    failed = {"Error": {"Code": "ConditionalCheckFailedException"}, "Item": big}
    after(meter, "UpdateItem", failed, {})
    totals = meter.totals()
    assert totals.read_units == 1.0
    assert totals.write_units == 2.0 and totals.failed_conditions == 1
    assert totals.estimated_units == 3.0


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([3.0], 95) == 3.0
