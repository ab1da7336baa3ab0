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
from array import array
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from scheduler.core.capacity.prescale import WorkerCapacity, pollers_for
from scheduler.schema import FUNCTION_MEMORY_MB
from scheduler_bench.capacity_inputs import RULES, Assumptions, Measured
from scheduler_bench.prices import LAMBDA_MB_PER_VCPU, PRICES

Mode = Literal["standard", "provisioned", "prescaled"]


@dataclass(frozen=True)
class Scenario:
    occurrences: int
    spread_seconds: float  # fire times spread evenly over [0, spread)
    mode: Mode
    shards: int
    sweeps: int  # bucket chains one sweep invocation runs at once (its threads, `sweep_concurrency`)
    minimum_pollers: int = 2
    maximum_pollers: int = 200
    #: The sweeper's memory (its CPU share): the deployed default, or raised for a herd (`sweeper_memory_mb`).
    sweeper_memory_mb: int = FUNCTION_MEMORY_MB["sweeper"]
    #: Sweep invocations a tick runs at once (the fan-out, `fan_out_max_sweeps`), each with its own CPU.
    invocations: int = 1
    #: The worker's memory (its CPU share: `worker_memory_mb`), and the account's Lambda concurrency quota the row
    #: runs with (None: the default, `Assumptions.account_concurrency`).
    worker_memory_mb: int = FUNCTION_MEMORY_MB["worker"]
    account_concurrency: int | None = None

    @property
    def label(self) -> str:
        return {
            "standard": "standard mode (today)",
            "provisioned": f"provisioned, {self.minimum_pollers} pollers",
            "prescaled": (
                f"pre-scaled: {self.minimum_pollers} pollers, {self.invocations} sweep"
                f"{'s' if self.invocations > 1 else ''} of {self.sweeps} buckets at once, {self.shards:,} shards, "
                f"sweeper and worker at {self.sweeper_memory_mb:,} MB"
                + (
                    f", account concurrency quota {self.account_concurrency:,}"
                    if self.account_concurrency is not None
                    else ""
                )
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


def fire_time(index: int, occurrences: int, spread_seconds: float) -> float:
    """Evenly spread over [0, spread) (a herd due "in one second" has spread 1; jitter spreads it further)."""
    return spread_seconds * index / occurrences


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


@dataclass(frozen=True)
class Dispatch:
    """When each occurrence is handed to SQS: a tick on every minute from `-lookahead`, each running `invocations`
    sweeps (the fan-out: each its own CPU and budget; the ones it starts begin `fan_out_start_seconds` later), each
    sweeping its buckets at once, in fire order."""

    per_fire: float  # one sweep's time per fire
    per_tick: int  # occurrences a tick's sweeps dispatch
    invocations: int
    start: float  # when a tick's sweeps begin dispatching, after it
    lookahead: float

    @classmethod
    def of(cls, chains: int, measured: Measured, assumptions: Assumptions, invocations: int = 1) -> Dispatch:
        per_fire = measured.sweep_seconds_per_fire(chains)
        per_invocation = min(int(assumptions.sweep_work_seconds / per_fire), assumptions.dispatch_budget)
        start = assumptions.fan_out_start_seconds if invocations > 1 else 0.0
        return cls(per_fire, max(1, per_invocation * invocations), invocations, start, assumptions.lookahead_seconds)

    def sent(self, index: int) -> float:
        tick, k = divmod(index, self.per_tick)
        return -self.lookahead + 60.0 * tick + self.start + (k + 1) * self.per_fire / self.invocations


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


def sustained_dollars(
    scenario: Scenario, measured: Measured, assumptions: Assumptions, herd: dict[str, float]
) -> dict[str, float]:
    """Dollars per million fires at a sustained rate, pre-scaled: the measured herd's fire path per fire (its units,
    requests and log lines: `herd`, results.json's `one_shot_herd` fire path) with Lambda's time and requests as this
    row runs them - its sweeps and workers at their memory -, the shards' empty buckets and the pollers."""
    rate = scenario.occurrences / scenario.spread_seconds
    chains = max(1, min(scenario.sweeps, scenario.shards // max(1, scenario.invocations)))
    sweep_gb_seconds = measured.sweep_seconds_per_fire(chains) * scenario.sweeper_memory_mb / 1024
    worker_gb_seconds = measured.worker_seconds_at(scenario.worker_memory_mb) * scenario.worker_memory_mb / 1024
    per_invocation = assumptions.batch_size * assumptions.occurrences_per_message
    requests = 1 / per_invocation + scenario.invocations / (60 * rate)
    # Each shard's bucket costs a claim and a completion (2 write units) and a strongly consistent query (1 read
    # unit) a minute, timers or not.
    buckets = scenario.shards * (2 * PRICES["dynamodb_write_request_unit"] + PRICES["dynamodb_read_request_unit"])
    lambda_duration = (sweep_gb_seconds + worker_gb_seconds) * PRICES["lambda_gb_second_arm64"]
    parts = {
        "dynamodb": herd["dynamodb"] + buckets / (60 * rate) * 1e6,
        "sqs": herd["sqs"],
        "lambda_requests": requests * PRICES["lambda_request"] * 1e6,
        "lambda_duration": lambda_duration * 1e6,
        "provisioned_pollers": scenario.minimum_pollers
        * PRICES["lambda_provisioned_poller_hour"]
        / (3600 * rate)
        * 1e6,
        "cloudwatch_logs": herd["cloudwatch_logs"],
    }
    parts["total"] = sum(parts.values())
    return parts


#: Rows with more occurrences than this keep no samples (the plot draws one of the smaller herds).
MAX_SAMPLES = 1_000_000


def simulate(scenario: Scenario, measured: Measured, assumptions: Assumptions) -> Result:
    """Run the herd through dispatch, polling, Lambda and the worker; lateness = target call start - fire time.

    The queue holds messages, each of `occurrences_per_message` consecutive occurrences (a herd's messages are
    full): sent when its last occurrence was dispatched, visible from its first one's fire time rounded down to the
    second before (DelaySeconds), or at once when sent late."""
    measured = replace(measured, sweeper_memory_mb=scenario.sweeper_memory_mb)
    occurrences, spread = scenario.occurrences, scenario.spread_seconds
    chains = max(1, min(scenario.sweeps, scenario.shards // max(1, scenario.invocations)))
    dispatch = Dispatch.of(chains, measured, assumptions, max(1, scenario.invocations))
    size = assumptions.occurrences_per_message
    messages = []  # (visible, first occurrence, last occurrence + 1)
    for first in range(0, occurrences, size):
        last = min(occurrences, first + size)
        messages.append((_visible_at(fire_time(first, occurrences, spread), dispatch.sent(last - 1)), first, last))
    messages.sort()
    pending: deque[tuple[float, int, int]] = deque(messages)
    per_message = measured.worker_seconds_at(scenario.worker_memory_mb)
    quota = scenario.account_concurrency or assumptions.account_concurrency
    dt = assumptions.time_step_seconds
    bucket_size = RULES["lambda_new_environments_per_10s"].value
    refill = bucket_size / 10
    tokens, idle_envs = bucket_size, assumptions.warm_environments
    running: list[float] = []  # end times of running invocations
    lateness = array("d")
    starts_per_second: dict[int, int] = {}
    cold = peak = 0
    first_visible = messages[0][0]
    t = first_visible
    before_target = assumptions.before_target_fraction * per_message
    while pending or running:
        while running and running[0] <= t:
            heapq.heappop(running)
            idle_envs += 1
        since = t - first_visible
        allowed = min(int(_esm_concurrency(scenario, since, assumptions.standard_max_concurrency)), quota)
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
            for _ in range(min(assumptions.batch_size, len(pending))):
                if pending[0][0] > t:
                    break
                _, first, last = pending.popleft()
                for index in range(first, last):
                    fire = fire_time(index, occurrences, spread)
                    start = max(clock, fire)
                    target = start + before_target
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
    del lateness
    shards, why = shards_needed(occurrences, measured, assumptions)
    if scenario.mode == "prescaled":  # fanned out: its sweeps, each its CPU (fan_out_for)
        sizing = fan_out_for(occurrences, spread, measured, assumptions)
        shards, why = sizing.shards, sizing.why
    peak_rate = max(starts_per_second.values()) if starts_per_second else 0
    units = peak_rate * assumptions.outbox_index_write_units_per_fire
    result = Result(
        scenario=scenario,
        p50=_percentile(ordered, 0.50),
        p99=_percentile(ordered, 0.99),
        max=ordered[-1] if ordered else 0.0,
        early_starts=sum(1 for x in ordered if x < 0),
        last_dispatch_vs_first_fire=dispatch.sent(occurrences - 1),
        dispatched_late=sum(1 for i in range(occurrences) if dispatch.sent(i) > fire_time(i, occurrences, spread)),
        peak_concurrency=peak,
        cold_starts=cold,
        peak_starts_per_second=peak_rate,
        shards_needed=shards,
        shards_needed_why=why,
        outbox_shards_needed=max(1, math.ceil(units / RULES["dynamodb_partition_write_units"].value)),
        meets_target=False,
        samples=ordered if occurrences <= MAX_SAMPLES else [],
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


@dataclass(frozen=True)
class FanOutSizing:
    """What a pre-scaled deployment runs for a herd: sweeps at once (the fan-out), buckets each sweeps at once, and
    shards (one bucket per chain)."""

    invocations: int
    chains: int
    shards: int
    why: str


def fan_out_for(occurrences: int, spread: float, measured: Measured, assumptions: Assumptions) -> FanOutSizing:
    """The fewest sweeps that dispatch the herd in time, each with as many buckets at once as its CPU keeps busy:
    a herd due within a minute may take every tick of the look-ahead; a longer one must be kept up with minute by
    minute."""
    cpu = measured.sweep_cpu_seconds_per_fire
    # Unmeasured CPU (0): the chains alone bound a sweep, as many as it may run.
    busy = math.ceil(measured.sweeper_seconds_per_fire / cpu) if cpu > 0 else assumptions.max_sweep_concurrency
    chains = max(1, min(assumptions.max_sweep_concurrency, busy))
    per_fire = measured.sweep_seconds_per_fire(chains)
    per_invocation = min(int(assumptions.sweep_work_seconds / per_fire), assumptions.dispatch_budget)
    ticks = max(1, assumptions.lookahead_seconds // 60)
    if spread <= 60:
        per_tick = math.ceil(occurrences / ticks)
    else:
        per_tick = max(math.ceil(occurrences * 60 / spread), math.ceil(occurrences / (ticks + spread // 60)))
    invocations = max(1, math.ceil(per_tick / per_invocation))
    if invocations == 1:  # one sweep: only the chains it needs, one a shard, as `shards_needed` counts them
        chains = max(1, min(chains, shards_needed(occurrences, measured, assumptions)[0]))
    shards = invocations * chains
    why = "dispatch in time"
    if invocations > assumptions.max_fan_out:
        why = f"beyond the fan-out's {assumptions.max_fan_out} sweeps at once"
    elif shards > assumptions.max_shards:
        why = f"beyond the {assumptions.max_shards} shards a deployment may set"
    return FanOutSizing(invocations, chains, shards, why)


def scenarios(occurrences: int, spread: float, measured: Measured, assumptions: Assumptions) -> list[Scenario]:
    """Today (standard mode, one sweep a minute sweeping its shards' buckets at once), provisioned at its floor, and
    pre-scaled with the shards it needs (one chain each: `sweep_concurrency` at least the shard count, up to 64)."""
    chains = min(assumptions.sweep_concurrency, assumptions.default_shards)
    today = Scenario(occurrences, spread, "standard", assumptions.default_shards, chains)
    # Pre-scaled for a herd, the sweeper also has a whole vCPU (more is no faster: one Python process).
    herd_memory = max(FUNCTION_MEMORY_MB["sweeper"], int(LAMBDA_MB_PER_VCPU))
    sizing = fan_out_for(occurrences, spread, replace(measured, sweeper_memory_mb=herd_memory), assumptions)
    capacity = WorkerCapacity(
        measured.worker_seconds_at(herd_memory),
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
        _with_quota(
            Scenario(
                occurrences,
                spread,
                "prescaled",
                sizing.shards,
                sizing.chains,
                pollers,
                maximum,
                herd_memory,
                sizing.invocations,
                worker_memory_mb=herd_memory,
            ),
            measured,
            assumptions,
        ),
    ]


def _with_quota(scenario: Scenario, measured: Measured, assumptions: Assumptions) -> Scenario:
    """A pre-scaled herd that needs more concurrency than the default quota leaves the workers runs with the quota it
    needs (its peak plus what the other functions reserve, in hundreds), and its row says so."""
    unbounded = simulate(replace(scenario, account_concurrency=10**6), measured, assumptions)
    needed = unbounded.peak_concurrency + assumptions.reserved_elsewhere
    if needed <= assumptions.account_concurrency:
        return scenario
    return replace(scenario, account_concurrency=math.ceil(needed / 100) * 100)


SIZES = (10_000, 50_000, 500_000)
SPREADS = (1.0, 60.0)
#: 20,000 fires a second for 10 minutes: pre-scaled only (today's deployment is far from it).
SUSTAINED = (12_000_000, 600.0)


def run(
    measured: Measured,
    assumptions: Assumptions | None = None,
    sizes: tuple[int, ...] = SIZES,
    sustained: tuple[int, float] | None = SUSTAINED,
    herd_fire_path: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The whole table: every size x spread x mode, then the sustained rate pre-scaled (priced per million fires from
    `herd_fire_path` when given). Returns results.json's `capacity`."""
    assumptions = assumptions or Assumptions()
    cases = [
        s for occurrences in sizes for spread in SPREADS for s in scenarios(occurrences, spread, measured, assumptions)
    ]
    if sustained is not None:
        cases += [s for s in scenarios(*sustained, measured, assumptions) if s.mode == "prescaled"]
    rows = []
    samples = {}
    for scenario in cases:
        result = simulate(scenario, measured, assumptions)
        row = result.as_dict()
        if sustained is not None and herd_fire_path and (scenario.occurrences, scenario.spread_seconds) == sustained:
            row["dollars_per_million"] = sustained_dollars(scenario, measured, assumptions, herd_fire_path)
        rows.append(row)
        samples[f"{scenario.occurrences}/{scenario.spread_seconds:g}/{scenario.mode}"] = result.samples
    return {
        "measured": asdict(measured),
        "assumptions": asdict(assumptions),
        "assumptions_described": assumptions.describe(),
        "rules": {name: asdict(rule) for name, rule in RULES.items()},
        "rows": rows,
        "samples": samples,
    }
