"""The accounting rules of the benchmark's meter, without an emulator."""

from __future__ import annotations

import io
import json
import logging
import math
from typing import Any

import pytest
from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.utils import copy_config_to_registered_loggers

from scheduler.handlers import wiring
from scheduler_bench.burst import percentile
from scheduler_bench.cloudwatch import LAMBDA_CONTEXT_KEYS, LogLines
from scheduler_bench.dynamodb_billing import item_size, write_units
from scheduler_bench.metering import Meter
from scheduler_bench.prices import LAMBDA_PLATFORM_LINES


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


def test_an_invocation_is_billed_at_its_deployed_memorys_share_of_a_vcpu() -> None:
    # Given the deployed memory (512 MB: 512 / 1,769 of a vCPU) and an invocation that took 20 ms here, 8 of them
    # on the CPU
    from scheduler.schema import FUNCTION_MEMORY_MB
    from scheduler_bench import prices
    from scheduler_bench.spend import Invocation

    stretch = prices.LAMBDA_MB_PER_VCPU / FUNCTION_MEMORY_MB["worker"]
    invocation = Invocation("worker", seconds=0.020, records=1, cpu_seconds=0.008)

    # Then its CPU time takes `stretch` times as long there, added to the wall time, rounded up to the millisecond
    assert invocation.billed == pytest.approx(math.ceil((0.020 + 0.008 * (stretch - 1)) * 1000) / 1000)
    assert invocation.billed > 0.020 + 0.008 * 2
    # And an invocation that used no CPU is billed its wall time
    assert Invocation("worker", 0.0101, 1, 0.0).billed == pytest.approx(0.011)


def test_the_meter_takes_the_targets_cpu_out_of_an_invocations() -> None:
    # Given a meter that knows the in-process target's CPU, and an invocation during which the target burned CPU
    import time

    meter = Meter()
    target = {"cpu": 0.0}
    meter.cpu_elsewhere = lambda: target["cpu"]
    with meter.invocation("worker"):
        began = time.process_time()
        while time.process_time() - began < 0.05:
            pass
        target["cpu"] += 0.04  # 40 ms of that was the target's

    # Then the invocation's CPU time is its own share only
    (invocation,) = meter.invocations["worker"]
    assert 0.005 <= invocation.cpu_seconds <= 0.03
    assert meter.totals().cpu_seconds["worker"] == pytest.approx(invocation.cpu_seconds)


def test_a_drain_profile_gives_cpu_per_fire_and_the_machines_ceiling() -> None:
    from scheduler_bench.cpu_profile import per_fire_cpu

    # Given 100 fires drained in 2 s on 2 cores, the workers using 1.2 CPU seconds and the database 0.8
    profile = {"wall_seconds": 2.0, "cores": 2, "cpu_seconds": {"worker pollers": 1.2, "DynamoDB Local (JVM)": 0.8}}

    # Then each fire cost 20 ms of CPU, and 2 cores could fire 100 a second at most
    out = per_fire_cpu(profile, 100)
    assert out["cpu_ms_per_fire"] == {"worker pollers": 12.0, "DynamoDB Local (JVM)": 8.0}
    assert out["cpu_ms_per_fire_total"] == 20.0
    assert out["fires_per_second"] == 50.0 and out["ceiling_fires_per_second"] == 100.0


class LambdaContextLike:
    """A Lambda context with the lengths of the meter's LAMBDA_CONTEXT_KEYS."""

    function_name = LAMBDA_CONTEXT_KEYS["function_name"]
    memory_limit_in_mb = LAMBDA_CONTEXT_KEYS["function_memory_size"]
    invoked_function_arn = LAMBDA_CONTEXT_KEYS["function_arn"]
    aws_request_id = LAMBDA_CONTEXT_KEYS["function_request_id"]


def test_a_counted_log_line_is_the_size_of_the_line_a_deployed_function_writes() -> None:
    # Given a core logger wired as the handlers wire theirs (a Powertools logger's formatter copied to it, the
    # Lambda context's keys injected by wiring.lambda_context), and the meter's counter on the same logger
    stream = io.StringIO()
    parent, core = logging.getLogger("scheduler"), logging.getLogger("scheduler.metering_test")
    handlers, level, propagate = list(parent.handlers), parent.level, parent.propagate
    powertools = Logger(service="punctual", logger_handler=logging.StreamHandler(stream))
    copy_config_to_registered_loggers(source_logger=powertools, include={"scheduler"})
    meter = Meter()
    counted = LogLines(meter)
    parent.addHandler(counted)
    extra = {"job_id": "0" * 32, "occurrence_key": "0" * 32 + ":2026-12-02T18:41:03Z", "state": "SUCCEEDED"}

    @wiring.lambda_context(powertools)
    def handler(event: Any, context: Any) -> None:
        core.info("occurrence recorded", extra={**extra, "attempt": 1, "lateness_s": 0.031})

    try:
        # When a warm invocation logs an outcome
        handler({}, LambdaContextLike())
        stream.seek(0)
        stream.truncate(0)
        meter.reset()
        handler({}, LambdaContextLike())
    finally:
        parent.handlers = handlers
        parent.setLevel(level)
        parent.propagate = propagate

    # Then the meter counted the bytes of the line the function wrote, which leaves out what the log group says
    [line] = stream.getvalue().splitlines()
    totals = meter.totals()
    assert (totals.log_events, totals.log_bytes) == (1, len(line.encode()))
    written = json.loads(line)
    assert written["occurrence_key"] == extra["occurrence_key"] and written["function_request_id"]
    assert not set(written) & {"function_arn", "function_name", "function_memory_size", "location"}


