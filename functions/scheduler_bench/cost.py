"""Scenario 1: AWS request units per fired occurrence, from submit to SUCCEEDED, priced per million fires.

The real services run in this process on metered clients with a virtual clock: the API creates the jobs, the
sweeper runs once per virtual minute (as EventBridge triggers it), and the worker handles each SQS batch at its
fire time. SQS delays are zeroed because the clock is virtual (a request costs the same whatever its delay).

Each timeline runs twice on fresh tables: with the jobs, and without them (same sweeps). The difference is the
marginal spend of the jobs; the run without them is the fixed cost of sweeping every minute.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from scheduler.composition import Configs
from scheduler.core.jobs.service import Created, Submission
from scheduler.core.model.job import JobSpec, RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.schedules import next_occurrence
from scheduler.core.model.timefmt import rfc3339
from scheduler.settings import Settings
from scheduler_bench import prices
from scheduler_bench.cloudwatch import LogLines
from scheduler_bench.environment import create_resources, delete_resources
from scheduler_bench.metering import Meter
from scheduler_bench.receiver import Receiver
from scheduler_bench.services import VirtualClock, build, client, drain, flowing, settings_for, sweep, utc_minute
from scheduler_bench.spend import Totals

PHASES = ("api", "sweeper", "worker")
SIGNING_SECRET = "bench-signing-secret"


@dataclass(frozen=True)
class CostConfig:
    """How many jobs of each kind, how many fires per recurring job, and the worker batch sizes to price."""

    one_shot_jobs: int = 50
    recurring_jobs: int = 10
    recurring_occurrences: int = 10
    #: Messages per worker invocation: 10 when busy (a full SQS batch), 1 when quiet.
    batch_sizes: tuple[int, ...] = (10, 1)
    #: One-shot jobs due within one second (the herd: full pages, full batches, shared landing groups); 0: none.
    herd_jobs: int = 500
    #: Recurring jobs (rate 1/min) whose fires fall within one second of each minute, fired `herd_occurrences`
    #: times each (the recurring herd: full pages and batches every minute); 0: none.
    recurring_herd_jobs: int = 300
    herd_occurrences: int = 2


@dataclass(frozen=True)
class Variant:
    """The deployed code with one optional cost mechanism changed: `settings` overrides Settings fields, `dispatch`
    DispatchConfig fields (for the mechanisms without a setting). The baseline changes nothing."""

    name: str
    what: str
    settings: dict[str, Any] = field(default_factory=dict)
    dispatch: dict[str, Any] = field(default_factory=dict)

    def configure(self, settings: Settings) -> tuple[Settings, Configs]:
        """The settings and core configuration of this variant, from the run's `settings`."""
        changed = settings.model_copy(update=self.settings) if self.settings else settings
        configs = Configs.of(changed)
        if self.dispatch:
            configs = replace(configs, dispatch=replace(configs.dispatch, **self.dispatch))
        return changed, configs


#: Execution slots for the tenant in the `slots` variant: high enough that no occurrence is refused one (a herd's
#: batch runs up to 100 at once), so that it measures what taking and giving back a slot costs, not a queue.
SLOTS_LIMIT = 1_000

#: What `--variants` can compare (docs/cost.md, "Mechanisms and their verdicts"): the deployed defaults, and each
#: optional cost mechanism turned off - or, for execution slots (off unless configured), on.
VARIANTS = {
    v.name: v
    for v in (
        Variant("baseline", "as deployed"),
        Variant("one-per-message", "one occurrence a message", settings={"occurrences_per_message": 1}),
        Variant("no-job-copy", "every worker reads its job", dispatch={"job_copy_max_bytes": 0}),
        Variant("no-landing", "sends at once, not timed to land on time", dispatch={"landing_window": None}),
        Variant(
            "botocore-calls",
            "every AWS call through botocore's pipeline (no fast path)",
            settings={"fast_aws_calls": False},
        ),
        Variant(
            "slots",
            f"execution slots for the tenant (limit {SLOTS_LIMIT:,})",
            settings={"tenant_max_concurrency": SLOTS_LIMIT},
        ),
    )
}
BASELINE = VARIANTS["baseline"]


#: The kinds of timeline, each with the milliseconds its jobs' first fire times spread over (a minute; a herd's second).
SPREAD_MS = {"one_shot": 60_000, "recurring": 60_000, "one_shot_herd": 1_000, "recurring_herd": 1_000}


