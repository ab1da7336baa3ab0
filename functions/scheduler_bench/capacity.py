"""The capacity model: how late a herd of occurrences due at once starts on AWS, simulated from AWS's
documented scaling rules and the per-fire times and units `scripts/bench` measured.

Deterministic (no randomness, no clock): the same inputs give the same table. What it simulates, in order:

1. **Dispatch.** The herd's timers sit in one bucket minute. A sweep runs every minute (EventBridge rate(1 min)),
   works `sweep_work_seconds` of its 60 s (the rest is the handler's safety margin) at the measured sweeper time per
   fire, at most `dispatch_budget` per invocation, and starts on the herd's minute `lookahead` before it. Parallel
   sweeps (one per shard at most: claims keep them disjoint) multiply that rate. A message sent before its fire
   time becomes visible with `DelaySeconds = floor(fire - sent)` (up to a second early: the worker waits out the
   rest); one sent late is visible at once.
2. **Polling.** The worker event source mapping's concurrent invocations: standard mode starts at 5 and adds up to
   300 a minute up to 1,250; provisioned mode starts at `10 x MinimumPollers` and adds up to 1,000 a minute up to
   `10 x MaximumPollers`.
3. **Lambda.** Execution environments: at most 1,000 new ones per 10 s per function (a bucket of 1,000 refilled
   continuously), each new one pays a cold start; the account's concurrency quota caps the total.
4. **Worker.** An invocation takes up to `batch_size` visible messages (the deployed `worker_batch_size`), each
   carrying up to `occurrences_per_message` occurrences (the deployed `occurrences_per_message`: a herd's messages
   are full), and runs the occurrences one after another at the measured worker time per occurrence - the worker
   runs a batch's occurrences at once, sharing the CPU, and the measured time is a batch's duration over its
   occurrences, so the batch takes as long in all;
   an occurrence *starts* when its target call begins. A standard-mode mapping runs at most the deployed
   `worker_max_concurrency` invocations at once (its MaximumConcurrency; a pre-scaled, provisioned one has none).
5. **DynamoDB.** The shard count each herd needs: enough parallel sweeps to dispatch it inside the look-ahead, and
   no partition over 1,000 write / 3,000 read units a second (bucket partitions while the herd is created and swept;
   the outbox index's shards while it runs).

Every rule carries its source (`RULES`) and every number that is not a documented rule or a measurement is named in
`Assumptions` (both in `scheduler_bench.capacity_inputs`); docs/capacity.md prints both (`capacity_report`).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from scheduler.core.capacity.prescale import WorkerCapacity, pollers_for
from scheduler.schema import FUNCTION_MEMORY_MB
from scheduler_bench.capacity_inputs import RULES, Assumptions, Measured
from scheduler_bench.prices import LAMBDA_MB_PER_VCPU

Mode = Literal["standard", "provisioned", "prescaled"]


@dataclass(frozen=True)
class Scenario:
    occurrences: int
    spread_seconds: float  # fire times spread evenly over [0, spread)
    mode: Mode
    shards: int
    sweeps: int  # parallel sweeps working on the herd's minute
    minimum_pollers: int = 2
    maximum_pollers: int = 200
    #: The sweeper's memory (its CPU share): the deployed default, or raised for a herd (`sweeper_memory_mb`).
    sweeper_memory_mb: int = FUNCTION_MEMORY_MB["sweeper"]

    @property
    def label(self) -> str:
        return {
            "standard": "standard mode (today)",
            "provisioned": f"provisioned, {self.minimum_pollers} pollers",
            "prescaled": (
                f"pre-scaled: {self.minimum_pollers} pollers, {self.sweeps} sweeps, sweeper at "
                f"{self.sweeper_memory_mb:,} MB"
            ),
        }[self.mode]


@dataclass
class Result:
    scenario: Scenario
    p50: float
    p99: float
    max: float
    early_starts: int
    last_dispatch_vs_first_fire: float
    dispatched_late: int
    peak_concurrency: int
    cold_starts: int
    peak_starts_per_second: int
    shards_needed: int
    shards_needed_why: str
    outbox_shards_needed: int
    meets_target: bool
    samples: list[float] = field(default_factory=list, repr=False)

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["label"] = self.scenario.label
        out.pop("samples")
        return out


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[index]


def fire_times(occurrences: int, spread_seconds: float) -> list[float]:
    """Evenly spread over [0, spread) (a herd due "in one second" has spread 1; jitter spreads it further)."""
    return [spread_seconds * i / occurrences for i in range(occurrences)]


def sweep_capacity_before(lookahead_seconds: int, measured: Measured, assumptions: Assumptions) -> int:
    """Occurrences one sweep chain dispatches between the look-ahead's start and the fire time (with no other
    chain beside it)."""
    per_sweep = min(assumptions.sweep_work_seconds / measured.sweep_seconds_per_fire(1), assumptions.dispatch_budget)
    return int(per_sweep * (lookahead_seconds // 60))


def sweep_cpu_capacity_before(lookahead_seconds: int, measured: Measured, assumptions: Assumptions) -> float:
    """Occurrences one sweep's CPU can dispatch between the look-ahead's start and the fire time, however many
    chains it runs (inf when its CPU time was not measured)."""
    if measured.sweep_cpu_seconds_per_fire <= 0:
        return math.inf
    return assumptions.sweep_work_seconds / measured.sweep_cpu_seconds_per_fire * (lookahead_seconds // 60)


def dispatch_times(fires: list[float], sweeps: int, measured: Measured, assumptions: Assumptions) -> list[float]:
    """When each occurrence is handed to SQS: sweeps on every minute from `-lookahead`, `sweeps` in parallel."""
    per_fire = measured.sweep_seconds_per_fire(sweeps)
    per_sweep = min(int(assumptions.sweep_work_seconds / per_fire), assumptions.dispatch_budget * sweeps)
    out: list[float] = []
    tick = -float(assumptions.lookahead_seconds)
    index = 0
    while index < len(fires):
        for k in range(min(per_sweep, len(fires) - index)):
            out.append(tick + (k + 1) * per_fire)
        index += per_sweep
        tick += 60.0
    return out


def _visible_at(fire: float, sent: float) -> float:
    if sent >= fire:
        return sent
    return sent + math.floor(fire - sent)


def _esm_concurrency(scenario: Scenario, since: float, cap: float) -> float:
    if scenario.mode == "standard":
        start = RULES["standard_initial_concurrency"].value
        grown = start + RULES["standard_added_per_minute"].value / 60 * since
        return min(grown, RULES["standard_max_concurrency"].value, cap)
    per_poller = RULES["provisioned_invocations_per_poller"].value
    grown = per_poller * scenario.minimum_pollers + RULES["provisioned_added_per_minute"].value / 60 * since
    return min(grown, per_poller * scenario.maximum_pollers)


def simulate(scenario: Scenario, measured: Measured, assumptions: Assumptions) -> Result:
    """Run the herd through dispatch, polling, Lambda and the worker; lateness = target call start - fire time."""
    measured = replace(measured, sweeper_memory_mb=scenario.sweeper_memory_mb)
    fires = fire_times(scenario.occurrences, scenario.spread_seconds)
    sent = dispatch_times(fires, max(1, min(scenario.sweeps, scenario.shards)), measured, assumptions)
    visible = sorted((_visible_at(f, s), f) for f, s in zip(fires, sent, strict=True))
    pending: deque[tuple[float, float]] = deque(visible)
    per_message = measured.worker_seconds_per_occurrence
    dt = assumptions.time_step_seconds
    bucket_size = RULES["lambda_new_environments_per_10s"].value
    refill = bucket_size / 10
    tokens, idle_envs = bucket_size, assumptions.warm_environments
    running: list[float] = []  # end times of running invocations
    lateness: list[float] = []
    starts_per_second: dict[int, int] = {}
    cold = peak = 0
    first_visible = visible[0][0]
    t = first_visible
    while pending or running:
        while running and running[0] <= t:
            heapq.heappop(running)
            idle_envs += 1
        since = t - first_visible
        allowed = min(
            int(_esm_concurrency(scenario, since, assumptions.standard_max_concurrency)),
            assumptions.account_concurrency,
        )
        while len(running) < allowed and pending and pending[0][0] <= t:
            if idle_envs > 0:
                idle_envs -= 1
                begin = t + assumptions.poll_seconds
            elif tokens >= 1:
                tokens -= 1
                cold += 1
                begin = t + assumptions.poll_seconds + assumptions.cold_start_seconds
            else:
                break
            clock = begin
            for _ in range(min(assumptions.batch_size * assumptions.occurrences_per_message, len(pending))):
                if pending[0][0] > t:
                    break
                _, fire = pending.popleft()
                start = max(clock, fire)
                target = start + assumptions.before_target_fraction * per_message
                lateness.append(target - fire)
                second = math.floor(target)
                starts_per_second[second] = starts_per_second.get(second, 0) + 1
                clock = start + per_message
            heapq.heappush(running, clock)
        peak = max(peak, len(running))
        step = dt
        if pending and pending[0][0] > t + dt:  # nothing visible: jump to the next message or the next free slot
            step = max(dt, min(pending[0][0], running[0] if running else math.inf) - t)
        tokens = min(bucket_size, tokens + refill * step)
        t += step
    ordered = sorted(lateness)
    shards, why = shards_needed(scenario.occurrences, measured, assumptions)
    peak_rate = max(starts_per_second.values()) if starts_per_second else 0
    units = peak_rate * assumptions.outbox_index_write_units_per_fire
    result = Result(
        scenario=scenario,
        p50=_percentile(ordered, 0.50),
        p99=_percentile(ordered, 0.99),
        max=ordered[-1] if ordered else 0.0,
        early_starts=sum(1 for x in ordered if x < 0),
        last_dispatch_vs_first_fire=max(sent) - fires[0],
        dispatched_late=sum(1 for f, s in zip(fires, sent, strict=True) if s > f),
        peak_concurrency=peak,
        cold_starts=cold,
        peak_starts_per_second=peak_rate,
        shards_needed=shards,
        shards_needed_why=why,
        outbox_shards_needed=max(1, math.ceil(units / RULES["dynamodb_partition_write_units"].value)),
        meets_target=False,
        samples=ordered,
    )
    result.meets_target = result.p99 <= assumptions.target_start_seconds
    return result


def shards_needed(occurrences: int, measured: Measured, assumptions: Assumptions) -> tuple[int, str]:
    """Bucket shards for a herd of `occurrences` in one minute: enough parallel sweeps (one per shard) to dispatch
    it within the look-ahead, and no bucket partition over its read or write limit."""
    per_chain = max(1, sweep_capacity_before(assumptions.lookahead_seconds, measured, assumptions))
    for_dispatch = math.ceil(occurrences / per_chain)
    write_limit = RULES["dynamodb_partition_write_units"].value
    read_limit = RULES["dynamodb_partition_read_units"].value
    for_creation = math.ceil(assumptions.creation_per_second * measured.create_timer_write_units / write_limit)
    # One sweep on one shard reads at most its partition's limit (Measured throttles a faster one to it).
    sweep_reads = measured.sweep_read_units_per_timer / measured.sweeper_seconds_per_fire
    assert sweep_reads <= read_limit * (1 + 1e-9), "Measured.from_results throttles a sweep to its partition"
    needed = max(for_dispatch, for_creation)
    why = "dispatch in time" if needed == for_dispatch else "creation writes"
    lookahead = assumptions.lookahead_seconds
    if occurrences > sweep_cpu_capacity_before(lookahead, measured, assumptions):
        vcpu = max(measured.sweeper_memory_mb, int(LAMBDA_MB_PER_VCPU))
        if occurrences > sweep_cpu_capacity_before(lookahead, replace(measured, sweeper_memory_mb=vcpu), assumptions):
            why = "beyond one sweep's CPU at any memory: no shard count dispatches it in time"
        else:
            why = (
                f"dispatch in time, with the sweeper at {vcpu:,} MB (its CPU at {measured.sweeper_memory_mb:,} MB "
                "cannot)"
            )
    return needed, why


def scenarios(occurrences: int, spread: float, measured: Measured, assumptions: Assumptions) -> list[Scenario]:
    """Today (standard mode, one sweep a minute sweeping its shards' buckets at once), provisioned at its floor, and
    pre-scaled with the shards it needs (one chain each: `sweep_concurrency` at least the shard count, up to 64)."""
    chains = min(assumptions.sweep_concurrency, assumptions.default_shards)
    today = Scenario(occurrences, spread, "standard", assumptions.default_shards, chains)
    # Pre-scaled for a herd, the sweeper also has a whole vCPU (more is no faster: one Python process).
    herd_memory = max(FUNCTION_MEMORY_MB["sweeper"], int(LAMBDA_MB_PER_VCPU))
    shards, _ = shards_needed(occurrences, replace(measured, sweeper_memory_mb=herd_memory), assumptions)
    capacity = WorkerCapacity(
        measured.worker_seconds_per_occurrence,
        target_start_seconds=assumptions.target_start_seconds,
        ceiling_pollers=int(RULES["provisioned_minimum_pollers_max"].value),
    )
    per_minute = occurrences if spread <= 60 else math.ceil(occurrences * 60 / spread)
    peak_second = math.ceil(occurrences / max(spread, 1.0))
    pollers = pollers_for(peak_second, per_minute, capacity)
    maximum = int(RULES["provisioned_maximum_pollers_max"].value)
    return [
        today,
        replace(today, mode="provisioned", minimum_pollers=2),
        Scenario(occurrences, spread, "prescaled", max(shards, 1), max(shards, 1), pollers, maximum, herd_memory),
    ]


SIZES = (10_000, 50_000, 500_000)
SPREADS = (1.0, 60.0)


def run(measured: Measured, assumptions: Assumptions | None = None, sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """The whole table: every size x spread x mode. Returns results.json's `capacity`."""
    assumptions = assumptions or Assumptions()
    rows = []
    samples = {}
    for occurrences in sizes:
        for spread in SPREADS:
            for scenario in scenarios(occurrences, spread, measured, assumptions):
                result = simulate(scenario, measured, assumptions)
                rows.append(result.as_dict())
                samples[f"{occurrences}/{spread:g}/{scenario.mode}"] = result.samples
    return {
        "measured": asdict(measured),
        "assumptions": asdict(assumptions),
        "assumptions_described": assumptions.describe(),
        "rules": {name: asdict(rule) for name, rule in RULES.items()},
        "rows": rows,
        "samples": samples,
    }
