"""The capacity section of results.md and docs/capacity.md: the capacity model's table, its plot, and the rules
and assumptions it ran on."""

from __future__ import annotations

from typing import Any

from scheduler.adapters.dynamodb.common import TIMER_PAGE_SIZE
from scheduler.schema import FUNCTION_MEMORY_MB
from scheduler_bench.capacity_inputs import LANDING_WAIT_PER_PAGE_SECONDS
from scheduler_bench.prices import LAMBDA_MB_PER_VCPU, cpu_stretch


def _f(value: float) -> str:
    return f"{value:,.2f}"


def _sweeper_basis(measured: dict[str, Any]) -> str:
    if measured.get("landing_waits_apart"):
        return (
            "the sweep's time per fire times the buckets it swept at once, less its sends' waits to land on "
            f"time, plus a full page's bound on them ({LANDING_WAIT_PER_PAGE_SECONDS:.0f} s per {TIMER_PAGE_SIZE} "
            "timers)"
        )
    return "the sweep's billed time per fire times the buckets it swept at once, an upper bound"


def _cpu_basis(measured: dict[str, Any]) -> str:
    cpu = measured.get("sweeper_cpu_seconds_per_fire") or 0.0
    if not cpu:
        return ""
    memory = measured.get("sweeper_memory_mb") or FUNCTION_MEMORY_MB["sweeper"]
    bound = cpu * cpu_stretch(memory)
    return (
        f" A sweep's chains share its CPU: {1000 * cpu:.1f} ms of CPU a fire measured here on a whole core (the herd's "
        f"full pages), so one sweep dispatches at most one fire per {1000 * bound:.1f} ms at the deployed "
        f"{memory:,} MB ({min(1.0, memory / LAMBDA_MB_PER_VCPU):.2f} of a vCPU) and one per {1000 * cpu:.1f} ms at "
        f"{LAMBDA_MB_PER_VCPU:,} MB (a vCPU; more is no faster: one Python process), however many chains it runs."
    )


def render(capacity: dict[str, Any]) -> list[str]:
    """The capacity section of results.md (and docs/capacity.md): the table, the plot, the rules and assumptions."""
    lines = ["## Capacity model: a herd on AWS (simulated)", ""]
    if "error" in capacity:
        return [*lines, f"Not computed: {capacity['error'].splitlines()[-1]}", ""]
    measured = capacity["measured"]
    lines += [
        f"Simulated on AWS's documented scaling rules, driven by the measured worker time per occurrence "
        f"({1000 * measured['worker_seconds_per_occurrence']:.1f} ms) and sweeper time per fire "
        f"({1000 * measured['sweeper_seconds_per_fire']:.1f} ms, one bucket chain's: {_sweeper_basis(measured)}) from "
        f"{measured['source']}.{_cpu_basis(measured)} Lateness = the target call's start - the fire time. *Today*: "
        "standard-mode "
        "mapping, one sweep a minute sweeping its 8 shards at once. *Pre-scaled*: the mapping's MinimumPollers raised "
        "ahead of the peak (the pre-scaler's own sizing); the tick's fan-out (`fan_out_max_sweeps`): the fewest sweeps "
        "that dispatch the herd in time, each sweeping as many buckets at once as its CPU keeps busy "
        "(`sweep_concurrency`), over a shard each (`shard_count`); the sweeper and the worker with a whole vCPU "
        "(`sweeper_memory_mb`, `worker_memory_mb` 1,769); and, where the herd needs more concurrency than the "
        "account's default quota of 1,000 leaves the workers, the quota it needs (a Service Quotas increase).",
        "",
    ]
    headers = [
        "Herd",
        "Due within",
        "Workers",
        "p50 (s)",
        "p99 (s)",
        "max (s)",
        "Sent late",
        "Last send vs. first fire (s)",
        "Peak concurrency",
        "Shards needed",
        "Outbox shards needed",
        "p99 <= 5 s",
    ]
    rows = []
    for row in capacity["rows"]:
        scenario = row["scenario"]
        rows.append(
            [
                f"{scenario['occurrences']:,}",
                f"{scenario['spread_seconds']:g} s",
                row["label"],
                _f(row["p50"]),
                _f(row["p99"]),
                _f(row["max"]),
                f"{row['dispatched_late']:,}",
                f"{row['last_dispatch_vs_first_fire']:,.0f}",
                f"{row['peak_concurrency']:,}",
                f"{row['shards_needed']:,} ({row['shards_needed_why']})",
                str(row["outbox_shards_needed"]),
                "yes" if row["meets_target"] else "no",
            ]
        )
    lines += ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    for row in capacity["rows"]:
        dollars = row.get("dollars_per_million")
        if dollars:
            scenario = row["scenario"]
            rate = scenario["occurrences"] / scenario["spread_seconds"]
            parts = ", ".join(
                f"{name.replace('_', ' ')} ${value:.2f}" for name, value in dollars.items() if name != "total"
            )
            lines += [
                "",
                f"At {rate:,.0f} fires a second for {scenario['spread_seconds'] / 60:g} minutes ({row['label']}): "
                f"**${dollars['total']:.2f} per million fires** ({parts}).",
            ]
    lines += ["", "![Start lateness of 50,000 occurrences due in one second](capacity.png)", "", "Rules (sources):", ""]
    lines += [f"- {rule['what']}: {rule['source']}" for rule in capacity["rules"].values()]
    lines += ["", "Assumptions:", ""]
    lines += [f"- {text}" for text in capacity["assumptions_described"]]
    lines.append("")
    return lines
