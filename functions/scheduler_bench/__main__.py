"""`python -m scheduler_bench` (what `scripts/bench` runs): every scenario, then bench/results.json,
bench/results.md and bench/lateness.png.

    python -m scheduler_bench                 # quick sizes (pending 1k/10k/100k), burst of 1,000
    python -m scheduler_bench --full          # pending 10k/100k/1M (long: loading 1M items takes a while)
    python -m scheduler_bench --burst 20 --pending 200 --due 20 --only cost,sweep,burst --out /tmp/b
    python -m scheduler_bench --only cost --variants baseline,one-per-message,no-job-copy,no-landing,slots
    python -m scheduler_bench --only sweepers --sweepers-jobs 4000 --sweepers-rounds 3   # 1 vs 2 sweeper processes
    python -m scheduler_bench --only flow     # a held flow-control key's isolation, and what a key costs a fire
    python -m scheduler_bench --only sweep-cpu  # the sweep's CPU per fire, botocore and the fast path side by side
    python -m scheduler_bench --only empty-buckets  # what an empty bucket costs a minute, at 8, 64 and 256 shards

Runs against AWS_ENDPOINT_URL_* when set (another emulator, a recording proxy, a real account: then it creates
and deletes its own tables and queues there); otherwise it starts DynamoDB Local and ministack and stops them.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scheduler_bench import (
    burst,
    capacity,
    cost,
    empty_buckets,
    emulator_latency,
    environment,
    flow_isolation,
    plot,
    prices,
    report,
    sweep_cpu,
    sweep_scaling,
    sweepers,
)
from scheduler_bench.capacity_inputs import Measured
from scheduler_bench.dynamodb_billing import probe_transactions
from scheduler_bench.services import client

QUICK_PENDING = (1_000, 10_000, 100_000)
FULL_PENDING = (10_000, 100_000, 1_000_000)
SCENARIOS = ("cost", "sweep", "burst", "emulator", "sweepers", "flow", "sweep-cpu", "empty-buckets", "capacity")


def log(message: str) -> None:
    """Progress on stderr, timestamped (stdout stays free)."""
    print(f"{datetime.now(UTC):%H:%M:%S} {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; sizes must be positive and scenarios known."""
    parser = argparse.ArgumentParser(prog="scheduler_bench", description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="pending sets of 1k/10k/100k (the default)")
    size.add_argument("--full", action="store_true", help="pending sets of 10k/100k/1M")
    parser.add_argument("--pending", help="comma-separated pending-set sizes (overrides --quick/--full)")
    parser.add_argument("--due", type=int, default=1000, help="jobs due at once in the sweep scenario (1000)")
    parser.add_argument(
        "--burst", default="200,1000,5000", help="herd sizes: jobs due in the same second (200,1000,5000)"
    )
    parser.add_argument("--jitter", type=int, default=10, help="jitter_seconds of the jittered burst (10)")
    parser.add_argument("--workers", type=int, default=2, help="worker pollers of the local stack at least (2)")
    parser.add_argument("--max-workers", type=int, default=4, help="and at most, scaled with the backlog (4)")
    parser.add_argument(
        "--peer-processes", default="1,2", help="APScheduler processes sharing the store per peer run (1,2; '' none)"
    )
    parser.add_argument(
        "--sweep-concurrency",
        default="8",
        help="the local sweeper's buckets swept at once, one herd run each (8; '1,8' compares before/after)",
    )
    parser.add_argument("--submit-jobs", type=int, default=400, help="jobs POSTed for the submit rate (400; 0 none)")
    parser.add_argument("--cost-jobs", type=int, default=50, help="one-shot jobs in the cost scenario (50)")
    parser.add_argument("--recurring-jobs", type=int, default=10, help="recurring jobs in the cost scenario (10)")
    parser.add_argument(
        "--herd-jobs", type=int, default=500, help="one-shot jobs due in one second in the cost scenario (500; 0 none)"
    )
    parser.add_argument(
        "--recurring-herd-jobs",
        type=int,
        default=300,
        help="recurring jobs (rate 1/min) due in one second of each minute in the cost scenario (300; 0 none)",
    )
    parser.add_argument("--occurrences", type=int, default=10, help="fires per recurring job (10)")
    parser.add_argument(
        "--emulator-depths", default="0,1000,10000", help="queue depths for ministack's SQS latency (0,1000,10000)"
    )
    parser.add_argument(
        "--moto-depths", default="0,1000,2000", help="queue depths for moto's, for comparison ('' skips moto)"
    )
    parser.add_argument(
        "--sweepers-jobs", type=int, default=4000, help="jobs due within one minute in the sweepers scenario (4000)"
    )
    parser.add_argument("--sweepers-shards", type=int, default=32, help="their shards (32)")
    parser.add_argument(
        "--sweepers-processes", default="1,2", help="sweeper process counts compared, one run each per round (1,2)"
    )
    parser.add_argument("--sweepers-rounds", type=int, default=3, help="runs of each process count, alternating (3)")
    parser.add_argument(
        "--capacity-sizes", default="10000,50000,500000", help="herds the capacity model simulates (10000,50000,500000)"
    )
    parser.add_argument(
        "--capacity-sustained",
        default="12000000,600",
        help="occurrences,seconds of the sustained rate the capacity model prices (12000000,600: 20,000/s for 10 "
        "minutes); 0: none",
    )
    parser.add_argument(
        "--empty-buckets-shards", default="8,64,256", help="shard counts the empty-buckets scenario compares (8,64,256)"
    )
    parser.add_argument("--empty-buckets-minutes", type=int, default=3, help="its steady minutes a shard count (3)")
    parser.add_argument("--empty-buckets-rounds", type=int, default=2, help="its rounds, alternating (2)")
    parser.add_argument(
        "--flow-held",
        type=int,
        default=1000,
        help="occurrences of the held key due at once in the flow scenario (1000)",
    )
    parser.add_argument("--flow-rate", type=int, default=5, help="the held key's calls a second (5)")
    parser.add_argument(
        "--flow-unrelated", type=int, default=200, help="unrelated occurrences due at once, at each moment (200)"
    )
    parser.add_argument(
        "--flow-after", type=float, default=80.0, help="seconds into the key's drain the unrelated fall due (80)"
    )
    parser.add_argument(
        "--flow-cost-jobs", type=int, default=200, help="the flow cost runs' herd, with and without a key (200; 0 none)"
    )
    parser.add_argument(
        "--flow-cost-spreads",
        default="quiet",
        help=f"the flow cost runs' spreads: {','.join(flow_isolation.COST_SPREADS)} (quiet)",
    )
    parser.add_argument(
        "--near-term",
        type=int,
        default=0,
        help="a near-term herd of this many posted through the API 75 s before it falls due, after the swept ones (0)",
    )
    parser.add_argument(
        "--sweep-cpu-jobs",
        type=int,
        default=5000,
        help="the herd one sweep dispatches in the sweep-cpu scenario (5000)",
    )
    parser.add_argument("--sweep-cpu-rounds", type=int, default=3, help="its rounds, each with both variants (3)")
    parser.add_argument(
        "--keep-runs",
        action="store_true",
        help="keep the previous results.json's herd runs of other sizes (run the herd sizes in several goes)",
    )
    parser.add_argument("--only", default=",".join(SCENARIOS), help=f"scenarios to run: {','.join(SCENARIOS)}")
    parser.add_argument("--out", type=Path, default=environment.ROOT / "bench", help="output folder (bench/)")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="an earlier results.json whose cost figures results.md shows beside this run's (before/after)",
    )
    parser.add_argument(
        "--variants",
        default="baseline",
        help="the cost scenario once per variant, each on fresh tables, side by side in results.md: "
        f"{','.join(cost.VARIANTS)} (baseline: as deployed, always run first)",
    )
    args = parser.parse_args(argv)
    unknown = set(args.only.split(",")) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s) {sorted(unknown)}; choose from {', '.join(SCENARIOS)}")
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown_variants = [name for name in names if name not in cost.VARIANTS]
    if unknown_variants:
        parser.error(f"unknown variant(s) {unknown_variants}; choose from {', '.join(cost.VARIANTS)}")
    args.cost_variants = [cost.BASELINE] + [cost.VARIANTS[name] for name in dict.fromkeys(names) if name != "baseline"]
    try:
        args.burst_sizes = _sizes(args.burst)
        args.peer_counts = _sizes(args.peer_processes)
        args.sweep_counts = _sizes(args.sweep_concurrency)
        args.sweeper_processes = _sizes(args.sweepers_processes)
    except ValueError:
        parser.error(
            "--burst, --peer-processes, --sweep-concurrency and --sweepers-processes take comma-separated whole numbers"
        )
    if not args.sweeper_processes or min(args.sweeper_processes) < 1:
        parser.error("--sweepers-processes takes whole numbers of at least 1")
    if min(args.flow_held, args.flow_unrelated) < 1 or args.flow_cost_jobs < 0 or args.flow_after < 0:
        parser.error(
            "--flow-held and --flow-unrelated must be at least 1, --flow-cost-jobs and --flow-after at least 0"
        )
    args.flow_spreads = tuple(name.strip() for name in args.flow_cost_spreads.split(",") if name.strip())
    unknown_spreads = [name for name in args.flow_spreads if name not in flow_isolation.COST_SPREADS]
    if unknown_spreads:
        parser.error(f"unknown spread(s) {unknown_spreads}; choose from {', '.join(flow_isolation.COST_SPREADS)}")
    if not 0 < args.flow_rate <= 500:
        parser.error(
            f"--flow-rate is whole calls a second, at least 1 and at most 500 (a key's limit), not {args.flow_rate}"
        )
    if min(args.sweepers_jobs, args.sweepers_shards, args.sweepers_rounds) < 1:
        parser.error("--sweepers-jobs, --sweepers-shards and --sweepers-rounds must be at least 1")
    if args.near_term < 0:
        parser.error("--near-term takes a whole number of jobs, at least 0")
    if min(args.sweep_cpu_jobs, args.sweep_cpu_rounds) < 1:
        parser.error("--sweep-cpu-jobs and --sweep-cpu-rounds must be at least 1")
    if not args.sweep_counts or min(args.sweep_counts) < 1:
        parser.error("--sweep-concurrency takes whole numbers of at least 1")
    smallest = min(args.due, *args.burst_sizes, args.cost_jobs, args.recurring_jobs, args.occurrences, args.workers)
    if (
        smallest < 1
        or args.herd_jobs < 0
        or args.recurring_herd_jobs < 0
        or args.max_workers < args.workers
        or not args.burst_sizes
    ):
        parser.error("sizes must be at least 1 (and --max-workers at least --workers)")
    sizes = args.capacity_sizes.split(",")
    if not all(size.strip().isdigit() and int(size) > 0 for size in sizes):
        parser.error(f"--capacity-sizes must be positive whole numbers, comma-separated, not {args.capacity_sizes!r}")
    sustained = args.capacity_sustained.split(",")
    if args.capacity_sustained != "0" and not (
        len(sustained) == 2 and all(part.strip().isdigit() and int(part) > 0 for part in sustained)
    ):
        parser.error(f"--capacity-sustained must be occurrences,seconds or 0, not {args.capacity_sustained!r}")
    shards = args.empty_buckets_shards.split(",")
    if (
        not all(s.strip().isdigit() and int(s) > 0 for s in shards)
        or min(args.empty_buckets_minutes, args.empty_buckets_rounds) < 1
    ):
        parser.error("--empty-buckets-shards must be positive whole numbers, its minutes and rounds at least 1")
    return args


