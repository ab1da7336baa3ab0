"""`bench/results.md`: the tables the README shows, rendered from results.json's content."""

from __future__ import annotations

from typing import Any

from scheduler.schema import FUNCTION_MEMORY_MB
from scheduler_bench import budgets, capacity_report, prices
from scheduler_bench.cost import BATCH_SUBMIT
from scheduler_bench.prices import PRICES

#: Where each scenario's results live in results.json.
RESULT_KEYS = {
    "cost": "cost",
    "sweep": "sweep_scaling",
    "burst": "burst",
    "emulator": "emulator_latency",
    "capacity": "capacity",
}


def _f(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out


def _cost(cost: dict[str, Any]) -> list[str]:
    lines = ["## Cost per million fires", ""]
    if "error" in cost:
        return [*lines, f"Not measured: {cost['error'].splitlines()[-1]}", ""]
    headers = [
        "Design",
        "Msgs per worker call",
        "Read units / fire",
        "Write units / fire (tx, index)",
        "SQS requests / fire",
        "Events / fire",
        "Log KB / fire",
        "Lambda calls / fire",
        "Lambda ms / fire",
        "CPU ms / fire here",
        "of which the worker waits (ms)",
        "$ / M fires (fire path)",
        "$ / M fires (with submit)",
    ]
    rows = []
    names = {
        "one_shot": "punctual, one-shot job",
        "recurring": "punctual, recurring job",
        "one_shot_herd": "punctual, one-shot job in a herd",
        "recurring_herd": "punctual, recurring job in a herd",
    }
    for kind in names:
        for run in cost.get(kind, []):
            pf = run["per_fire"]
            label = names[kind]
            if kind == "recurring":
                label += f" (rate 1/min, {run['occurrences_per_job']} fires per job)"
            if kind == "one_shot_herd":
                label += f" ({run['jobs']:,} due in one second)"
            if kind == "recurring_herd":
                label += f" ({run['jobs']:,} due in one second of each minute, {run['occurrences_per_job']} fires each)"
            calls = sum(pf["lambda_invocations"].values())
            ms = 1000 * sum(pf["lambda_billed_seconds"].values())
            usd = run["per_million_fires_usd"]
            rows.append(
                [
                    label,
                    str(run["batch_size"]),
                    _f(pf["read_units"]),
                    f"{_f(pf['write_units'])} ({_f(pf['transactional_write_units'])}, {_f(pf['index_write_units'])})",
                    _f(pf["sqs_billed_requests"]),
                    _f(pf["events_billed"]),
                    _f(pf.get("log_bytes", 0.0) / 1000, 2),
                    _f(calls),
                    _f(ms, 1),
                    _f(1000 * sum(pf["lambda_cpu_seconds"].values()), 1) if "lambda_cpu_seconds" in pf else "-",
                    _f(1000 * pf.get("worker_wait_seconds", 0.0), 1),
                    _usd(usd["fire_path"]["total"]),
                    _usd(usd["with_submission"]["total"]),
                ]
            )
    for alternative in cost.get("alternatives", []):
        total = alternative["per_million"]["total"]
        rows.append([alternative["design"], "1", "", "", "", "", "", "", "", "", "", _usd(total), _usd(total)])
    lines += _table(headers, rows)
    lines += [
        "",
        "Fire path = sweeper + worker (what EventBridge Scheduler's invocation price compares with); with submit adds "
        "the api Lambda, its DynamoDB transaction and an API Gateway REST request ($3.50/M), once per job "
        "(a recurring job's submission is shared by its fires). Lambda ms = the billed duration at each function's "
        f"deployed memory: the wall time measured here plus the CPU time measured here stretched to that memory's "
        f"share of a vCPU (one vCPU at {prices.LAMBDA_MB_PER_VCPU:,} MB, so each CPU second takes "
        f"{prices.cpu_stretch(FUNCTION_MEMORY_MB['worker']):.2f} s at {FUNCTION_MEMORY_MB['worker']} MB) - "
        "counted as if none of it overlapped the waits, an upper bound.",
        "",
    ]
    first = next(iter(cost.get("one_shot", [])), None)
    lines += _batch_submit(cost.get("batch_submit"), first)
    if first is not None:
        lines += ["Where a one-shot fire's units go (busy batches):", ""]
        op_rows = []
        for function, row in first["per_fire"]["by_function"].items():
            for operation, figures in sorted(row["by_operation"].items()):
                if abs(figures.get("calls", 0.0)) < 1e-9 and abs(figures.get("write_units", 0.0)) < 1e-9:
                    continue
                op_rows.append(
                    [
                        function,
                        operation,
                        _f(figures.get("calls", 0.0)),
                        _f(figures.get("read_units", 0.0)),
                        _f(figures.get("write_units", 0.0)),
                        _f(figures.get("billed_requests", 0.0)),
                    ]
                )
        headers = ["Function", "Operation", "Calls / fire", "Read units", "Write units", "SQS requests / events"]
        lines += _table(headers, op_rows)
        lines.append("")
    fixed = cost.get("fixed")
    if fixed:
        per_sweep = fixed["per_sweep"]
        month = fixed["sweeper_per_month_usd"]
        lines += [
            "Fixed cost, whatever the load: one sweep a minute with nothing due reads "
            f"{_f(per_sweep['read_units'], 1)} and writes {_f(per_sweep['write_units'], 1)} units in "
            f"{_f(per_sweep['dynamodb_calls'], 0)} DynamoDB calls: {_usd(month['total'])} a month with its Lambda; "
            "the worker's idle SQS polling adds about "
            f"{_usd(fixed['idle_worker_polling_per_month_usd'])} a month ({fixed['idle_worker_polling_assumption']}).",
            "",
        ]
    for alternative in cost.get("alternatives", []):
        lines.append(f"- {alternative['design']}: " + "; ".join(alternative["assumptions"]) + ".")
    lines.append("")
    return lines


def _sweep(sweep: dict[str, Any]) -> list[str]:
    lines = ["## Sweep cost vs. pending set (and the Scan baseline)", ""]
    if "error" in sweep:
        return [*lines, f"Not measured: {sweep['error'].splitlines()[-1]}", ""]
    rows = []
    for r in sweep.get("rounds", []):
        s, scan = r["sweep"], r["scan"]
        rows.append(
            [
                _f(r["pending"]),
                _f(s["dispatched"]),
                _f(s["query_items_read_per_dispatched"]),
                _f(s["query_read_units_per_dispatched"], 3),
                f"{_f(s['per_dispatched']['read_units'], 3)} / {_f(s['per_dispatched']['write_units'])}",
                _f(scan["items_read_per_found"], 1),
                _f(scan["read_units_per_found"], 3),
                f"{_f(r['scan_to_sweep_read_units'], 1)}x",
                f"{_f(s['seconds'], 1)} / {_f(scan['seconds'], 1)}",
            ]
        )
    lines += _table(
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
        if "dispatch" in r:  # punctual: the sweeper hands the herd to SQS ahead of the fire time
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
                _f(r["jobs"]),
                _f(seconds, 1),
                _f(r["jobs"] / seconds if seconds else None, 0),
                when,
                _f(late.get("p50")),
                _f(late.get("p95")),
                _f(late.get("p99")),
                _f(late.get("max")),
                _f(r["early_starts"]),
                f"{_f(rx['raw_calls'])} / {_f(rx['duplicate_calls'])}",
                _f(rx["max_effects_per_key"]),
                _f(rx.get("missing_keys")),
                _f(r["ledger_states"].get("SUCCEEDED", 0)) if "ledger_states" in r else "-",
            ]
        )
    lines += _table(
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
                f"{_f(r['jobs'])}, jitter {r['jitter_seconds']} s",
                _f(d["wall_seconds"], 1),
                _f(d["fires_per_second"], 0),
                f"{100 * (d['busy_fraction_of_machine'] or 0):.0f} %",
                *(_f(ms.get(kind, 0.0), 1) for kind, _ in DRAIN_KINDS),
                _f(others, 1),
                _f(d["cpu_ms_per_fire_total"], 1),
                _f(d["ceiling_fires_per_second"], 0),
            ]
        )
    cores = measured[0]["drain_cpu"]["cores"]
    lines = [
        "Where the CPU went while the herd drained (from the first fire time to the last arrival; CPU milliseconds "
        "per fire, from /proc):",
        "",
        *_table(
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
    """What the forecast costs (scheduler.core.forecast), measured in the sweep scenario's rounds."""
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
                    _f(run["clients"]),
                    _f(run["jobs_per_request"]),
                    _f(run["accepted_jobs"]),
                    _f(run["seconds"], 1),
                    _f(run["jobs_per_second"], 0),
                    ", ".join(f"{k}: {v}" for k, v in run["statuses"].items()),
                ]
            )
    note = "" if submit.get("batch") else " The API listed no batch endpoint in this run: batches not measured."
    return [
        "## Submit rate through the local API",
        "",
        *_table(["How", "Clients", "Jobs / request", "Accepted", "Seconds", "Jobs / s", "HTTP statuses"], rows),
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
            _f(batching[key]["requests"], 0),
            _f(batching[key]["requests_per_occurrence"]),
            _f(batching[key]["seconds"], 2),
        ]
        for key, label in designs
        if key in batching  # (a run before messages carried several occurrences has no one_each)
    ]
    return [
        "## Batching: SendMessageBatch vs. one SendMessage per occurrence",
        "",
        *_table(["Design", "SQS requests", "Requests / occurrence", "Seconds"], rows),
        "",
        f"{_f(batching['messages'])} occurrences: {_f(batching['request_ratio'], 1)}x fewer requests and "
        f"{_f(batching['time_ratio'], 1)}x less time as deployed than with one SendMessage each (the sends of a "
        "sweep's page: how many share a message depends on how close their fire times are).",
        "",
    ]