def test_each_invocation_adds_the_runtimes_lines_and_its_metrics_document() -> None:
    meter = Meter()
    with meter.invocation("worker"):
        meter.metrics.count("StartLatenessSeconds", 0.03, unit="Seconds")
        meter.metrics.count("BatchHolds")
    with meter.invocation("worker"):
        pass
    totals = meter.totals()
    # 3 runtime lines an invocation, and one EMF document for the invocation that counted metrics
    assert totals.log_events == 2 * 3 + 1
    emf = totals.by_operation["logs:metrics"]["bytes"]
    assert 200 < emf < 600
    assert totals.log_bytes == 2 * sum(len(line.encode()) for line in LAMBDA_PLATFORM_LINES) + emf


def test_a_transactions_index_units_are_the_change_to_what_each_index_stores() -> None:
    # Given a table with a keys-only index on `g` and an all-projection one on `h`, and a transaction that puts
    # two new items into the keys-only index, moves one item's `g`, changes a stored attribute of the `h` index,
    # writes an item neither index holds and checks one
    from scheduler_bench.dynamodb_billing import IndexShape, TableShape

    meter = Meter()
    meter._shapes["t"] = TableShape(
        ("PK",), (IndexShape("by_g", ("g",), "KEYS_ONLY"), IndexShape("by_h", ("h",), "ALL"))
    )
    new_a, new_b = {"PK": {"S": "a"}, "g": {"S": "1"}}, {"PK": {"S": "b"}, "g": {"S": "1"}}
    moved_old, moved_new = {"PK": {"S": "c"}, "g": {"S": "1"}}, {"PK": {"S": "c"}, "g": {"S": "2"}}
    h_old, h_new = (
        {"PK": {"S": "d"}, "h": {"S": "x"}, "v": {"N": "1"}},
        {"PK": {"S": "d"}, "h": {"S": "x"}, "v": {"N": "2"}},
    )
    plain_old, plain_new = {"PK": {"S": "e"}, "v": {"N": "1"}}, {"PK": {"S": "e"}, "v": {"N": "2"}}
    actions = [{"Put": {"TableName": "t", "Item": item}} for item in (new_a, new_b, moved_new, h_new, plain_new)] + [
        {"ConditionCheck": {"TableName": "t", "Key": {"PK": {"S": "f"}}}}
    ]
    before = [None, None, moved_old, h_old, plain_old, {"PK": {"S": "f"}, "g": {"S": "1"}}]
    # reported as DynamoDB Local does: 2 units an index, whatever the transaction holds
    consumed = [{"TableName": "t", "CapacityUnits": 6.0, "GlobalSecondaryIndexes": {"by_g": {"CapacityUnits": 2.0}}}]

    # When the meter counts it
    context = {"bench_params": {"TransactItems": actions}, "bench_phase": "p", "bench_before": before}
    meter._dynamodb_after(parsed={"ConsumedCapacity": consumed}, model=Model("TransactWriteItems"), context=context)

    # Then each index is charged as the same writes outside a transaction: 1 + 1 (two entries appear), 2 (a key
    # moves: out and in), 1 (an entry changes in place), 0 (no entry; the check writes nothing)
    totals = meter.totals()
    assert totals.index_write_units == 5.0
    # And the table 2 units an item of the six, the check included
    assert totals.transactional_write_units == 12.0 and totals.write_units == 17.0


def test_an_unchanged_or_absent_index_entry_costs_nothing() -> None:
    from scheduler_bench.dynamodb_billing import IndexShape, TableShape

    shape = TableShape(("PK", "SK"), (IndexShape("by_g", ("g", "s"), "INCLUDE", ("w",)),))
    item = {"PK": {"S": "a"}, "SK": {"S": "b"}, "g": {"S": "1"}, "s": {"N": "1"}, "w": {"S": "x"}, "z": {"S": "q"}}
    # an attribute the index does not store changes: nothing; one it includes: an update in place
    assert shape.index_units(item, {**item, "z": {"S": "r"}}) == 0
    assert shape.index_units(item, {**item, "w": {"S": "y"}}) == 1
    # an item without one of the index's keys is not in it (sparse); it leaves when it loses one
    assert shape.index_units({"PK": {"S": "a"}, "SK": {"S": "b"}, "g": {"S": "1"}}, None) == 0
    assert shape.index_units(item, {k: v for k, v in item.items() if k != "s"}) == 1
    # a deleted entry of 1.5 KB: 2 units
    assert shape.index_units({**item, "w": {"S": "x" * 1500}}, None) == 2
