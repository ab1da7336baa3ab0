"""The latency sections of results.md: the sweep's scaling, batching and forecast, the herds (bursts) with their
drain CPU and the submit rate, and the emulators' latency."""

from __future__ import annotations

from typing import Any

from scheduler_bench.figures import figure, table
from scheduler_bench.prices import PRICES


def _sweep(sweep: dict[str, Any]) -> list[str]:
    lines = ["## Sweep cost vs. pending set (and the Scan baseline)", ""]
    if "error" in sweep:
        return [*lines, f"Not measured: {sweep['error'].splitlines()[-1]}", ""]
    rows = []
    for r in sweep.get("rounds", []):
        s, scan = r["sweep"], r["scan"]
        rows.append(
            [
                figure(r["pending"]),
                figure(s["dispatched"]),
                figure(s["query_items_read_per_dispatched"]),
                figure(s["query_read_units_per_dispatched"], 3),
                f"{figure(s['per_dispatched']['read_units'], 3)} / {figure(s['per_dispatched']['write_units'])}",
                figure(scan["items_read_per_found"], 1),
                figure(scan["read_units_per_found"], 3),
                f"{figure(r['scan_to_sweep_read_units'], 1)}x",
                f"{figure(s['seconds'], 1)} / {figure(scan['seconds'], 1)}",
            ]
        )
    lines += table(
        [
            "Pending jobs",
            "Due now",
            "Sweep: items read / dispatched",
            "Sweep: query read units / dispatched",
            "Sweep: all read / write units per dispatched",
            "Scan: items read / due",
            "Scan: read units / due",
            "Scan / sweep read units",
            "Seconds: sweep / scan",
        ],
        rows,
    )
    lines += [
        "",
        "The sweep claims, seals and queries only the due minute's buckets: what it reads per dispatched occurrence "
        "does not grow with the pending set. The Scan baseline reads every job to find the due ones. The sweep's "
        "write units are the work of dispatching (claims, checkpoints, and each one-shot job's completion).",
        "",
    ]
    return lines


def _burst(burst: dict[str, Any]) -> list[str]:
    lines = ["## The herd: jobs due in the same second (local stack and APScheduler 3)", ""]
    if "error" in burst:
        return [*lines, f"Not measured: {burst['error'].splitlines()[-1]}", ""]
    rows = []
    late_dispatch = False
    for r in burst.get("runs", []):
        late, rx = r["lateness_seconds"], r["receiver"]
        if r.get("kind") == "near-term":  # punctual: the API hands each job to SQS as it is posted
            when, seconds = "-", None
            system = (
                f"punctual near-term: posted through the API {r['lead_seconds']:.0f} s ahead "
                f"(in {r['post_seconds']:.0f} s), pollers {r['workers']}-{r.get('worker_peak', r['workers'])}"
            )
        elif "dispatch" in r:  # punctual: the sweeper hands the herd to SQS ahead of the fire time
            d = r["dispatch"]
            done = d["all_dispatched_at_minus_due"]
            if done is None:
                when = "not within the run"
                late_dispatch = True
            else:
                when = f"{abs(done):.1f} s {'after' if done > 0 else 'before'}"
                late_dispatch |= done > 0
            seconds = d["seconds_to_dispatch_all"]
            system = f"punctual, pollers {r['workers']}-{r.get('worker_peak', r['workers'])}"
            if "sweep_concurrency" in r:
                system += f", {r['sweep_concurrency']} buckets at once"
        else:
            when, seconds = "-", None
            crashed = sum(e["tracebacks"] for e in r.get("scheduler_errors", []))
            system = f"APScheduler x{r['processes']}" + (f" ({crashed} tracebacks)" if crashed else "")
        rows.append(
            [
                system,
                f"{r['jitter_seconds']} s",
                figure(r["jobs"]),
                figure(seconds, 1),
                figure(r["jobs"] / seconds if seconds else None, 0),
                when,
                figure(late.get("p50")),
                figure(late.get("p95")),
                figure(late.get("p99")),
                figure(late.get("max")),
                figure(r["early_starts"]),
                f"{figure(rx['raw_calls'])} / {figure(rx['duplicate_calls'])}",
                figure(rx["max_effects_per_key"]),
                figure(rx.get("missing_keys")),
                figure(r["ledger_states"].get("SUCCEEDED", 0)) if "ledger_states" in r else "-",
            ]
        )
    lines += table(
        [
            "System",
            "Jitter",
            "Jobs",
            "Dispatch all (s)",
            "Dispatch rate (/s)",
            "Last dispatch vs. due",
            "Lateness p50 (s)",
            "p95",
            "p99",
            "max",
            "Early starts",
            "Raw calls / duplicates",
            "Max effects per key",
            "Missing",
            "SUCCEEDED",
        ],
        rows,
    )
    config = burst.get("config", {})
    workers = f"{config.get('workers')} to {config.get('max_workers')}"
    dispatch_note = (
        "Where the last dispatch came after the fire time, the sweeper (one process, one completion transaction per "
        "one-shot job, on DynamoDB Local) had not finished handing the burst to SQS, and the lateness includes that; "
        "on AWS the look-ahead is there to keep dispatch ahead of the fire time."
        if late_dispatch
        else "The sweeper handed every message to SQS before the fire time, so dispatch is not in the lateness."
    )
    lines += [
        "",
        f"Lateness = arrival at the receiver - fire_at (scheduled instant + the occurrence's deterministic jitter). "
        f"The local stack runs {workers} worker pollers (10 threads each; more while the ready queues are deep) on "
        "this machine in front of ministack and DynamoDB Local: the tail is the time those workers take to drain the "
        f"burst, not what Lambda's scaling would give on AWS. {dispatch_note} APScheduler 3 runs the same jobs (same "
        "fire instants, same receiver) from a SQLAlchemy job store on SQLite, 20 threads per process, "
        "misfire_grace_time None (so a late job runs rather than being dropped); with two processes on one store "
        "both may run a job: the duplicates column counts it.",
        "",
        "![Start lateness of the herd](lateness.png)",
        "",
    ]
    lines += _drain_cpu(burst.get("runs", []))
    lines += _submit(burst.get("submit"))
    return lines