def _recurring(kind: str) -> bool:
    return kind.startswith("recurring")


def spread(first: datetime, index: int, within_ms: int = 60_000) -> datetime:
    """Job `index`'s first fire time: within `within_ms` of `first` (the minute; the herd's second), to the
    millisecond, as real jobs' fire times fall (created at arbitrary instants with `delay_seconds`, or `at` any
    instant): not all on a whole second, which would make every SQS delay land exactly on time and hide the
    sub-second wait. (7,919 is prime to 60,000 and 1,000: the first `within_ms` jobs get distinct instants.)"""
    return first + timedelta(milliseconds=(index * 7_919) % within_ms)


def _spec(
    kind: str, url: str, first: datetime, occurrences: int, flow_control: dict[str, Any] | None = None
) -> tuple[JobSpec, dict[str, Any]]:
    if not _recurring(kind):
        schedule: dict[str, Any] = {"type": "once", "at": rfc3339(first)}
    else:
        end = first + timedelta(minutes=occurrences - 1)
        schedule = {"type": "rate", "every_seconds": 60, "start_at": rfc3339(first), "end_at": rfc3339(end)}
    body = {"schedule": schedule, "target": {"type": "http", "url": url}, "payload": {"bench": kind}}
    if flow_control is not None:
        body["flow_control"] = flow_control
    return JobSpec.model_validate(body), body


@dataclass(frozen=True)
class _Fresh:
    """Fresh tables and the services on them: metered clients, a virtual clock at the current minute, the
    watermark there (the steady state: a first sweep would begin 10 minutes back)."""

    meter: Meter
    settings: Any
    services: Any
    clock: VirtualClock
    start: datetime
    plain: Any  # an unmetered DynamoDB client, to read what happened


@contextmanager
def _fresh(prefix: str, receiver: Receiver, variant: Variant = BASELINE) -> Iterator[_Fresh]:
    """A `_Fresh` on new tables named `prefix...`, deleted afterwards, with the services of `variant`; the
    receiver's CPU is the target's, not the functions'."""
    meter = Meter()
    meter.zero_delays = True
    meter.cpu_elsewhere = receiver.cpu_seconds
    plain = client("dynamodb")
    resources = create_resources(f"{prefix}{uuid.uuid4().hex[:10]}", plain, client("sqs"), client("events"))
    try:
        settings, configs = variant.configure(settings_for(resources, SIGNING_SECRET, 1_000_000))
        start = utc_minute(datetime.now(UTC))
        clock = VirtualClock(start)
        meter.clock = clock  # the senders' (api and sweeper) clock: when each message lands
        metered = client("dynamodb", meter), client("sqs", meter), client("events", meter)
        services = build(settings, *metered, clock, SIGNING_SECRET, metrics=meter.metrics, configs=configs)
        services.timers.init_watermark(start)
        with logged(meter):
            yield _Fresh(meter, settings, services, clock, start, plain)
    finally:
        delete_resources(resources, plain, client("sqs"), client("events"))


