"""`bench/results.md`, rendered from results.json's content: the run's machine and load, then each scenario's
sections (cost: `report_cost`; latency: `report_latency`; the capacity model: `capacity_report`) and how they were
measured. docs/benchmarks.md shows these tables and their history."""

from __future__ import annotations

from typing import Any

from scheduler_bench import capacity_report
from scheduler_bench.empty_buckets import empty_buckets_section
from scheduler_bench.report_cost import cost_sections
from scheduler_bench.report_flow import flow_sections
from scheduler_bench.report_latency import emulator_latency, latency_sections
from scheduler_bench.report_sweepers import sweepers_section
from scheduler_bench.sweep_cpu import sweep_cpu_section

#: Where each scenario's results live in results.json.
RESULT_KEYS = {
    "cost": "cost",
    "sweep": "sweep_scaling",
    "burst": "burst",
    "emulator": "emulator_latency",
    "sweepers": "sweepers",
    "flow": "flow_control",
    "sweep-cpu": "sweep_cpu",
    "empty-buckets": "empty_buckets",
    "capacity": "capacity",
}
#: The scenarios whose times this machine's load affects (the capacity model is computed, not timed).
MEASURED_UNDER_LOAD = ("cost", "sweep", "burst", "emulator", "sweepers", "flow", "sweep-cpu", "empty-buckets")


def _carried(results: dict[str, Any], carried: dict[str, Any]) -> str:
    """Each kept scenario with the run it was measured in (a scenario kept twice keeps its first run's time, not
    the time of the results file it was last copied from)."""
    parts = []
    for scenario in carried["scenarios"]:
        measured = (results.get(RESULT_KEYS[scenario]) or {}).get("carried_over_from") or carried["from_run"]
        parts.append(f"{scenario} (measured {measured})")
    return ", ".join(parts)


def render(results: dict[str, Any]) -> str:
    """The whole of results.md."""
    machine, versions, commit = results["machine"], results["versions"], results["git"]
    lines = [
        "# punctual benchmarks",
        "",
        f"Run {results['finished_at']} ({results['mode']} sizes, {results['duration_seconds']:.0f} s) on "
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB; Python {versions['python']}, "
        f"boto3 {versions['boto3']}, ministack {versions.get('ministack')}, moto {versions['moto']}, "
        f"DynamoDB Local `{versions['dynamodb_local']}`; commit "
        f"`{(commit.get('commit') or 'unknown')[:12]}`{' (work tree modified)' if commit.get('dirty') else ''}. "
        f"Endpoints: DynamoDB {results.get('endpoints', {}).get('dynamodb', '-')}, "
        f"SQS {results.get('endpoints', {}).get('sqs', '-')}.",
        "",
    ]
    loads = []
    for name in MEASURED_UNDER_LOAD:
        before, after = (results.get(RESULT_KEYS[name]) or {}).get("load_average_before_after") or (None, None)
        if before and after:
            loads.append(f"{name} {before[0]:.1f} -> {after[0]:.1f}")
    if loads:
        lines += [
            f"Machine load (1-minute load average before -> after each scenario, {machine['cores']} cores): "
            + ", ".join(loads)
            + ". Times in seconds are this machine's, under that load; counts and units are not affected.",
            "",
        ]
    carried = results.get("carried_over")
    if carried:
        lines += [f"Scenarios not re-run this time, kept from earlier runs: {_carried(results, carried)}.", ""]

    lines += cost_sections(results)
    lines += latency_sections(results)
    if "sweepers" in results:
        lines += sweepers_section(results["sweepers"])
    if "flow_control" in results:
        lines += flow_sections(results["flow_control"])
    if "sweep_cpu" in results:
        lines += sweep_cpu_section(results["sweep_cpu"])
    if "empty_buckets" in results:
        lines += empty_buckets_section(results["empty_buckets"])
    if "capacity" in results:
        lines += capacity_report.render(results["capacity"])
    if "emulator_latency" in results:
        lines += emulator_latency(results["emulator_latency"])
    lines += ["## How these were measured, and what to keep in mind", ""]
    lines += [f"- {note}" for note in results.get("notes", [])]
    lines.append("")
    return "\n".join(lines)
