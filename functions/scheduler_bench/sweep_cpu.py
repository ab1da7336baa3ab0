"""The sweep's CPU per fire, with and without the fast path for its AWS calls, side by side in one run.

Each round stores a herd of one-shot jobs due in the same second (through the JobService, as the API stores them),
then runs one sweeper invocation over it, as deployed (the wiring's own services, the deployed shard count, buckets
swept at once and landing on time), and takes the CPU time the process spent in that invocation: user and system, on
a whole core, nothing else running in the process (the clients are not metered). The two variants differ only in
`fast_aws_calls` (scheduler.adapters.fast_calls); they alternate within a round and swap their order from one
round to the next, so the machine's drift and its other users weigh on both alike. What a user pays for it is the
sweeper's Lambda time: the CPU time per fire stretched to the deployed memory (`prices.cpu_stretch`).
"""

from __future__ import annotations

import os
import statistics
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.core.jobs.service import Submission
from scheduler.core.model.job import JobSpec
from scheduler.core.model.timefmt import rfc3339
from scheduler.schema import FUNCTION_MEMORY_MB
from scheduler.settings import Settings
from scheduler_bench.environment import create_resources, delete_resources
from scheduler_bench.prices import cpu_stretch
from scheduler_bench.services import VirtualClock, build, client, flowing, settings_for

SIGNING_SECRET = "bench-signing-secret"
#: The variants, by the setting that tells them apart.
VARIANTS = {"botocore": False, "fast": True}


@dataclass(frozen=True)
class SweepCpuConfig:
    """The herd each round sweeps, and the rounds (each runs both variants)."""

    jobs: int = 5000
    rounds: int = 3
    loader_threads: int = 4


def _herd(due: datetime, jobs: int) -> list[dict[str, Any]]:
    """One-shot jobs due within one second (a herd, as the burst scenario has it), to a target never called."""
    return [
        {
            "schedule": {"type": "once", "at": rfc3339(due + timedelta(milliseconds=i % 1000))},
            "target": {"type": "http", "url": "http://127.0.0.1:9/hook"},
            "payload": {"bench": "sweep-cpu", "n": i},
        }
        for i in range(jobs)
    ]


def sweep_once(config: SweepCpuConfig, fast: bool) -> dict[str, Any]:
    """One round of one variant: store the herd, then measure one sweep of it."""
    dynamodb, sqs, events = client("dynamodb"), client("sqs"), client("events")
    resources = create_resources(f"bc{uuid.uuid4().hex[:10]}", dynamodb, sqs, events)
    try:
        due = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=30)
        clock = VirtualClock(due - timedelta(minutes=20))
        settings = settings_for(resources, SIGNING_SECRET, max_active_jobs=10**9).model_copy(
            update={"fast_aws_calls": fast}
        )
        services = build(settings, dynamodb, sqs, events, clock, SIGNING_SECRET)
        bodies = _herd(due, config.jobs)

        def create(chunk: list[dict[str, Any]]) -> None:
            submissions = [Submission(JobSpec.model_validate(body), None, body) for body in chunk]
            for answer in services.job_service.create_many("bench", submissions):
                if isinstance(answer, Exception):
                    raise answer

        with ThreadPoolExecutor(config.loader_threads) as pool:
            list(pool.map(create, [bodies[i : i + 25] for i in range(0, len(bodies), 25)]))
        clock.set(due - timedelta(seconds=1))
        began, cpu = time.perf_counter(), os.times()
        with flowing(clock):
            report = services.sweeper.sweep(clock.now() + timedelta(seconds=60))
        after, wall = os.times(), time.perf_counter() - began
        user, system = after.user - cpu.user, after.system - cpu.system
        fires = report.dispatched
        return {
            "variant": "fast" if fast else "botocore",
            "fires": fires,
            "cpu_seconds": round(user + system, 3),
            "user_seconds": round(user, 3),
            "system_seconds": round(system, 3),
            "wall_seconds": round(wall, 3),
            "cpu_ms_per_fire": round(1000 * (user + system) / max(1, fires), 3),
        }
    finally:
        delete_resources(resources, dynamodb, sqs, events)


def run(config: SweepCpuConfig, log: Callable[[str], None]) -> dict[str, Any]:
    """Both variants, alternating, `config.rounds` times; their medians and the ratio."""
    runs: list[dict[str, Any]] = []
    for round_no in range(config.rounds):
        order = list(VARIANTS.items()) if round_no % 2 == 0 else list(reversed(VARIANTS.items()))
        for name, fast in order:
            result = {"round": round_no + 1, **sweep_once(config, fast)}
            log(
                f"sweep cpu: round {round_no + 1} {name}: {result['fires']} fires, "
                f"{result['cpu_ms_per_fire']:.2f} ms of CPU a fire ({result['wall_seconds']:.1f} s)"
            )
            if result["fires"] != config.jobs:
                raise RuntimeError(f"the sweep dispatched {result['fires']} of {config.jobs}: {result}")
            runs.append(result)
    medians = {name: statistics.median(r["cpu_ms_per_fire"] for r in runs if r["variant"] == name) for name in VARIANTS}
    memory = FUNCTION_MEMORY_MB["sweeper"]
    return {
        "config": asdict(config),
        "settings": {
            "shard_count": Settings.model_fields["shard_count"].default,
            "sweep_concurrency": Settings.model_fields["sweep_concurrency"].default,
            "sweeper_memory_mb": memory,
        },
        "runs": runs,
        "cpu_ms_per_fire": {name: round(value, 3) for name, value in medians.items()},
        "lambda_ms_per_fire_at_deployed_memory": {
            name: round(value * cpu_stretch(memory), 3) for name, value in medians.items()
        },
        "ratio_fast_to_botocore": round(medians["fast"] / medians["botocore"], 3) if medians["botocore"] else None,
    }


def sweep_cpu_section(result: dict[str, Any]) -> list[str]:
    """results.md's section."""
    if "error" in result:
        return ["## The sweep's CPU per fire", "", "Failed: see results.json.", ""]
    config, settings = result["config"], result["settings"]
    medians, lam = result["cpu_ms_per_fire"], result["lambda_ms_per_fire_at_deployed_memory"]
    lines = [
        "## The sweep's CPU per fire",
        "",
        f"One sweep of {config['jobs']:,} one-shot jobs due in the same second, {settings['shard_count']} shards, "
        f"{settings['sweep_concurrency']} buckets at once, landing on time; CPU (user + system) of the sweeping "
        f"process, median of {config['rounds']} rounds, the variants alternating. Lambda time at the deployed "
        f"{settings['sweeper_memory_mb']} MB: the CPU stretched to its share of a vCPU.",
        "",
        "| AWS calls | CPU ms a fire (whole core) | Lambda ms a fire at the deployed memory | rounds (ms a fire) |",
        "| --- | ---: | ---: | --- |",
    ]
    for name in VARIANTS:
        each = ", ".join(f"{r['cpu_ms_per_fire']:.2f}" for r in result["runs"] if r["variant"] == name)
        lines.append(f"| {name} | {medians[name]:.2f} | {lam[name]:.2f} | {each} |")
    lines += ["", f"Fast over botocore: **{result['ratio_fast_to_botocore']:.2f}**.", ""]
    return lines