@contextmanager
def logged(meter: Meter) -> Iterator[None]:
    """Count the lines the functions' core writes at the deployed log level (INFO), as CloudWatch Logs bills them."""
    logger = logging.getLogger("scheduler")
    handler, level = LogLines(meter, logging.INFO), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _timeline(
    kind: str,
    jobs: int,
    occurrences: int,
    batch_size: int,
    receiver: Receiver,
    with_jobs: bool,
    variant: Variant = BASELINE,
    flow_control: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One virtual timeline on fresh tables; returns per-phase totals and what fired. With `flow_control`, every
    job names that flow-control key (`scheduler_bench.flow_isolation` prices what a key adds)."""
    with _fresh("bc", receiver, variant) as fresh:
        meter, settings, services, clock, start, plain = (
            fresh.meter,
            fresh.settings,
            fresh.services,
            fresh.clock,
            fresh.start,
            fresh.plain,
        )
        # Warm up to the steady state: one sweep from the watermark at the start.
        with meter.phase("warmup"), flowing(clock):
            services.sweeper.sweep(clock.now() + timedelta(seconds=60))
        # Far enough ahead that the API writes the timer to its bucket (not near: beyond look-ahead + margin).
        first = start + timedelta(minutes=9)
        last = first + timedelta(minutes=(occurrences - 1) if _recurring(kind) else 0)
        meter.reset()
        services.sweeper_waits.reset()
        clock.set(start + timedelta(minutes=1, seconds=5))
        job_ids: list[tuple[str, JobSpec, datetime]] = []
        if with_jobs:
            for index in range(jobs):
                job_first = spread(first, index, SPREAD_MS[kind])
                spec, body = _spec(kind, receiver.url, job_first, occurrences, flow_control)
                with meter.invocation("api"):
                    created = services.job_service.create("bench", spec, None, body)
                job_ids.append((created.job.job_id, spec, job_first))
        sweeps = 0
        minute = start + timedelta(minutes=2, seconds=1)
        end = last + timedelta(minutes=1)
        while minute <= end:
            clock.set(minute)
            sweep(services, meter)
            sweeps += 1
            drain(services, meter, batch_size)
            minute += timedelta(minutes=1)
        if services.kept:
            _run_kept_again(services, meter, batch_size)
        # What fired: every expected occurrence reached SUCCEEDED (read without the meter).
        expected = []
        for job_id, spec, job_first in job_ids:
            job_last = job_first + (last - first)
            at: datetime | None = job_first
            while at is not None and at <= job_last:
                expected.append(occurrence_key(job_id, at))
                at = next_occurrence(spec.schedule, at, job_first) if _recurring(kind) else None
        states: dict[str, int] = {}
        for key in expected:
            item = plain.get_item(TableName=settings.executions_table, Key={"PK": {"S": key}}, ConsistentRead=True)
            state = item.get("Item", {}).get("state", {}).get("S", "MISSING")
            states[state] = states.get(state, 0) + 1
        sweeps_run = meter.invocations.get("sweeper", [])
        durations = [(i.billed, i.records) for i in sweeps_run]
        walls = [(i.seconds, i.records) for i in sweeps_run]
        return {
            "totals": {phase: meter.totals({phase}) for phase in PHASES},
            "sweeper_durations": durations,
            "sweeper_walls": walls,
            "sweeps": sweeps,
            "expected_occurrences": len(expected),
            "succeeded": states.get(RunState.SUCCEEDED.value, 0),
            "states": states,
            "kept_messages": services.kept,
            "worker_wait_seconds": sum(services.worker_clock.batch_waits),
            "sweeper_wait_seconds": services.sweeper_waits.seconds,
        }


def _run_kept_again(services: Any, meter: Meter, batch_size: int, timeout: float = 60.0) -> None:
    """The messages a worker kept (a throttled attempt: a flow-control key's start pacing or slots, a tenant's
    slots) are hidden on the queue for whole seconds of real time; as on AWS, they come back then and run again,
    their receives and attempts billed. Drains until the ready queue is empty (or `timeout` seconds), the worker's
    clock moving on by the real time waited."""
    sqs, url = client("sqs"), services.settings.ready_queue_url
    names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    names.append("ApproximateNumberOfMessagesNotVisible")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        if not sum(int(attributes.get(name, 0)) for name in names):
            return
        time.sleep(0.5)
        services.worker_clock.advance(0.5)
        drain(services, meter, batch_size)


#: Jobs per `POST /v1/jobs/batch` request in the batched-submit measurement (the endpoint's limit).
BATCH_SUBMIT = 25


def _batch_submit(jobs: int, receiver: Receiver, variant: Variant = BASELINE) -> dict[str, Any]:
    """What submitting one-shot jobs 25 a request costs per job: `JobService.create_many` of 25 in one api
    invocation, as `POST /v1/jobs/batch` calls it, metered on fresh tables (the same jobs as the cost timeline's,
    far enough ahead that each timer is written to its bucket)."""
    with _fresh("bb", receiver, variant) as fresh:
        meter, services, clock, start = fresh.meter, fresh.services, fresh.clock, fresh.start
        first = start + timedelta(minutes=9)
        clock.set(start + timedelta(minutes=1, seconds=5))
        created = 0
        for offset in range(0, jobs, BATCH_SUBMIT):
            submissions = []
            for index in range(offset, min(jobs, offset + BATCH_SUBMIT)):
                spec, body = _spec("one_shot", receiver.url, spread(first, index), 1)
                submissions.append(Submission(spec, None, body))
            with meter.invocation("api"):
                answers = services.job_service.create_many("bench", submissions)
            created += sum(1 for answer in answers if isinstance(answer, Created))
        totals = meter.totals({"api"})
        return {
            "jobs": jobs,
            "created": created,
            "jobs_per_request": BATCH_SUBMIT,
            "per_job": totals.scaled(1 / max(1, created)),
        }


def _per_fire(marginal: dict[str, Totals], fires: int) -> dict[str, Any]:
    """Per-fire quantities by function, and their sum."""
    by_function = {phase: totals.scaled(1 / fires) for phase, totals in marginal.items()}
    out: dict[str, Any] = {"by_function": by_function}
    for name in ("read_units", "write_units", "transactional_write_units", "index_write_units", "estimated_units",
                 "items_read", "dynamodb_calls", "sqs_requests", "sqs_billed_requests", "events_billed",
                 "log_events", "log_bytes"):  # fmt: skip
        out[name] = sum(by_function[p][name] for p in PHASES)
    out["lambda_invocations"] = {p: by_function[p]["invocations"].get(p, 0.0) for p in PHASES}
    out["lambda_billed_seconds"] = {p: by_function[p]["billed_seconds"].get(p, 0.0) for p in PHASES}
    out["lambda_cpu_seconds"] = {p: by_function[p]["cpu_seconds"].get(p, 0.0) for p in PHASES}
    return out


def priced(per_fire: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Dollars per million fires: the fire path (sweeper + worker) and with the submission (api + API Gateway)."""
    fire_path = ("sweeper", "worker")
    bf = per_fire["by_function"]

    def part(phases: tuple[str, ...], api_requests: float) -> dict[str, float]:
        return prices.per_million(
            read_units=sum(bf[p]["read_units"] for p in phases),
            write_units=sum(bf[p]["write_units"] for p in phases),
            sqs_requests=sum(bf[p]["sqs_billed_requests"] for p in phases),
            lambda_requests=sum(per_fire["lambda_invocations"][p] for p in phases),
            lambda_gb_seconds=prices.gb_seconds({p: per_fire["lambda_billed_seconds"][p] for p in phases}),
            api_requests=api_requests,
            completion_events=sum(bf[p]["events_billed"] for p in phases),
            log_bytes=sum(bf[p].get("log_bytes", 0.0) for p in phases) + api_requests * prices.API_ACCESS_LOG_BYTES,
        )

    return {
        "fire_path": part(fire_path, 0.0),
        "with_submission": part(PHASES, per_fire["lambda_invocations"]["api"]),
    }


def repriced(results: dict[str, Any]) -> dict[str, Any]:
    """An earlier run's cost section priced at today's prices and memory sizes (from its recorded per-fire
    quantities), so that a before/after comparison differs only in what was measured."""
    out = {**results}
    for kind in SPREAD_MS:
        out[kind] = [{**run, "per_million_fires_usd": priced(run["per_fire"])} for run in results.get(kind, [])]
    return out


def run(config: CostConfig, log: Any, variant: Variant = BASELINE) -> dict[str, Any]:
    """Both job kinds, each at every batch size, plus the job-less baselines, on `variant`'s services; returns the
    results section."""
    receiver = Receiver().start()
    try:
        results: dict[str, Any] = {"config": config.__dict__ | {"batch_sizes": list(config.batch_sizes)}}
        results["variant"] = {"name": variant.name, "what": variant.what}
        # The sweeper sweeps this many buckets at once (its billed time is wall time: the capacity model divides
        # by it to get one bucket chain's time per fire).
        defaults = Settings()
        results["sweep_buckets_at_once"] = min(defaults.sweep_concurrency, defaults.shard_count)
        fixed: dict[str, Any] | None = None
        timelines = [
            ("one_shot", config.one_shot_jobs, 1, config.batch_sizes),
            ("recurring", config.recurring_jobs, config.recurring_occurrences, config.batch_sizes),
        ]
        if config.herd_jobs:  # a herd is busy by definition: full batches only
            timelines.append(("one_shot_herd", config.herd_jobs, 1, (max(config.batch_sizes),)))
        if config.recurring_herd_jobs:
            herd = ("recurring_herd", config.recurring_herd_jobs, config.herd_occurrences, (max(config.batch_sizes),))
            timelines.append(herd)
        for kind, jobs, occurrences, batch_sizes in timelines:
            log(f"cost ({variant.name}): {kind}: baseline timeline without jobs")
            baseline = _timeline(kind, 0, occurrences, 10, receiver, with_jobs=False, variant=variant)
            if fixed is None:
                fixed = _fixed(baseline)
            runs = []
            for batch_size in batch_sizes:
                log(
                    f"cost ({variant.name}): {kind}: {jobs} jobs x {occurrences} occurrence(s), batches of {batch_size}"
                )
                measured = _timeline(kind, jobs, occurrences, batch_size, receiver, with_jobs=True, variant=variant)
                fires = measured["succeeded"]
                marginal = {p: measured["totals"][p].minus(baseline["totals"][p]) for p in PHASES}
                marginal["sweeper"].billed_seconds["sweeper"] = _marginal_sweep_seconds(measured["sweeper_durations"])
                marginal["sweeper"].invocation_seconds["sweeper"] = _marginal_sweep_seconds(measured["sweeper_walls"])
                per_fire = _per_fire(marginal, max(1, fires))
                # Of the worker's billed seconds: waiting out the sub-second remainder of messages that landed early.
                per_fire["worker_wait_seconds"] = measured["worker_wait_seconds"] / max(1, fires)
                # Of the sweeper's: its sends waiting to land on time, summed over the buckets it swept at once (so,
                # per fire, what one bucket's chain waited: the capacity model takes it out of the chain's work).
                sweeper_waits = measured["sweeper_wait_seconds"] - baseline["sweeper_wait_seconds"]
                per_fire["sweeper_wait_seconds"] = max(0.0, sweeper_waits) / max(1, fires)
                runs.append(
                    {
                        "batch_size": batch_size,
                        "jobs": jobs,
                        "occurrences_per_job": occurrences,
                        "expected_occurrences": measured["expected_occurrences"],
                        "fires": fires,
                        "states": measured["states"],
                        "kept_messages": measured["kept_messages"],
                        "sweeps": measured["sweeps"],
                        "per_fire": per_fire,
                        "per_million_fires_usd": priced(per_fire),
                    }
                )
            results[kind] = runs
        assert fixed is not None
        results["fixed"] = fixed
        log(f"cost ({variant.name}): submitting {config.one_shot_jobs} one-shot jobs {BATCH_SUBMIT} a request")
        results["batch_submit"] = _batch_submit(config.one_shot_jobs, receiver, variant)
        quiet = min(
            (r for r in results["one_shot"] if r["batch_size"] == min(config.batch_sizes)),
            key=lambda r: r["batch_size"],
        )
        worker_seconds = quiet["per_fire"]["lambda_billed_seconds"]["worker"]
        results["alternatives"] = prices.eventbridge_rows(worker_seconds)
        results["duplicates_at_receiver"] = receiver.summary()
        return results
    finally:
        receiver.stop()


def _fixed(baseline: dict[str, Any]) -> dict[str, Any]:
    """The cost of sweeping every minute with nothing due, per sweep and per month."""
    sweeper: Totals = baseline["totals"]["sweeper"]
    sweeps = max(1, baseline["sweeps"])
    per_sweep = sweeper.scaled(1 / sweeps)
    seconds = per_sweep["billed_seconds"].get("sweeper", 0.0)
    per_month = prices.per_million(
        read_units=per_sweep["read_units"],
        write_units=per_sweep["write_units"],
        sqs_requests=per_sweep["sqs_billed_requests"],
        lambda_requests=1,
        lambda_gb_seconds=prices.gb_seconds({"sweeper": seconds}),
        completion_events=per_sweep["events_billed"],
    )
    scale = prices.MINUTES_PER_MONTH / 1e6
    sweeper_month = {k: v * scale for k, v in per_month.items()}
    idle_polls = prices.IDLE_POLLS_PER_MINUTE * prices.MINUTES_PER_MONTH
    return {
        "sweeps_measured": sweeps,
        "per_sweep": per_sweep,
        "sweeper_per_month_usd": sweeper_month,
        "idle_worker_polling_per_month_usd": idle_polls * prices.PRICES["sqs_request"],
        "idle_worker_polling_assumption": (
            f"{prices.IDLE_POLLS_PER_MINUTE} empty long polls a minute (5 event source mapping pollers, 20 s each)"
        ),
    }


def _marginal_sweep_seconds(durations: list[tuple[float, int]]) -> float:
    """The sweeper time the jobs added: each sweep that dispatched, less the median sweep that did not, in
    the same run. (Subtracting the job-less run's time instead would mostly measure the machine's noise.)"""
    empty = sorted(seconds for seconds, dispatched in durations if dispatched == 0)
    typical = empty[len(empty) // 2] if empty else 0.0
    return sum(max(0.0, seconds - typical) for seconds, dispatched in durations if dispatched > 0)