def _sustained(text: str) -> tuple[int, float] | None:
    if text == "0":
        return None
    occurrences, seconds = text.split(",")
    return int(occurrences), float(seconds)


def _scenario(name: str, results: dict[str, Any], key: str, body: Callable[[], dict[str, Any]]) -> bool:
    """Run one scenario; a failure is recorded in the results (the others still run). Returns success."""
    began = time.perf_counter()
    load = load_average()
    try:
        results[key] = body()
        results[key]["seconds"] = time.perf_counter() - began
        results[key]["load_average_before_after"] = [load, load_average()]
        return True
    except Exception:
        log(f"{name} failed:\n{traceback.format_exc()}")
        results[key] = {"error": traceback.format_exc(), "seconds": time.perf_counter() - began}
        return False


def _calibration() -> dict[str, Any]:
    """How this endpoint reports capacity (transactions doubled or not; empty queries)."""
    plain, sqs, events = client("dynamodb"), client("sqs"), client("events")
    resources = environment.create_resources(f"bk{uuid.uuid4().hex[:10]}", plain, sqs, events)
    try:
        return probe_transactions(plain, resources.jobs_table)
    finally:
        environment.delete_resources(resources, plain, sqs, events)


def notes(results: dict[str, Any]) -> list[str]:
    """What was measured and what was computed; the caveats a reader needs."""
    calibration = results.get("calibration", {})
    out = [
        "DynamoDB units are summed from ConsumedCapacity (ReturnConsumedCapacity=INDEXES added to every call by a "
        "botocore hook), index writes included.",
        "Transactions: AWS bills 2 write units per KB of each item. This endpoint reported "
        f"{calibration.get('transaction_of_three_small_items', {}).get('reported_table_units', '?')} units for a "
        "transaction of three small items (AWS: 6), so the meter computes every transaction's table units from the "
        "items' sizes (an Update's item read back after the write, outside the timed invocation). A transaction's "
        "index units are as reported (DynamoDB Local doubles them; whether AWS does is not documented: an upper "
        "bound).",
        "Units the endpoint does not report are computed from the DynamoDB rules and counted as estimated: failed "
        "conditional writes (larger of old and new item, 1 KB steps, at least 1) and the minimum read unit AWS "
        "bills for an empty Query (DynamoDB Local reports 0).",
        "SQS requests are counted per call and billed per 64 KB chunk of payload; the worker's empty receives are "
        "idle polling, counted as a fixed monthly cost, not per fire.",
        "Cost scenario: the real api, sweeper and worker code run in-process on a virtual clock (one sweep per "
        "virtual minute, as EventBridge triggers it). Fire times are spread over the minute to the millisecond, as "
        "real jobs' are. SQS DelaySeconds are zeroed on the wire (a request costs the same whatever its delay), but "
        "each message's landing time is kept (virtual send time + its whole-second delay): a batch is handed to the "
        "worker when its messages have landed, and the worker waits out, in real time and billed, what is left to "
        "a record's fire time, as it does inside Lambda. Per-fire figures are the run with the jobs minus the same "
        "timeline without them.",
        "Lambda: one invocation per API request, per sweep and per SQS batch; arm64 at each function's deployed "
        "memory (scheduler.schema.FUNCTION_MEMORY_MB); durations measured "
        "in-process against the emulators and rounded up to the millisecond (no cold starts; the sweeper's marginal "
        "time is each dispatching sweep less the median empty sweep). AWS latencies differ from the emulators'.",
        "Prices: us-east-1 on-demand list prices as recorded in results.json (DynamoDB $0.625/M write and $0.125/M "
        "read units, SQS $0.40/M, Lambda $0.20/M + $0.0000133334/GB-s, API Gateway REST $3.50/M, EventBridge "
        "custom events (the completion events) $1.00/M, EventBridge Scheduler $1.00/M, CloudWatch Logs ingestion "
        "$0.50/GB). Free tiers are ignored.",
        "CloudWatch Logs: every line the core logs at the deployed level (INFO), formatted as the functions write it "
        "(Powertools JSON with the Lambda context's keys, scheduler_bench.cloudwatch.LogLines), plus per invocation "
        "Lambda's START, END and REPORT lines and the EMF document of the metrics it counted; billed by the bytes "
        "ingested (log storage, $0.03/GB-month, is extra and depends on the retention).",
        "Sweep scenario: pending timers are written with BatchWriteItem into far-future buckets; the Scan baseline "
        "reads a table of the same jobs as job items (strongly consistent, like the sweep's queries).",
        "Burst: the local stack's processes on this machine against DynamoDB Local and moto; figures on AWS need a "
        "run against a real account (set AWS_ENDPOINT_URL_* / credentials accordingly).",
    ]
    rounds = results.get("sweep_scaling", {}).get("rounds", [])
    if rounds:
        rate = rounds[-1].get("items_loaded_per_second") or 0
        sizes = ", ".join(f"{r['pending']:,}" for r in rounds)
        out.append(
            f"Sizes actually run: pending {sizes}; loading ran at "
            f"{rate:,.0f} items/s here, so 1M pending (plus its 1M Scan-baseline items) takes about "
            f"{2_000_000 / max(rate, 1) / 60:.0f} minutes to load: --full runs it."
        )
    return out


