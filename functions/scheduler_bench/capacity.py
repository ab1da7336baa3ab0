"""The capacity model (issue 18): how late a herd of occurrences due at once starts on AWS, simulated from AWS's
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
`Assumptions`; docs/capacity.md prints both.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from scheduler.adapters.dynamodb.common import TIMER_PAGE_SIZE
from scheduler.core.prescale import WorkerCapacity, pollers_for
from scheduler.schema import FUNCTION_MEMORY_MB, WORKER_BATCH_SIZE, WORKER_MAX_CONCURRENCY
from scheduler.settings import Settings
from scheduler_bench.prices import LAMBDA_MB_PER_VCPU, cpu_stretch

Mode = Literal["standard", "provisioned", "prescaled"]


@dataclass(frozen=True)
class Rule:
    value: float
    what: str
    source: str


#: A page's sends wait at most this long to land on time (scheduler.core.dispatch: each is sent when its remaining
#: delay is just over a whole number of seconds, so a page's waits end within a second of its start).
LANDING_WAIT_PER_PAGE_SECONDS = 1.0

RULES: dict[str, Rule] = {
    "standard_initial_concurrency": Rule(
        5,
        "SQS event source mapping, standard mode: starts with five concurrent invocations",
        "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
    ),
    "standard_added_per_minute": Rule(
        300,
        "standard mode adds up to 300 concurrent invocations a minute",
        "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
    ),
    "standard_max_concurrency": Rule(
        1250,
        "standard mode: at most 1,250 concurrent invocations per event source mapping",
        "https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html",
    ),
    "provisioned_invocations_per_poller": Rule(
        10,
        "provisioned mode: each event poller drives up to 10 concurrent invocations (about 1 MB/s)",
        "https://aws.amazon.com/blogs/aws/aws-lambda-enhances-sqs-processing-with-new-provisioned-mode-3x-faster-"
        "scaling-16x-higher-capacity",
    ),
    "provisioned_added_per_minute": Rule(
        1000,
        "provisioned mode scales up to 1,000 concurrent executions a minute",
        "https://aws.amazon.com/blogs/aws/aws-lambda-enhances-sqs-processing-with-new-provisioned-mode-3x-faster-"
        "scaling-16x-higher-capacity",
    ),
    "provisioned_minimum_pollers_max": Rule(
        200,
        "MinimumPollers: 2 to 200 for SQS",
        "https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-lambda-"
        "eventsourcemapping-provisionedpollerconfig.html",
    ),
    "provisioned_maximum_pollers_max": Rule(
        2000,
        "MaximumPollers: up to 2,000 in CloudFormation (default 200)",
        "https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-lambda-"
        "eventsourcemapping-provisionedpollerconfig.html",
    ),
    "lambda_new_environments_per_10s": Rule(
        1000,
        "Lambda adds at most 1,000 execution environments per function every 10 seconds, refilled continuously",
        "https://docs.aws.amazon.com/lambda/latest/dg/scaling-behavior.html",
    ),
    "dynamodb_partition_write_units": Rule(
        1000,
        "a DynamoDB partition takes at most 1,000 write units a second",
        "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html",
    ),
    "dynamodb_partition_read_units": Rule(
        3000,
        "a DynamoDB partition serves at most 3,000 read units a second",
        "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/warm-throughput-scenarios.html",
    ),
    "lambda_memory_per_vcpu": Rule(
        LAMBDA_MB_PER_VCPU,
        "Lambda allocates CPU in proportion to memory: the equivalent of one vCPU at 1,769 MB",
        "https://docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html",
    ),
}


@dataclass(frozen=True)
class Measured:
    """What `scripts/bench` measured per fire (the cost scenario, busy batches, one-shot jobs)."""

    worker_seconds_per_occurrence: float
    sweeper_seconds_per_fire: float
    sweep_read_units_per_timer: float
    #: Write units the API's create transaction spends on the timer item (2 per KB, transactional).
    create_timer_write_units: float
    source: str
    #: Whether the sweeper's time per fire is its work plus a full page's landing wait (the waits were measured
    #: apart), or its billed time with the cost run's small pages' waits in it (an upper bound).
    landing_waits_apart: bool = False
    #: The sweep's CPU time per fire on a whole core (the herd's full pages when measured; 0: not measured), and
    #: the sweeper's deployed memory: one sweep is one Python process, its chains share its CPU.
    sweeper_cpu_seconds_per_fire: float = 0.0
    sweeper_memory_mb: int = FUNCTION_MEMORY_MB["sweeper"]

    @property
    def sweep_cpu_seconds_per_fire(self) -> float:
        """How long one sweep's CPU takes per fire, whatever its chains: Lambda gives it memory / 1,769 of a vCPU,
        and its threads never use more than one core (the GIL)."""
        return self.sweeper_cpu_seconds_per_fire * cpu_stretch(self.sweeper_memory_mb)

    def sweep_seconds_per_fire(self, chains: int) -> float:
        """One sweep's time per fire with `chains` bucket chains at once: its chains in parallel, unless its CPU
        cannot keep up with them."""
        return max(self.sweeper_seconds_per_fire / max(1, chains), self.sweep_cpu_seconds_per_fire)

    @classmethod
    def from_results(cls, results: dict[str, Any], source: str) -> Measured:
        """From a results.json's `cost` (and `sweep_scaling` when present)."""
        busy = max(results["cost"]["one_shot"], key=lambda run: run["batch_size"])
        functions = busy["per_fire"]["by_function"]
        worker = sum(functions["worker"]["billed_seconds"].values())
        # A sweep that swept its buckets at once spent that many times its wall time per fire in each bucket's
        # chain (the model's unit: one sweep chain per shard). Results before that: 1. (Wall time: what its CPU
        # takes at the deployed memory is bounded apart, `sweep_cpu_seconds_per_fire`; results without the wall
        # time recorded apart use the billed time, which was wall time then.)
        wall = functions["sweeper"].get("invocation_seconds") or functions["sweeper"]["billed_seconds"]
        chain = sum(wall.values()) * int(results["cost"].get("sweep_buckets_at_once", 1))
        # The sweep's CPU per fire: the herd's (full pages, as a herd has them) when measured, else the busy run's.
        herd = (results["cost"].get("one_shot_herd") or [busy])[0]
        cpu = float((herd["per_fire"].get("lambda_cpu_seconds") or {}).get("sweeper", 0.0))
        # Of a chain's time, the sends' waits to land on time are a page's, not a fire's: at most a second a page
        # however many timers it holds, so the cost run's small pages (a few timers each) wait far more per fire
        # than a herd's full ones. The model takes them out and adds the page bound back (Assumptions). Results
        # from before the waits were measured keep them in (an upper bound).
        waits = busy["per_fire"].get("sweeper_wait_seconds")
        work = chain - waits if waits is not None else chain
        # The work per fire is below the timer's resolution on a tiny run (it can read 0): the model needs a
        # positive rate, so it takes at least 0.1 ms a fire (a sweep of 1,000 timers in 0.1 s).
        sweeper = max(work, 1e-4)
        if waits is not None:
            sweeper += LANDING_WAIT_PER_PAGE_SECONDS / TIMER_PAGE_SIZE
        rounds = (results.get("sweep_scaling") or {}).get("rounds") or []
        reads = [r["sweep"]["query_read_units_per_dispatched"] for r in rounds if "sweep" in r]
        read_units = max(reads) if reads else 0.125
        # A chain cannot read its bucket's partition faster than the partition allows: it is throttled to that.
        sweeper = max(sweeper, read_units / RULES["dynamodb_partition_read_units"].value)
        return cls(
            worker_seconds_per_occurrence=worker,
            sweeper_seconds_per_fire=sweeper,
            sweep_read_units_per_timer=read_units,
            create_timer_write_units=2.0,
            source=source,
            landing_waits_apart=waits is not None,
            sweeper_cpu_seconds_per_fire=cpu,
        )


