"""What the capacity model (`scheduler_bench.capacity`) runs on: AWS's documented scaling rules, each with its
source; what `scripts/bench` measured per fire; and every other number of the model, named as an assumption."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.adapters.dynamodb.common import TIMER_PAGE_SIZE
from scheduler.schema import FUNCTION_MEMORY_MB, WORKER_BATCH_SIZE, WORKER_MAX_CONCURRENCY
from scheduler.settings import Settings
from scheduler_bench.prices import LAMBDA_MB_PER_VCPU, cpu_stretch


@dataclass(frozen=True)
class Rule:
    value: float
    what: str
    source: str


#: A page's sends wait at most this long to land on time (scheduler.core.sweep.dispatch: each is sent when its remaining
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
    #: The worker's wall and CPU time per occurrence on a whole core (0: not recorded apart, only the time at the
    #: deployed memory above): what its time at another memory is made of (`worker_seconds_at`).
    worker_wall_seconds_per_occurrence: float = 0.0
    worker_cpu_seconds_per_occurrence: float = 0.0

    def worker_seconds_at(self, memory_mb: int) -> float:
        """The worker's time per occurrence at `memory_mb`: its wall time plus its CPU time stretched to that memory's
        share of a vCPU (as `worker_seconds_per_occurrence` is at the deployed memory)."""
        if not self.worker_wall_seconds_per_occurrence:
            return self.worker_seconds_per_occurrence
        stretch = cpu_stretch(memory_mb)
        return self.worker_wall_seconds_per_occurrence + self.worker_cpu_seconds_per_occurrence * (stretch - 1)

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
        worker_wall = sum((functions["worker"].get("invocation_seconds") or {}).values())
        worker_cpu = sum((functions["worker"].get("cpu_seconds") or {}).values())
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
            worker_wall_seconds_per_occurrence=worker_wall,
            worker_cpu_seconds_per_occurrence=worker_cpu,
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
    #: What the stack's other functions reserve of the account's concurrency (the API's 50 and the sweeper's 16): a
    #: row that needs more than the quota leaves for the workers names the quota it needs.
    reserved_elsewhere: int = 66
    #: The deployed defaults (scheduler.schema, what cdk/punctual_cdk/config.py deploys): messages per worker
    #: invocation, and the standard-mode mapping's MaximumConcurrency (a pre-scaled deployment's provisioned mapping
    #: has none).
    batch_size: int = WORKER_BATCH_SIZE
    #: Occurrences a message carries (scheduler.core.execution.packing): full messages, the herd's occurrences of each
    #: tenant being due together.
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
    #: The fan-out (scheduler.core.capacity.fan_out): the sweeps a tick starts begin this long after it (an
    #: asynchronous invoke and a cold start), and a tick runs at most `max_fan_out` sweeps (`fan_out_max_sweeps`'
    #: bound), each at most `max_sweep_concurrency` buckets at once, over at most `max_shards` shards (the settings'
    #: bounds).
    fan_out_start_seconds: float = 1.5
    max_fan_out: int = 100
    max_sweep_concurrency: int = 64
    max_shards: int = 4096

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
            f"a tick's fan-out sweeps start {self.fan_out_start_seconds} s after it (asynchronous invoke and cold "
            f"start); at most {self.max_fan_out} sweeps at once, {self.max_sweep_concurrency} buckets each, "
            f"{self.max_shards:,} shards",
            "the herd is spread over enough tenants that no tenant's budgets (dispatch rate, execution slots) hold "
            "it back; targets answer within the measured worker time",
            "AWS latencies equal the emulators' (the measured times come from DynamoDB Local and moto)",
        ]
