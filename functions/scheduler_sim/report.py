"""Running seeds and reporting on them: a readable failure report with a one-line replay command."""

from __future__ import annotations

import multiprocessing
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from scheduler_sim.faults import KNOWN_BUGS_AVOIDED, Exposure, FaultProfile
from scheduler_sim.records import SimConfig
from scheduler_sim.simulation import Event, SimResult, Simulation
from scheduler_sim.variants import VARIANTS

#: Events shown in a failure report (the replay command shows them all).
REPORT_EVENTS = 60
#: Job ids as the simulator draws them (10 hex digits), to pick a violation's events out of the trace.
_JOB_ID = re.compile(r"\b[0-9a-f]{10}\b")


def run_seed(
    seed: int,
    *,
    variant: str | None = None,
    profile: FaultProfile | None = None,
    exposure: Exposure | None = None,
    trace_calls: bool = False,
    sweepers: int | None = None,
) -> SimResult:
    """Run one seed of the simulation (optionally with a deliberately broken protocol `variant`, and with
    `sweepers` concurrent sweepers instead of the seed's own 1-3)."""
    return Simulation(
        seed,
        variant=VARIANTS[variant] if variant else None,
        profile=profile,
        exposure=exposure,
        trace_calls=trace_calls,
        config=SimConfig(sweepers=sweepers) if sweepers else None,
    ).run()


def replay_command(
    seed: int, variant: str | None = None, exposure: Exposure | None = None, sweepers: int | None = None
) -> str:
    extra = f" --variant {variant}" if variant else ""
    if sweepers:
        extra += f" --sweepers {sweepers}"
    if exposure == KNOWN_BUGS_AVOIDED:
        extra += " --avoid-known-bugs"
    return f".venv/bin/python -m scheduler_sim --seed {seed}{extra} --trace"


def format_event(event: Event) -> str:
    at, actor, text = event
    return f"{at:%Y-%m-%dT%H:%M:%S}.{at.microsecond // 1000:03d}Z {actor:<10} {text}"


def format_failure(
    result: SimResult,
    *,
    variant: str | None = None,
    exposure: Exposure | None = None,
    events: int = REPORT_EVENTS,
    sweepers: int | None = None,
) -> str:
    """The seed, what was violated, the faults, the last `events` events and how to replay it."""
    lines = [f"seed {result.seed} FAILED ({len(result.violations)} violation(s)); faults: {result.profile.describe()}"]
    lines += [f"  VIOLATED {violation}" for violation in result.violations]
    job_ids = sorted({m for v in result.violations for m in _JOB_ID.findall(v.message)})
    if job_ids and events:
        about = [e for e in result.events if any(job_id in e[2] for job_id in job_ids)][-events:]
        lines.append(f"  last {len(about)} events about {', '.join(job_ids)}:")
        lines += [f"    {format_event(event)}" for event in about]
    shown = result.events[-events:] if events else result.events
    lines.append(f"  last {len(shown)} of {len(result.events)} events:")
    lines += [f"    {format_event(event)}" for event in shown]
    lines.append(f"  replay: {replay_command(result.seed, variant, exposure, sweepers)}")
    return "\n".join(lines)


@dataclass
class Summary:
    passed: int = 0
    failed: list[SimResult] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> int:
        return self.passed + len(self.failed)

    def line(self) -> str:
        rate = self.total / self.seconds if self.seconds else 0.0
        return f"{self.passed} passed, {len(self.failed)} failed in {self.seconds:.1f}s ({rate:.0f} seeds/s)"


def run_seeds(
    seeds: Iterable[int],
    *,
    variant: str | None = None,
    profile: FaultProfile | None = None,
    exposure: Exposure | None = None,
    processes: int = 1,
    sweepers: int | None = None,
) -> Summary:
    """Run many seeds, in this process or spread over `processes` worker processes (results are the same:
    each seed is independent and deterministic). Failed results keep their events for the report."""
    seeds = list(seeds)
    started = time.perf_counter()
    summary = Summary()
    if processes <= 1 or len(seeds) < 2:
        for seed in seeds:
            _tally(summary, run_seed(seed, variant=variant, profile=profile, exposure=exposure, sweepers=sweepers))
    else:
        size = max(1, len(seeds) // (processes * 4))
        chunks = [(seeds[i : i + size], variant, profile, exposure, sweepers) for i in range(0, len(seeds), size)]
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            for passed, failed in pool.imap(_run_chunk, chunks):
                summary.passed += passed
                summary.failed += failed
    summary.seconds = time.perf_counter() - started
    return summary


def _tally(summary: Summary, result: SimResult) -> None:
    if result.ok:
        summary.passed += 1
    else:
        summary.failed.append(result)


def _run_chunk(
    chunk: tuple[list[int], str | None, FaultProfile | None, Exposure | None, int | None],
) -> tuple[int, list[SimResult]]:
    seeds, variant, profile, exposure, sweepers = chunk
    summary = run_seeds(seeds, variant=variant, profile=profile, exposure=exposure, sweepers=sweepers)
    return summary.passed, summary.failed
