"""The benchmark's report: its before/after table and its text agree on what a batch submission costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler_bench import prices
from scheduler_bench.budgets import batch_submit_usd
from scheduler_bench.figures import dollars
from scheduler_bench.report_cost import _batch_submit, _fire_path

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"


def test_the_batch_submit_column_prices_the_batchs_measured_writes_as_the_text_does() -> None:
    cost = json.loads(RESULTS.read_text())["cost"]
    batch = cost["batch_submit"]
    busy = next(run for run in cost["one_shot"] if run["batch_size"] == 10)

    row = _fire_path(busy, batch)
    (text,) = [line for line in _batch_submit(batch, busy) if line]

    # The table's figure is the text's (submit 25 a request + fire, on an HTTP API)
    assert f"(busy batches): {dollars(row['usd_submit_batch_http'])} per million on an HTTP API" in text
    # and it prices the batch's writes (about 4 W a job), not those of a create one job a request (8 W)
    one_by_one_writes = busy["per_fire"]["by_function"]["api"]["write_units"]
    saved = (one_by_one_writes - batch["per_job"]["write_units"]) * prices.PRICES["dynamodb_write_request_unit"] * 1e6
    assert row["usd_submit_http"] - row["usd_submit_batch_http"] >= saved
    submit, http, _ = batch_submit_usd(batch)
    fire = busy["per_million_fires_usd"]["fire_path"]["total"]
    assert row["usd_submit_batch_http"] == pytest.approx(fire + submit + http)


def test_a_kept_scenario_is_dated_by_the_run_that_measured_it() -> None:
    # Given results whose herd was kept from a run of the 2nd, copied along through a results file of the 3rd
    from scheduler_bench.report import _carried

    results = {
        "burst": {"carried_over_from": "2026-12-02T06:45:18+00:00"},
        "emulator_latency": {"carried_over_from": "2026-12-01T16:31:14+00:00"},
    }
    carried = {"scenarios": ["burst", "emulator"], "from_run": "2026-12-03T07:37:30+00:00"}

    # Then each is dated by its own measurement, not by the file it was copied from
    line = _carried(results, carried)
    assert "burst (measured 2026-12-02T06:45:18+00:00)" in line
    assert "emulator (measured 2026-12-01T16:31:14+00:00)" in line
    assert "2026-12-03" not in line


def test_every_budget_is_judged_against_the_run_and_the_floor_of_the_design() -> None:
    from scheduler_bench import budgets

    cost = json.loads(RESULTS.read_text())["cost"]
    rows = {(row.case, row.measure): row for row in budgets.rows(cost)}

    # Every budget, for the herd and for busy minutes
    for case in ("one-shot fire, herd", "one-shot fire, busy minutes"):
        for measure, limit in (("write units", 3.5), ("read units", 1.2), ("SQS requests", 0.35), ("$ / M", 2.40),
                               ("$ / M, provisioned at 70 %", 1.20)):  # fmt: skip
            assert rows[(case, measure)].limit == limit
    for case in ("recurring fire, herd", "recurring fire, busy minutes"):
        for measure, limit in (("write units", 6.5), ("read units", 2.0), ("$ / M", 4.50)):
            assert rows[(case, measure)].limit == limit
    for case in ("one-shot submit + fire, herd", "one-shot submit + fire, busy minutes"):
        assert rows[(case, "$ / M, submitted one by one")].limit == 6.50
        assert rows[(case, "$ / M, submitted 25 a request")].limit == 5.00

    # The budgets' dollars leave the logs out: the fire path's total less its CloudWatch Logs
    herd = next(run for run in cost["one_shot_herd"] if run["batch_size"] == 10)
    usd = herd["per_million_fires_usd"]["fire_path"]
    assert rows[("one-shot fire, herd", "$ / M")].measured == pytest.approx(usd["total"] - usd["cloudwatch_logs"])

    # A measured one-shot fire never spends less than the design's floor (else the floor is wrong), and the floor
    # in dollars is its units priced with the herd's Lambda
    for measure in ("write units", "read units", "SQS requests", "$ / M"):
        row = rows[("one-shot fire, herd", measure)]
        assert row.measured >= row.floor - 1e-9
    floor = budgets.ONE_SHOT_ITEMS + budgets.PAGE_SHARE
    lambda_usd = usd["lambda_requests"] + usd["lambda_duration"]
    expected = prices.per_million(floor.read, floor.write, floor.sqs, 0, 0)["total"] + lambda_usd
    assert rows[("one-shot fire, herd", "$ / M")].floor == pytest.approx(expected)
    # A submission's floor is the fire's plus the create's writes
    one = rows[("one-shot submit + fire, herd", "$ / M, submitted one by one")]
    assert one.floor - rows[("one-shot fire, herd", "$ / M")].floor > budgets.CREATE_WRITES * 0.625


def test_a_budget_is_met_at_or_under_its_limit_and_impossible_below_its_floor() -> None:
    from scheduler_bench.budgets import Row

    assert Row("f", "w", limit=3.5, measured=3.5, floor=3.0).met
    assert not Row("f", "w", limit=3.5, measured=3.6, floor=3.0).met
    assert not Row("f", "w", limit=3.5, measured=3.6, floor=3.0).below_floor
    assert Row("f", "sqs", limit=0.35, measured=0.41, floor=0.40).below_floor
