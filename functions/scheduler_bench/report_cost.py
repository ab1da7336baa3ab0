"""The cost sections of results.md: the budgets, the cost per million fires by scenario, submission in batches,
and the comparison with a baseline run."""

from __future__ import annotations

from typing import Any

from scheduler.schema import FUNCTION_MEMORY_MB
from scheduler_bench import budgets, prices
from scheduler_bench.cost import BATCH_SUBMIT
from scheduler_bench.figures import dollars, figure, table


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
                    figure(pf["read_units"]),
                    f"{figure(pf['write_units'])} ({figure(pf['transactional_write_units'])}, "
                    f"{figure(pf['index_write_units'])})",
                    figure(pf["sqs_billed_requests"]),
                    figure(pf["events_billed"]),
                    figure(pf.get("log_bytes", 0.0) / 1000, 2),
                    figure(calls),
                    figure(ms, 1),
                    figure(1000 * sum(pf["lambda_cpu_seconds"].values()), 1) if "lambda_cpu_seconds" in pf else "-",
                    figure(1000 * pf.get("worker_wait_seconds", 0.0), 1),
                    dollars(usd["fire_path"]["total"]),
                    dollars(usd["with_submission"]["total"]),
                ]
            )
    for alternative in cost.get("alternatives", []):
        total = alternative["per_million"]["total"]
        rows.append([alternative["design"], "1", "", "", "", "", "", "", "", "", "", dollars(total), dollars(total)])
    lines += table(headers, rows)
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
                        figure(figures.get("calls", 0.0)),
                        figure(figures.get("read_units", 0.0)),
                        figure(figures.get("write_units", 0.0)),
                        figure(figures.get("billed_requests", 0.0)),
                    ]
                )
        headers = ["Function", "Operation", "Calls / fire", "Read units", "Write units", "SQS requests / events"]
        lines += table(headers, op_rows)
        lines.append("")
    fixed = cost.get("fixed")
    if fixed:
        per_sweep = fixed["per_sweep"]
        month = fixed["sweeper_per_month_usd"]
        lines += [
            "Fixed cost, whatever the load: one sweep a minute with nothing due reads "
            f"{figure(per_sweep['read_units'], 1)} and writes {figure(per_sweep['write_units'], 1)} units in "
            f"{figure(per_sweep['dynamodb_calls'], 0)} DynamoDB calls: {dollars(month['total'])} a month with its "
            "Lambda; the worker's idle SQS polling adds about "
            f"{dollars(fixed['idle_worker_polling_per_month_usd'])} a month "
            f"({fixed['idle_worker_polling_assumption']}).",
            "",
        ]
    for alternative in cost.get("alternatives", []):
        lines.append(f"- {alternative['design']}: " + "; ".join(alternative["assumptions"]) + ".")
    lines.append("")
    return lines


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
        f"on {batch['created']} one-shot jobs): {figure(per_job['write_units'])} write units, "
        f"{figure(per_job['read_units'])} read units and {figure(1000 * seconds, 1)} ms of the api Lambda a job "
        f"(its valid items in one transaction with one change of the tenant's quota counter and one job-list entry "
        f"for them all); submit + fire of a one-shot job "
        f"(busy batches): {dollars(submit + http + fire)} per million on an HTTP API, "
        f"{dollars(submit + rest + fire)} on REST.",
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
    """The cost budgets against this run, each with the floor of the design under it (`scheduler_bench.budgets`)."""
    found = budgets.rows(cost)
    if not found:
        return []
    lines = [
        "## The cost budgets: this run and the floor of the design",
        "",
        "Each budget beside what this run measured and the design's floor: the fewest units a fire can "
        "take in it at full pages and batches (the sweep's advance, the worker's claim and finish, a full page's "
        "share; a send, a receive, a delete and the batch's hold per 10 messages; for a submission the create's "
        "transaction and the job's list entry; docs/cost.md), priced with this run's Lambda. Dollars as the issue "
        "counts them: DynamoDB, SQS, events and Lambda, on-demand unless it says provisioned; the logs are beside "
        "them. A budget below its floor cannot be met without changing what the design writes.",
        "",
    ]
    budget_rows = []
    for row in found:
        show = dollars if row.money else (lambda value: figure(value, 2))
        verdict = "yes" if row.met else "no, below the floor" if row.below_floor else "no"
        beside = [row.note] if row.note else []
        beside += [f"{dollars(row.with_logs)} with logs"] if row.with_logs is not None else []
        measured = show(row.measured) + (f" ({'; '.join(beside)})" if beside else "")
        floor = show(row.floor) + (f" ({row.floor_note})" if row.floor_note else "")
        budget_rows.append([row.case, row.measure, show(row.limit), measured, floor, verdict])
    lines += table(["Fire", "Measure", "Budget", "Measured", "Floor of the design", "Met"], budget_rows)
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
    names = FIRES
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
                    [dollars(b[key]), dollars(a[key])]
                    if money
                    else [figure(b[key], 1 if key == "ms" else 2), figure(a[key], 1 if key == "ms" else 2)]
                )
            rows.append(row)
    return [*lines, *table(headers, rows), ""]


