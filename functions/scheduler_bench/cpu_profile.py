"""Where the machine's CPU went during a herd: CPU seconds per kind of process (from /proc), over a window.

A coarse profile, but the one that says what limits the local figures on a small shared machine: DynamoDB
Local's JVM, the SQS emulator, the worker pollers, the sweeper, the API, this benchmark (the receiver), or the
machine's other users."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
KINDS = (
    ("DynamoDBLocal.jar", "DynamoDB Local (JVM)"),
    ("ministack", "ministack (SQS)"),
    ("moto.server", "moto (SQS)"),
    ("scheduler_local.worker_poller", "worker pollers"),
    ("scheduler_local.sweeper_loop", "sweeper"),
    ("scheduler_local.api_server", "api"),
    ("peer_apscheduler.py", "APScheduler"),
    ("scheduler_bench", "benchmark + receiver"),
)


def _kind(cmdline: str) -> str:
    for needle, name in KINDS:
        if needle in cmdline:
            return name
    return "other processes (the machine's other users)"


def _sample() -> dict[int, tuple[str, float]]:
    out: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc").exists() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry.name)] = (_kind(cmdline), (int(fields[11]) + int(fields[12])) / TICKS)
    return out


@dataclass
class CpuWindow:
    """`start()`, then `stop()`: CPU seconds per kind between the two (processes born inside count whole)."""

    before: dict[int, tuple[str, float]] = field(default_factory=dict)
    seconds: float = 0.0
    _t0: float = 0.0

    def start(self) -> CpuWindow:
        self.before = _sample()
        self._t0 = os.times().elapsed
        return self

    def stop(self) -> dict[str, Any]:
        after = _sample()
        wall = os.times().elapsed - self._t0
        used: dict[str, float] = {}
        for pid, (kind, cpu) in after.items():
            earlier = self.before.get(pid)
            delta = cpu - (earlier[1] if earlier and earlier[0] == kind else 0.0)
            if delta > 0:
                used[kind] = used.get(kind, 0.0) + delta
        total = sum(used.values())
        return {
            "wall_seconds": wall,
            "cores": os.cpu_count(),
            "cpu_seconds": {k: round(v, 2) for k, v in sorted(used.items(), key=lambda kv: -kv[1])},
            "cpu_share": {k: round(v / total, 3) for k, v in sorted(used.items(), key=lambda kv: -kv[1])}
            if total
            else {},
            "busy_fraction_of_machine": round(total / (wall * (os.cpu_count() or 1)), 3) if wall else None,
        }


def per_fire_cpu(profile: dict[str, Any], fires: int) -> dict[str, Any]:
    """A drain window's profile per fire: CPU milliseconds per fire by kind of process, their sum, and the rate
    this machine's cores could fire at if the fires had them all (cores / CPU per fire): the ceiling that the
    local herd's drain runs into once the machine is busy."""
    per_fire = {kind: 1000 * seconds / max(1, fires) for kind, seconds in profile["cpu_seconds"].items()}
    total = sum(per_fire.values())
    cores = profile["cores"] or 1
    return {
        **profile,
        "fires": fires,
        "cpu_ms_per_fire": {k: round(v, 2) for k, v in per_fire.items()},
        "cpu_ms_per_fire_total": round(total, 2),
        "fires_per_second": round(fires / profile["wall_seconds"], 1) if profile["wall_seconds"] else None,
        "ceiling_fires_per_second": round(1000 * cores / total, 1) if total else None,
    }