#: The drain table's columns: kinds of process (scheduler_bench.cpu_profile), in this order.
DRAIN_KINDS = (
    ("worker pollers", "worker pollers"),
    ("DynamoDB Local (JVM)", "DynamoDB Local"),
    ("ministack (SQS)", "ministack"),
    ("sweeper", "sweeper"),
    ("benchmark + receiver", "bench + receiver"),
)


def _drain_cpu(runs: list[dict[str, Any]]) -> list[str]:
    """Where the CPU went while each local herd drained (first fire time to last arrival), per fire."""
    measured = [r for r in runs if "drain_cpu" in r]
    if not measured:
        return []
    rows = []
    known = {kind for kind, _ in DRAIN_KINDS}
    for r in measured:
        d = r["drain_cpu"]
        ms = d["cpu_ms_per_fire"]
        others = sum(v for k, v in ms.items() if k not in known)
        rows.append(
            [
                f"{figure(r['jobs'])}, jitter {r['jitter_seconds']} s",
                figure(d["wall_seconds"], 1),
                figure(d["fires_per_second"], 0),
                f"{100 * (d['busy_fraction_of_machine'] or 0):.0f} %",
                *(figure(ms.get(kind, 0.0), 1) for kind, _ in DRAIN_KINDS),
                figure(others, 1),
                figure(d["cpu_ms_per_fire_total"], 1),
                figure(d["ceiling_fires_per_second"], 0),
            ]
        )
    cores = measured[0]["drain_cpu"]["cores"]
    lines = [
        "Where the CPU went while the herd drained (from the first fire time to the last arrival; CPU milliseconds "
        "per fire, from /proc):",
        "",
        *table(
            [
                "Herd",
                "Drain (s)",
                "Fires / s",
                "Machine busy",
                *(f"{label} (ms)" for _, label in DRAIN_KINDS),
                "other (ms)",
                "Total CPU / fire (ms)",
                f"Ceiling on {cores} cores (fires / s)",
            ],
            rows,
        ),
        "",
        f"Ceiling = {cores} cores / total CPU per fire: the rate this machine could fire at with every core on the "
        "fires. Where the machine is busy through the drain, that ceiling is what holds the herd's tail, whatever "
        "the number of pollers: N jobs due at once need at least N / ceiling seconds.",
        "",
    ]
    return lines


def _forecast(sweep: dict[str, Any]) -> list[str]:
    """What the forecast costs (scheduler.core.capacity.forecast), measured in the sweep scenario's rounds."""
    measured = [r["forecast"] for r in sweep.get("rounds", []) if "forecast" in r]
    if not measured:
        return []
    f = measured[-1]
    read_price = PRICES["dynamodb_read_request_unit"]
    per_job = f["read_units_per_job_with_sweeper_forecast"]
    monthly = f["sweeper_forecast_empty_read_units"] * 60 * 24 * 30 * read_price
    return [
        "## Forecast cost",
        "",
        f"A 60-minute forecast read {f['timers_read']:,} timers in {f['queries']:.0f} queries for "
        f"{f['read_units']:.1f} read units, {f['empty_read_units']:.1f} of them the window's fixed cost (the same "
        f"queries with nothing due): {f['read_units_per_timer']:.3f} read units per timer (eventually consistent). "
        f"The sweeper forecasts its next {f['sweeper_forecast_minutes']} minutes once a minute: "
        f"{f['sweeper_forecast_empty_read_units']:.1f} read units in {f['sweeper_forecast_queries']:.0f} queries "
        f"with nothing due (${monthly:.2f} a month), and each job's timer is read in about "
        f"{per_job / max(f['read_units_per_timer'], 1e-9):.0f} of them: {per_job:.2f} read units per job "
        f"(${per_job * read_price * 1e6:.2f} per million jobs).",
        "",
    ]