@dataclass(frozen=True)
class Assumptions:
    """Every number of the model that is neither a documented rule nor a measurement."""

    cold_start_seconds: float = 0.5
    poll_seconds: float = 0.05
    #: The part of an occurrence's worker time before its target call (the job read and the ledger claim: 2 of its 3
    #: DynamoDB calls; the herd's tenants have no execution budget, so no slot is taken).
    before_target_fraction: float = 2 / 3
    account_concurrency: int = 1000
    #: The deployed defaults (scheduler.schema, what infra/config.py deploys): messages per worker invocation, and
    #: the standard-mode mapping's MaximumConcurrency (a pre-scaled deployment's provisioned mapping has none).
    batch_size: int = WORKER_BATCH_SIZE
    #: Occurrences a message carries (scheduler.core.envelope): full messages, the herd's occurrences of each tenant
    #: being due together.
    occurrences_per_message: int = Settings().occurrences_per_message
    standard_max_concurrency: int = WORKER_MAX_CONCURRENCY
    lookahead_seconds: int = 300
    sweep_work_seconds: float = 40.0
    dispatch_budget: int = 20_000
    #: Write units the outbox index takes per fire (its entry is written on the outcome and removed on publish).
    outbox_index_write_units_per_fire: float = 2.0
    outbox_shards: int = 8
    #: How fast the herd's jobs are created (the API's stage throttle bounds it; 50/s by default).
    creation_per_second: float = 1000.0
    warm_environments: int = 0
    #: Deployed defaults: 8 shards, one sweep a minute (EventBridge) sweeping them at once, standard-mode mapping
    #: without a cap.
    default_shards: int = 8
    #: Buckets one sweep invocation sweeps at once (Settings.sweep_concurrency): today's sweep chains.
    sweep_concurrency: int = 8
    target_start_seconds: float = 5.0
    time_step_seconds: float = 0.01

    def describe(self) -> list[str]:
        return [
            f"a cold start (new execution environment) costs {self.cold_start_seconds} s; "
            f"{self.warm_environments} environments are warm when the herd arrives",
            f"a poll hands a batch to an invocation {self.poll_seconds} s after it asked (SQS receive + invoke)",
            f"an occurrence's target call begins {self.before_target_fraction:.0%} into its worker time "
            "(2 of its 3 DynamoDB calls come before it: the job read and the claim)",
            f"the account's Lambda concurrency quota is {self.account_concurrency:,} (the default)",
            f"worker batch size {self.batch_size} (the deployed default), no batching window, each message carrying "
            f"{self.occurrences_per_message} occurrences (full: each tenant's occurrences of the herd are due "
            "together); a standard-mode "
            f"mapping runs at most {self.standard_max_concurrency} invocations at once (the deployed "
            "worker_max_concurrency)",
            f"look-ahead {self.lookahead_seconds} s; each sweep works {self.sweep_work_seconds:.0f} s of its 60 s "
            f"(timeout minus the safety margin), at most {self.dispatch_budget:,} occurrences; sweeps start on the "
            "minute; parallel sweeps dispatch in fire order",
            f"the outbox index takes {self.outbox_index_write_units_per_fire} write units per fire (of a job with "
            f"completion events on: every job of the herd) over "
            f"{self.outbox_shards} shards; timer items are under 1 KB",
            f"the herd is created at {self.creation_per_second:,.0f} jobs/s",
            "the herd is spread over enough tenants that no tenant's budgets (dispatch rate, execution slots) hold "
            "it back; targets answer within the measured worker time",
            "AWS latencies equal the emulators' (the measured times come from DynamoDB Local and moto)",
        ]


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
        "ahead of the peak (the pre-scaler's own sizing), one chain per shard (`sweep_concurrency` >= the shard "
        "count), and the sweeper deployed with a whole vCPU (`sweeper_memory_mb` 1,769).",
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
                f"{row['shards_needed']} ({row['shards_needed_why']})",
                str(row["outbox_shards_needed"]),
                "yes" if row["meets_target"] else "no",
            ]
        )
    lines += ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines += ["", "![Start lateness of 50,000 occurrences due in one second](capacity.png)", "", "Rules (sources):", ""]
    lines += [f"- {rule['what']}: {rule['source']}" for rule in capacity["rules"].values()]
    lines += ["", "Assumptions:", ""]
    lines += [f"- {text}" for text in capacity["assumptions_described"]]
    lines.append("")
    return lines
