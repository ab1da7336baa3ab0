"""What an empty bucket costs a minute: a quiet deployment's sweeps at several shard counts, side by side.

Every minute each shard's bucket is claimed (sealed), queried and completed, timers or not; a herd needs many
shards (docs/capacity.md, the fan-out and the shards), and a deployment pays for them every minute of the day. Each
round stores nothing, lets a first sweep bring the watermark to the look-ahead, then runs `minutes` sweeps a minute
apart (virtual time) through the handlers' own wiring on DynamoDB Local and SQS, metered: the DynamoDB requests and
units of the steady minutes, the sweep's wall and CPU time. The shard counts alternate within a round and swap their
order from one round to the next. What a user pays is priced from them (`prices`): the units, and the sweeper's
Lambda time at its deployed memory.
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.schema import FUNCTION_MEMORY_MB
from scheduler_bench.environment import create_resources, delete_resources
from scheduler_bench.metering import Meter
from scheduler_bench.prices import LAMBDA_MB_PER_VCPU, PRICES, cpu_stretch
from scheduler_bench.services import VirtualClock, build, client, flowing, settings_for

SIGNING_SECRET = "bench-signing-secret"
#: Minutes in a month (30 days), what an idle shard is priced over.
MONTH_MINUTES = 30 * 24 * 60


@dataclass(frozen=True)
class EmptyBucketsConfig:
    shard_counts: tuple[int, ...] = (8, 64, 256)
    #: Steady minutes measured per shard count and round.
    minutes: int = 3
    rounds: int = 2


def measure(shards: int, minutes: int) -> dict[str, Any]:
    """One shard count: `minutes` steady sweeps of an empty deployment; per minute and per shard."""
    meter = Meter()
    dynamodb, sqs, events = client("dynamodb", meter), client("sqs"), client("events")
    resources = create_resources(f"eb{uuid.uuid4().hex[:10]}", client("dynamodb"), sqs, events)
    try:
        clock = VirtualClock(datetime.now(UTC).replace(second=5, microsecond=0))
        settings = settings_for(resources, SIGNING_SECRET, max_active_jobs=1000).model_copy(
            update={"shard_count": shards}
        )
        services = build(settings, dynamodb, sqs, events, clock, SIGNING_SECRET)
        with flowing(clock):
            services.sweeper.sweep(clock.now() + timedelta(seconds=60))  # the first: up to the look-ahead
        meter.reset()
        wall = cpu = 0.0
        for _ in range(minutes):
            clock.set(clock.now() + timedelta(seconds=60))
            began, times = time.perf_counter(), os.times()
            with flowing(clock):
                report = services.sweeper.sweep(clock.now() + timedelta(seconds=60))
            after = os.times()
            wall += time.perf_counter() - began
            cpu += (after.user - times.user) + (after.system - times.system)
            if report.dispatched:
                raise RuntimeError(f"an empty deployment dispatched {report.dispatched}")
        totals = meter.totals()
        calls = {op: row["calls"] / minutes for op, row in totals.by_operation.items() if op.startswith("dynamodb:")}
        read_units = sum(
            r.get("read_units", 0.0) for op, r in totals.by_operation.items() if op.startswith("dynamodb:")
        )
        write_units = sum(
            r.get("write_units", 0.0) for op, r in totals.by_operation.items() if op.startswith("dynamodb:")
        )
        return {
            "shards": shards,
            "minutes": minutes,
            "per_minute": {
                "dynamodb_calls": calls,
                "read_units": read_units / minutes,
                "write_units": write_units / minutes,
                "wall_seconds": wall / minutes,
                "cpu_seconds": cpu / minutes,
            },
        }
    finally:
        delete_resources(resources, client("dynamodb"), sqs, events)


def _priced(per_minute: dict[str, Any], shards: int) -> dict[str, float]:
    """Per shard: units, Lambda time and dollars a month (the sweep's time at the sweeper's deployed memory: its wall
    time plus its CPU stretched to that memory's share of a vCPU)."""
    memory = FUNCTION_MEMORY_MB["sweeper"]
    seconds = per_minute["wall_seconds"] + per_minute["cpu_seconds"] * (cpu_stretch(memory) - 1)
    units = (
        per_minute["read_units"] * PRICES["dynamodb_read_request_unit"]
        + per_minute["write_units"] * PRICES["dynamodb_write_request_unit"]
    )
    lam = seconds * memory / 1024 * PRICES["lambda_gb_second_arm64"]
    return {
        "read_units_per_minute": per_minute["read_units"] / shards,
        "write_units_per_minute": per_minute["write_units"] / shards,
        "lambda_ms_per_minute": 1000 * seconds / shards,
        "usd_per_month": (units + lam) * MONTH_MINUTES / shards,
        "usd_per_month_dynamodb": units * MONTH_MINUTES / shards,
    }


def run(config: EmptyBucketsConfig, log: Callable[[str], None]) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    for round_no in range(config.rounds):
        order = list(config.shard_counts) if round_no % 2 == 0 else list(reversed(config.shard_counts))
        for shards in order:
            result = {"round": round_no + 1, **measure(shards, config.minutes)}
            result["per_shard"] = _priced(result["per_minute"], shards)
            log(
                f"empty buckets: round {round_no + 1}, {shards} shards: "
                f"{result['per_minute']['write_units']:.1f} write and {result['per_minute']['read_units']:.1f} read "
                f"units, {result['per_minute']['wall_seconds']:.2f} s a minute"
            )
            runs.append(result)
    by_shards = {
        shards: {
            key: statistics.median(r["per_shard"][key] for r in runs if r["shards"] == shards)
            for key in runs[0]["per_shard"]
        }
        for shards in config.shard_counts
    }
    return {
        "config": asdict(config),
        "sweeper_memory_mb": FUNCTION_MEMORY_MB["sweeper"],
        "lambda_mb_per_vcpu": LAMBDA_MB_PER_VCPU,
        "runs": runs,
        "per_shard": {str(shards): values for shards, values in by_shards.items()},
    }


def empty_buckets_section(result: dict[str, Any]) -> list[str]:
    """results.md's section."""
    if "error" in result:
        return ["## What an empty bucket costs", "", "Failed: see results.json.", ""]
    lines = [
        "## What an empty bucket costs",
        "",
        f"A deployment with nothing due, swept a minute at a time ({result['config']['minutes']} steady minutes a "
        f"shard count, {result['config']['rounds']} rounds alternating), metered on DynamoDB Local. Per shard: what "
        f"its bucket costs every minute, priced for a month (the sweeper at {result['sweeper_memory_mb']:,} MB).",
        "",
        "| Shards | Write units / min | Read units / min | Lambda ms / min | $ / month (DynamoDB) | $ / month (all) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for shards, values in result["per_shard"].items():
        lines.append(
            f"| {int(shards):,} | {values['write_units_per_minute']:.2f} | {values['read_units_per_minute']:.2f} | "
            f"{values['lambda_ms_per_minute']:.1f} | ${values['usd_per_month_dynamodb']:.3f} | "
            f"${values['usd_per_month']:.3f} |"
        )
    lines.append("")
    return lines