def _submit(submit: dict[str, Any] | None) -> list[str]:
    if not submit:
        return []
    rows = []
    for name, key in (
        ("one job per request", "one_by_one"),
        ("batches", "batch"),
        ("in-process JobService.create (no HTTP: the store's ceiling)", "store"),
        ("in-process JobService.create_many (no HTTP: the store's ceiling for batches)", "store_batch"),
    ):
        run = submit.get(key)
        if run:
            rows.append(
                [
                    name,
                    figure(run["clients"]),
                    figure(run["jobs_per_request"]),
                    figure(run["accepted_jobs"]),
                    figure(run["seconds"], 1),
                    figure(run["jobs_per_second"], 0),
                    ", ".join(f"{k}: {v}" for k, v in run["statuses"].items()),
                ]
            )
    note = "" if submit.get("batch") else " The API listed no batch endpoint in this run: batches not measured."
    return [
        "## Submit rate through the local API",
        "",
        *table(["How", "Clients", "Jobs / request", "Accepted", "Seconds", "Jobs / s", "HTTP statuses"], rows),
        "",
        "`POST /v1/jobs` and `POST /v1/jobs/batch` on the local stack's API as `scripts/dev` runs it (2 api "
        "processes, each serving one request at a time like a Lambda container; a batch's valid items stored in "
        "one transaction), keep-alive connections; a job counts as accepted when its own answer is 200 or 201. The "
        "in-process rows call `JobService.create` (or `create_many` of 25) from 8 threads on the same tables: what "
        f"DynamoDB Local accepts of the create transaction here, the ceiling under the API.{note}",
        "",
    ]


def _batching(sweep: dict[str, Any]) -> list[str]:
    batching = sweep.get("batching")
    if not batching:
        return []
    designs = [
        ("batched", "SendMessageBatch of 10 messages of up to 10 occurrences (punctual)"),
        ("one_each", "SendMessageBatch of 10 messages of one occurrence"),
        ("single", "one SendMessage per occurrence (baseline)"),
    ]
    rows = [
        [
            label,
            figure(batching[key]["requests"], 0),
            figure(batching[key]["requests_per_occurrence"]),
            figure(batching[key]["seconds"], 2),
        ]
        for key, label in designs
        if key in batching  # (a run before messages carried several occurrences has no one_each)
    ]
    return [
        "## Batching: SendMessageBatch vs. one SendMessage per occurrence",
        "",
        *table(["Design", "SQS requests", "Requests / occurrence", "Seconds"], rows),
        "",
        f"{figure(batching['messages'])} occurrences: {figure(batching['request_ratio'], 1)}x fewer requests and "
        f"{figure(batching['time_ratio'], 1)}x less time as deployed than with one SendMessage each (the sends of a "
        "sweep's page: how many share a message depends on how close their fire times are).",
        "",
    ]


def emulator_latency(latency: dict[str, Any]) -> list[str]:
    lines = ["## The local SQS emulator: latency vs. queue depth", ""]
    if "error" in latency:
        return [*lines, f"Not measured: {latency['error'].splitlines()[-1]}", ""]
    rows = []
    for kind, measured in latency.get("emulators", {}).items():
        for row in measured["depths"]:
            rows.append(
                [
                    f"{kind} {measured.get('version') or ''}".strip(),
                    figure(row["depth"]),
                    f"{figure(row['receive_message_10']['median_ms'], 1)} "
                    f"({figure(row['receive_message_10']['p90_ms'], 1)})",
                    f"{figure(row['send_message_batch_10']['median_ms'], 1)} "
                    f"({figure(row['send_message_batch_10']['p90_ms'], 1)})",
                    f"{figure(row['send_message']['median_ms'], 1)} ({figure(row['send_message']['p90_ms'], 1)})",
                    figure(row["fill_seconds"], 1),
                ]
            )
    headers = [
        "Emulator",
        "Queue depth",
        "Receive 10, ms: median (p90)",
        "SendMessageBatch 10",
        "SendMessage",
        "Fill (s)",
    ]
    return [
        *lines,
        *table(headers, rows),
        "",
        f"{latency.get('samples')} calls of each, one after another, on a fresh standard queue filled to the depth "
        "(receives with all attributes, as the worker poller asks). The local stack and the tests run on ministack "
        "(`scheduler_local.emulators`); moto is measured for comparison at the depths it can be filled to in a few "
        "minutes.",
        "",
    ]


def latency_sections(results: dict[str, Any]) -> list[str]:
    """The sweep's scaling, batching and forecast, then the herds."""
    lines = _sweep(results.get("sweep_scaling", {"error": "not run"}))
    lines += _batching(results.get("sweep_scaling", {}))
    lines += _forecast(results.get("sweep_scaling", {}))
    lines += _burst(results.get("burst", {"error": "not run"}))
    return lines