def _emulator(latency: dict[str, Any]) -> list[str]:
    lines = ["## The local SQS emulator: latency vs. queue depth", ""]
    if "error" in latency:
        return [*lines, f"Not measured: {latency['error'].splitlines()[-1]}", ""]
    rows = []
    for kind, measured in latency.get("emulators", {}).items():
        for row in measured["depths"]:
            rows.append(
                [
                    f"{kind} {measured.get('version') or ''}".strip(),
                    _f(row["depth"]),
                    f"{_f(row['receive_message_10']['median_ms'], 1)} ({_f(row['receive_message_10']['p90_ms'], 1)})",
                    f"{_f(row['send_message_batch_10']['median_ms'], 1)} "
                    f"({_f(row['send_message_batch_10']['p90_ms'], 1)})",
                    f"{_f(row['send_message']['median_ms'], 1)} ({_f(row['send_message']['p90_ms'], 1)})",
                    _f(row["fill_seconds"], 1),
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
        *_table(headers, rows),
        "",
        f"{latency.get('samples')} calls of each, one after another, on a fresh standard queue filled to the depth "
        "(receives with all attributes, as the worker poller asks). The local stack and the tests run on ministack "
        "(`scheduler_local.emulators`); moto is measured for comparison at the depths it can be filled to in a few "
        "minutes.",
        "",
    ]


def _carried(results: dict[str, Any], carried: dict[str, Any]) -> str:
    """Each kept scenario with the run it was measured in (a scenario kept twice keeps its first run's time, not
    the time of the results file it was last copied from)."""
    parts = []
    for scenario in carried["scenarios"]:
        measured = (results.get(RESULT_KEYS[scenario]) or {}).get("carried_over_from") or carried["from_run"]
        parts.append(f"{scenario} (measured {measured})")
    return ", ".join(parts)


def _batch_submit(batch: dict[str, Any] | None, busy_one_shot: dict[str, Any] | None) -> list[str]:
    """The measured cost of submitting 25 jobs a request, and submit + fire of a one-shot job that way."""
    if not batch or busy_one_shot is None:
        return []
    per_job = batch["per_job"]
    seconds = per_job["billed_seconds"].get("api", 0.0)
    submit, http, rest = budgets.batch_submit_usd(batch)
    fire = busy_one_shot["per_million_fires_usd"]["fire_path"]["total"]
    return [
        f"Submitted {batch['jobs_per_request']} a request (`POST /v1/jobs/batch`: `JobService.create_many`, measured "
        f"on {batch['created']} one-shot jobs): {_f(per_job['write_units'])} write units, "
        f"{_f(per_job['read_units'])} read units and {_f(1000 * seconds, 1)} ms of the api Lambda a job (its valid "
        f"items in one transaction with one change of the tenant's quota counter and one job-list entry for them "
        f"all); submit + fire of a one-shot job "
        f"(busy batches): {_usd(submit + http + fire)} per million on an HTTP API, {_usd(submit + rest + fire)} on "
        "REST.",
        "",
    ]


def _fire_path(run: dict[str, Any], batch: dict[str, Any] | None = None) -> dict[str, float]:
    """A run's fire-path quantities (sweeper + worker) and its prices, on-demand and provisioned; with submission
    one job a request, and 25 a request: as `batch` measured it (the batch scenario's writes, Lambda and logs a job),
    or without it as a request of one job with its API Gateway request and invocation shared."""
    by = run["per_fire"]["by_function"]
    path = budgets.FIRE_PATH
    usd = run["per_million_fires_usd"]
    units = budgets.fire_units(run)
    read, write = units.read, units.write
    on_demand_dynamodb = usd["fire_path"]["dynamodb"]
    api = usd["with_submission"]
    http_gateway = api["api_gateway"] * prices.API_GATEWAY_HTTP_REQUEST / prices.PRICES["api_gateway_rest_request"]
    http_api = api["total"] - api["api_gateway"] + http_gateway
    # What one API request costs whatever it carries, which 25 jobs a request (POST /v1/jobs/batch) share: the API
    # Gateway request, the api Lambda's invocation and API Gateway's access log line (the creates' writes, duration
    # and own log lines are each job's).
    requests = run["per_fire"]["lambda_invocations"]["api"]
    per_request = http_gateway + requests * 1e6 * (
        prices.PRICES["lambda_request"] + prices.API_ACCESS_LOG_BYTES * prices.PRICES["cloudwatch_logs_ingested_byte"]
    )
    return {
        "read": read,
        "write": write,
        "sqs": units.sqs,
        "events": sum(by[p]["events_billed"] for p in path),
        "logs": sum(by[p].get("log_bytes", 0.0) for p in path) / 1000,
        "ms": 1000 * sum(run["per_fire"]["lambda_billed_seconds"][p] for p in path),
        "usd": usd["fire_path"]["total"],
        "usd_provisioned": usd["fire_path"]["total"]
        - on_demand_dynamodb
        + prices.provisioned_dynamodb_per_million(read, write),
        "usd_submit_rest": api["total"],
        "usd_submit_http": http_api,
        "submit_write": run["per_fire"]["by_function"]["api"]["write_units"],
        "usd_submit_batch_http": (
            usd["fire_path"]["total"] + requests * sum(budgets.batch_submit_usd(batch)[:2])
            if batch
            else http_api - per_request * (1 - 1 / BATCH_SUBMIT)
        ),
    }


def _budgets(cost: dict[str, Any]) -> list[str]:
    """Issue 14's budgets against this run, each with the floor of the design under it (`scheduler_bench.budgets`)."""
    found = budgets.rows(cost)
    if not found:
        return []
    lines = [
        "## Issue 14's budgets: this run and the floor of the design",
        "",
        "Each budget of the issue beside what this run measured and the design's floor: the fewest units a fire can "
        "take in it at full pages and batches (the sweep's advance, the worker's claim and finish, a full page's "
        "share; a send, a receive, a delete and the batch's hold per 10 messages; for a submission the create's "
        "transaction and the job's list entry; docs/cost.md), priced with this run's Lambda. Dollars as the issue "
        "counts them: DynamoDB, SQS, events and Lambda, on-demand unless it says provisioned; the logs are beside "
        "them. A budget below its floor cannot be met without changing what the design writes.",
        "",
    ]
    table = []
    for row in found:
        show = _usd if row.money else (lambda value: _f(value, 2))
        verdict = "yes" if row.met else "no, below the floor" if row.below_floor else "no"
        beside = [row.note] if row.note else []
        beside += [f"{_usd(row.with_logs)} with logs"] if row.with_logs is not None else []
        measured = show(row.measured) + (f" ({'; '.join(beside)})" if beside else "")
        floor = show(row.floor) + (f" ({row.floor_note})" if row.floor_note else "")
        table.append([row.case, row.measure, show(row.limit), measured, floor, verdict])
    lines += _table(["Fire", "Measure", "Budget", "Measured", "Floor of the design", "Met"], table)
    return [*lines, ""]


def _comparison(before: dict[str, Any], after: dict[str, Any], label: str) -> list[str]:
    """Before and after, side by side, per design and worker batch size (fire path unless it says so)."""
    lines = [
        "## Before and after: the fire path",
        "",
        f"Before: {label}. After: this run. Fire path = sweeper + worker; units per fire; dollars per million fires "
        "(on-demand us-east-1; provisioned at 70% utilisation; with submit on API Gateway REST and on an HTTP API "
        "with IAM authorization, one job a request or 25 a request with POST /v1/jobs/batch, whose API Gateway "
        "request and Lambda invocation are shared; a recurring job's submission is shared by its fires).",
        "",
    ]
    headers = ["Design", "Msgs per worker call"]
    for name in ("Write units", "Read units", "SQS requests", "Events", "Log KB", "Lambda ms", "$ / M",
                 "$ / M provisioned", "$ / M + submit (REST)", "$ / M + submit (HTTP API)",
                 "$ / M + batch submit (HTTP API)"):  # fmt: skip
        headers += [f"{name} before", f"{name} after"]
    rows = []
    names = {
        "one_shot": "one-shot job",
        "recurring": "recurring job (rate 1/min)",
        "one_shot_herd": "one-shot job in a herd",
        "recurring_herd": "recurring job in a herd",
    }
    for kind in names:
        old = {r["batch_size"]: r for r in before.get(kind, [])}
        for run in after.get(kind, []):
            if run["batch_size"] not in old:
                continue
            b = _fire_path(old[run["batch_size"]], before.get("batch_submit"))
            a = _fire_path(run, after.get("batch_submit"))
            row = [names[kind], str(run["batch_size"])]
            for key, money in (("write", False), ("read", False), ("sqs", False), ("events", False), ("logs", False),
                               ("ms", False),
                               ("usd", True), ("usd_provisioned", True), ("usd_submit_rest", True),
                               ("usd_submit_http", True), ("usd_submit_batch_http", True)):  # fmt: skip
                row += (
                    [_usd(b[key]), _usd(a[key])]
                    if money
                    else [_f(b[key], 1 if key == "ms" else 2), _f(a[key], 1 if key == "ms" else 2)]
                )
            rows.append(row)
    return [*lines, *_table(headers, rows), ""]


def render(results: dict[str, Any]) -> str:
    """The whole of results.md."""
    machine, versions, commit = results["machine"], results["versions"], results["git"]
    lines = [
        "# punctual benchmarks",
        "",
        f"Run {results['finished_at']} ({results['mode']} sizes, {results['duration_seconds']:.0f} s) on "
        f"{machine['cpu_model']}, {machine['cores']} cores, {machine['memory_gib']} GiB; Python {versions['python']}, "
        f"boto3 {versions['boto3']}, ministack {versions.get('ministack')}, moto {versions['moto']}, "
        f"DynamoDB Local `{versions['dynamodb_local']}`; commit "
        f"`{(commit.get('commit') or 'unknown')[:12]}`{' (work tree modified)' if commit.get('dirty') else ''}. "
        f"Endpoints: DynamoDB {results.get('endpoints', {}).get('dynamodb', '-')}, "
        f"SQS {results.get('endpoints', {}).get('sqs', '-')}.",
        "",
    ]
    loads = []
    for name, key in (
        ("cost", "cost"),
        ("sweep", "sweep_scaling"),
        ("burst", "burst"),
        ("emulator", "emulator_latency"),
    ):
        before, after = (results.get(key) or {}).get("load_average_before_after") or (None, None)
        if before and after:
            loads.append(f"{name} {before[0]:.1f} -> {after[0]:.1f}")
    if loads:
        lines += [
            f"Machine load (1-minute load average before -> after each scenario, {machine['cores']} cores): "
            + ", ".join(loads)
            + ". Times in seconds are this machine's, under that load; counts and units are not affected.",
            "",
        ]
    carried = results.get("carried_over")
    if carried:
        lines += [f"Scenarios not re-run this time, kept from earlier runs: {_carried(results, carried)}.", ""]

    baseline = results.get("baseline") or {}
    if "error" not in results.get("cost", {"error": ""}):
        if "cost" in baseline:
            lines += _comparison(baseline["cost"], results["cost"], baseline.get("label", "the baseline run"))
        lines += _budgets(results["cost"])
    lines += _cost(results.get("cost", {"error": "not run"}))
    lines += _sweep(results.get("sweep_scaling", {"error": "not run"}))
    lines += _batching(results.get("sweep_scaling", {}))
    lines += _forecast(results.get("sweep_scaling", {}))
    lines += _burst(results.get("burst", {"error": "not run"}))
    if "capacity" in results:
        lines += capacity_report.render(results["capacity"])
    if "emulator_latency" in results:
        lines += _emulator(results["emulator_latency"])
    lines += ["## How these were measured, and what to keep in mind", ""]
    lines += [f"- {note}" for note in results.get("notes", [])]
    lines.append("")
    return "\n".join(lines)