def _capacity(
    results: dict[str, Any], out: Path, sizes: tuple[int, ...], sustained: tuple[int, float] | None
) -> dict[str, Any]:
    """The capacity model, driven by this run's cost figures (or, without them, by the last run's results.json)."""
    measured_from = results
    if not results.get("cost", {}).get("one_shot"):
        previous = out / "results.json"
        if not previous.exists():
            raise RuntimeError("the capacity model needs the cost scenario's figures: run it with cost")
        measured_from = json.loads(previous.read_text())
    source = f"the cost scenario of the run of {measured_from.get('started_at', '?')}"
    log("capacity: simulating the herd on AWS's scaling rules")
    herds = measured_from["cost"].get("one_shot_herd") or []
    fire_path = herds[0]["per_million_fires_usd"]["fire_path"] if herds else None
    model = capacity.run(
        Measured.from_results(measured_from, source), sizes=sizes, sustained=sustained, herd_fire_path=fire_path
    )
    samples = model.pop("samples")
    plotted = 50_000 if 50_000 in sizes else sizes[0]
    series = [
        plot.Series(f"{row['label'].upper()}: P99 {row['p99']:.1f} S", samples[key])
        for row in model["rows"]
        if (
            key := f"{row['scenario']['occurrences']}/{row['scenario']['spread_seconds']:g}/{row['scenario']['mode']}"
        ).startswith(f"{plotted}/1/")
    ]
    plot.lateness_png(out / "capacity.png", series, f"{plotted:,} OCCURRENCES DUE IN ONE SECOND ON AWS (MODEL)")
    return model


