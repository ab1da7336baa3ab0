"""The section of results.md on dispatch with one and with several sweeper processes (`scheduler_bench.sweepers`)."""

from __future__ import annotations

from typing import Any

from scheduler_bench.figures import figure, table


def _cpu(profile: dict[str, Any]) -> str:
    """Where the window's CPU went, largest first (seconds)."""
    used = profile.get("cpu_seconds") or {}
    return ", ".join(f"{kind} {figure(seconds, 1)}" for kind, seconds in list(used.items())[:4]) or "-"


def sweepers_section(result: dict[str, Any]) -> list[str]:
    lines = ["## Dispatch with one and with two sweeper processes", ""]
    if "error" in result:
        return [*lines, f"Not measured: {result['error'].splitlines()[-1]}", ""]
    config = result["config"]
    rows = []
    for n, run in enumerate(result.get("runs", []), 1):
        shares = " / ".join(f"{p['dispatched']:,}" for p in run["per_process"].values())
        busy = (run.get("cpu_profile") or {}).get("busy_fraction_of_machine")
        rows.append(
            [
                str(n),
                str(run["processes"]),
                figure(run["seconds_to_dispatch_all"], 2) if run["seconds_to_dispatch_all"] else "-",
                figure(run["occurrences_per_second"]) if run["occurrences_per_second"] else "-",
                f"{run['dispatched']:,} of {run['jobs']:,}",
                shares,
                f"{figure(100 * busy, 0)} %" if busy is not None else "-",
                _cpu(run.get("cpu_profile") or {}),
            ]
        )
    lines += table(
        [
            "Run",
            "Processes",
            "First to last message (s)",
            "Occurrences / s",
            "Sent",
            "Sent by each process",
            "Machine busy",
            "CPU seconds in the window (largest)",
        ],
        rows,
    )
    medians = result.get("median_seconds", {})
    summary = ", ".join(f"{k} process(es) {figure(v, 2)} s" for k, v in medians.items() if v)
    speedup = result.get("speedup")
    lines += [
        "",
        f"{config['jobs']:,} one-shot jobs due within one minute over {config['shards']} shards, {config['tenants']} "
        f"tenants; each process sweeps every {figure(config['interval_seconds'], 1)} s in its slot and "
        f"{config['sweep_concurrency']} buckets at once; runs alternate between the process counts, each on fresh "
        f"tables, no workers. Median: {summary or '-'}; "
        f"ratio one / two: **{figure(speedup, 2) if speedup else '-'}**.",
        "",
    ]
    return lines