#: The cost scenario's kinds of fire, as the tables name them.
FIRES = {
    "one_shot": "one-shot job",
    "recurring": "recurring job (rate 1/min)",
    "one_shot_herd": "one-shot job in a herd",
    "recurring_herd": "recurring job in a herd",
}


def _variants(baseline: dict[str, Any], variants: dict[str, dict[str, Any]]) -> list[str]:
    """Each cost variant's fire path beside the baseline's, fire by fire: what a mechanism saves is the baseline's
    advantage over the variant that turns it off (docs/cost.md, "Mechanisms and their verdicts")."""
    lines = [
        "## Mechanisms side by side: the fire path",
        "",
        "The cost scenario once per variant, in this run, each on fresh tables: the baseline as deployed, and each "
        "optional mechanism changed. "
        + "; ".join(f"**{name}**: {run.get('variant', {}).get('what', '?')}" for name, run in variants.items())
        + ". Fire path = sweeper + worker, per fire; dollars per million fires on-demand, logs included; the last "
        "column is the variant less the baseline (a mechanism that pays shows its variant dearer).",
        "",
    ]
    headers = ["Fire", "Msgs per worker call", "Variant", "Write units", "Read units", "SQS requests", "Log KB",
               "Lambda ms", "of which the worker waits (ms)", "$ / M", "$ / M vs baseline"]  # fmt: skip
    rows = []
    for kind, fire in FIRES.items():
        for run in baseline.get(kind, []):
            base = _fire_path(run)
            for name, section in [("baseline", baseline), *variants.items()]:
                if "error" in section:
                    rows.append([fire, str(run["batch_size"]), name, *["-"] * 7, "failed"])
                    continue
                same = [r for r in section.get(kind, []) if r["batch_size"] == run["batch_size"]]
                if not same:
                    continue
                got = _fire_path(same[0])
                wait = 1000 * same[0]["per_fire"].get("worker_wait_seconds", 0.0)
                delta = "" if name == "baseline" else f"{got['usd'] - base['usd']:+.2f}"
                rows.append(
                    [fire, str(run["batch_size"]), name, figure(got["write"]), figure(got["read"]),
                     figure(got["sqs"]), figure(got["logs"]), figure(got["ms"], 1), figure(wait, 1),
                     dollars(got["usd"]), delta]
                )  # fmt: skip
    return [*lines, *table(headers, rows), ""]


def cost_sections(results: dict[str, Any]) -> list[str]:
    """The comparison with the baseline run (when there is one), the budgets, each cost variant beside the baseline
    (`--variants`) and the cost tables."""
    lines: list[str] = []
    baseline = results.get("baseline") or {}
    if "error" not in results.get("cost", {"error": ""}):
        if "cost" in baseline:
            lines += _comparison(baseline["cost"], results["cost"], baseline.get("label", "the baseline run"))
        lines += _budgets(results["cost"])
        if results.get("cost_variants"):
            lines += _variants(results["cost"], results["cost_variants"])
    lines += _cost(results.get("cost", {"error": "not run"}))
    return lines