def _stop_on_signals() -> None:
    """Ctrl-C or SIGTERM unwinds through the `finally` blocks: the local stacks and the emulators this run
    started are stopped. (A background job of a non-interactive shell starts with SIGINT ignored.)"""

    def stop(signum: int, _: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, stop)


def load_average() -> list[float] | None:
    """The machine's 1/5/15-minute load: a busy shared machine slows every figure measured in seconds."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def main(argv: list[str] | None = None) -> int:
    """Run the chosen scenarios on the endpoints, write the results; 1 if a scenario failed."""
    args = parse_args(argv)
    _stop_on_signals()
    only = set(args.only.split(","))
    if args.pending:
        pending = tuple(int(x) for x in args.pending.split(",") if x.strip())
        mode = "custom"
    elif args.full:
        pending, mode = FULL_PENDING, "full"
    else:
        pending, mode = QUICK_PENDING, "quick"
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    results: dict[str, Any] = {
        "schema": 1,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": sys.argv[1:] if argv is None else argv,
        "mode": mode,
        "machine": environment.machine(),
        "versions": environment.versions(),
        "git": environment.git(),
        "prices_usd": prices.PRICES | {"lambda_memory_gb": dict(prices.LAMBDA_MEMORY_GB)},
    }
    sizes = tuple(int(x) for x in args.capacity_sizes.split(",") if x.strip())
    sustained = _sustained(args.capacity_sustained)
    if args.baseline:
        earlier = json.loads(args.baseline.read_text())
        commit = (earlier.get("git") or {}).get("commit") or "unknown"
        label = f"commit `{commit[:12]}`, run {earlier.get('finished_at', '?')}"
        if "cost" not in earlier:  # a results.json whose own baseline is wanted
            label, baseline_cost = earlier["baseline"]["label"], earlier["baseline"]["cost"]
        else:
            baseline_cost = earlier["cost"]
        results["baseline"] = {"label": label, "cost": cost.repriced(baseline_cost)}
    previous = args.out / "results.json"
    if only == {"capacity"} and previous.exists():
        # The model alone: recompute it from the recorded measurements and keep every other recorded figure.
        recorded = json.loads(previous.read_text())
        ok = _scenario("capacity", recorded, "capacity", lambda: _capacity(recorded, args.out, sizes, sustained))
        write(recorded, args.out)
        log(f"wrote the capacity model into {previous} and {args.out / 'results.md'}")
        return 0 if ok else 1
    ok = True
    if only - {"capacity"}:
        ok &= _measure(args, only, pending, results)
    if "capacity" in only:
        ok &= _scenario("capacity", results, "capacity", lambda: _capacity(results, args.out, sizes, sustained))
    results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["duration_seconds"] = time.perf_counter() - started
    carry_over(results, args.out / "results.json", only, args.keep_runs)
    results["notes"] = notes(results)
    write(results, args.out)
    log(f"wrote {args.out / 'results.json'}, {args.out / 'results.md'} and {args.out / 'lateness.png'}")
    return 0 if ok else 1


def _measure(args: argparse.Namespace, only: set[str], pending: tuple[int, ...], results: dict[str, Any]) -> bool:
    """The scenarios that run on the endpoints (started here unless AWS_ENDPOINT_URL_* name them)."""
    endpoints = environment.open_endpoints(environment.ROOT / ".local" / "logs")
    ok = True
    try:
        results["endpoints"] = endpoints.describe()
        log(f"endpoints: DynamoDB {results['endpoints']['dynamodb']}, SQS {results['endpoints']['sqs']}")
        results["calibration"] = _calibration()
        if "cost" in only:
            config = cost.CostConfig(
                args.cost_jobs,
                args.recurring_jobs,
                args.occurrences,
                herd_jobs=args.herd_jobs,
                recurring_herd_jobs=args.recurring_herd_jobs,
            )
            ok &= _scenario("cost", results, "cost", lambda: cost.run(config, log))
            variants: dict[str, Any] = {}
            for variant in args.cost_variants[1:]:
                ok &= _scenario(f"cost ({variant.name})", variants, variant.name, _cost_of(config, variant))
            if variants:
                results["cost_variants"] = variants
        if "sweep" in only:
            scaling = sweep_scaling.SweepScalingConfig(pending, args.due)
            ok &= _scenario("sweep", results, "sweep_scaling", lambda: sweep_scaling.run(scaling, log))
        if "burst" in only:
            jitters = (0, args.jitter) if args.jitter else (0,)
            bursting = burst.BurstConfig(
                args.burst_sizes,
                jitters,
                args.workers,
                args.max_workers,
                args.out / "tmp",
                args.peer_counts,
                args.submit_jobs,
                args.sweep_counts,
                near_term_jobs=args.near_term,
            )
            ok &= _scenario("burst", results, "burst", lambda: burst.run(bursting, log))
        if "sweepers" in only:
            scaling_out = sweepers.SweepersConfig(
                args.sweepers_jobs,
                args.sweepers_shards,
                args.sweeper_processes,
                args.sweepers_rounds,
                state_dir=args.out / "tmp",
            )
            ok &= _scenario("sweepers", results, "sweepers", lambda: sweepers.run(scaling_out, log))
        if "flow" in only:
            flow = flow_isolation.FlowConfig(
                held=args.flow_held,
                rate=args.flow_rate,
                unrelated=args.flow_unrelated,
                unrelated_after_seconds=args.flow_after,
                workers=args.workers,
                max_workers=args.max_workers,
                state_dir=args.out / "tmp",
                cost_jobs=args.flow_cost_jobs,
                cost_spreads=args.flow_spreads,
            )
            ok &= _scenario("flow", results, "flow_control", lambda: flow_isolation.run(flow, log))
        if "sweep-cpu" in only:
            cpu = sweep_cpu.SweepCpuConfig(jobs=args.sweep_cpu_jobs, rounds=args.sweep_cpu_rounds)
            ok &= _scenario("sweep-cpu", results, "sweep_cpu", lambda: sweep_cpu.run(cpu, log))
        if "empty-buckets" in only:
            empty = empty_buckets.EmptyBucketsConfig(
                _sizes(args.empty_buckets_shards), args.empty_buckets_minutes, args.empty_buckets_rounds
            )
            ok &= _scenario("empty-buckets", results, "empty_buckets", lambda: empty_buckets.run(empty, log))
        if "emulator" in only:
            latency = emulator_latency.EmulatorLatencyConfig(
                _sizes(args.emulator_depths), _sizes(args.moto_depths), log_dir=environment.ROOT / ".local" / "logs"
            )
            ok &= _scenario("emulator", results, "emulator_latency", lambda: emulator_latency.run(latency, log))
    finally:
        endpoints.close()
    return ok


def _cost_of(config: cost.CostConfig, variant: cost.Variant) -> Callable[[], dict[str, Any]]:
    return lambda: cost.run(config, log, variant)


def carry_over(results: dict[str, Any], previous: Path, only: set[str], keep_runs: bool = False) -> None:
    """Keep the figures of the scenarios this run did not run from the previous results.json in the same folder
    (so `--only burst` refreshes the herd without dropping the cost tables), each marked with its own run; with
    `keep_runs`, the previous herd runs of sizes this run did not run too (and its submit rate if none now)."""
    try:
        earlier = json.loads(previous.read_text())
    except (OSError, ValueError):
        return
    herd, before = results.get("burst"), earlier.get("burst") or {}
    if keep_runs and herd and "runs" in herd and "runs" in before:
        sizes = {r["jobs"] for r in herd["runs"]}
        kept_runs = [{"carried_over_from": earlier.get("finished_at"), **r} for r in before["runs"]]
        herd["runs"] = sorted([r for r in kept_runs if r["jobs"] not in sizes] + herd["runs"], key=lambda r: r["jobs"])
        herd["submit"] = herd.get("submit") or before.get("submit")
    kept = []
    for scenario, key in report.RESULT_KEYS.items():
        if scenario not in only and key in earlier and key not in results:
            first = earlier[key].get("carried_over_from") or earlier.get("finished_at")
            results[key] = {**earlier[key], "carried_over_from": first}
            kept.append(scenario)
    if kept:
        results["carried_over"] = {"scenarios": kept, "from_run": earlier.get("finished_at")}


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def write(results: dict[str, Any], out: Path) -> None:
    """results.json, results.md and lateness.png into `out`."""
    (out / "results.json").write_text(json.dumps(results, indent=2, sort_keys=False, default=str) + "\n")
    (out / "results.md").write_text(report.render(results))
    runs = results.get("burst", {}).get("runs", [])
    plotted, title = plotted_runs(runs)
    series = []
    for run in plotted:
        late = run["lateness_seconds"]
        name = "PUNCTUAL" if _ours(run) else f"APSCHEDULER X{run.get('processes', 1)}"
        label = f"{name} {run['jobs']:,}: P50 {late.get('p50', 0):.1f} P99 {late.get('p99', 0):.1f} S"
        if run["arrived"] < run["jobs"]:
            label += f" ({run['arrived']:,} OF {run['jobs']:,} IN TIME)"
        series.append(plot.Series(label, run["lateness_samples"]))
    plot.lateness_png(out / "lateness.png", series, title)


def _ours(run: dict[str, Any]) -> bool:
    return str(run.get("system", "punctual")).startswith("punctual")


def plotted_runs(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """At most four series (the plot's colours), no jitter: punctual at its two largest herds and the peer (one
    and two processes) at the punctual's middle size - or whatever of these the run has."""
    plain = [r for r in runs if r["jitter_seconds"] == 0 and r["lateness_samples"]] or [
        r for r in runs if r["lateness_samples"]
    ]
    # Of runs that differ only in the sweeper's buckets at once (a before/after), the most concurrent (as deployed).
    widest = max((int(r.get("sweep_concurrency", 8)) for r in plain if _ours(r)), default=8)
    ours = sorted(
        (r for r in plain if _ours(r) and int(r.get("sweep_concurrency", widest)) == widest), key=lambda r: r["jobs"]
    )
    sizes = sorted({r["jobs"] for r in ours})
    middle = sizes[len(sizes) // 2] if sizes else None
    peers = [r for r in plain if not _ours(r) and r["jobs"] == middle]
    chosen = (ours[-2:] + peers)[:4] if peers else ours[-4:]
    return chosen, "START LATENESS OF JOBS DUE IN ONE SECOND, NO JITTER (LOCAL STACK VS. APSCHEDULER 3)"


if __name__ == "__main__":
    sys.exit(main())
