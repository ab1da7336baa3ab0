"""The benchmark's report: its before/after table and its text agree on what a batch submission costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler_bench import prices
from scheduler_bench.report import _batch_submit, _batch_submit_usd, _fire_path, _usd

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"


def test_the_batch_submit_column_prices_the_batchs_measured_writes_as_the_text_does() -> None:
    cost = json.loads(RESULTS.read_text())["cost"]
    batch = cost["batch_submit"]
    busy = next(run for run in cost["one_shot"] if run["batch_size"] == 10)

    row = _fire_path(busy, batch)
    (text,) = [line for line in _batch_submit(batch, busy) if line]

    # The table's figure is the text's (submit 25 a request + fire, on an HTTP API)
    assert f"(busy batches): {_usd(row['usd_submit_batch_http'])} per million on an HTTP API" in text
    # and it prices the batch's writes (about 4 W a job), not those of a create one job a request (8 W)
    one_by_one_writes = busy["per_fire"]["by_function"]["api"]["write_units"]
    saved = (one_by_one_writes - batch["per_job"]["write_units"]) * prices.PRICES["dynamodb_write_request_unit"] * 1e6
    assert row["usd_submit_http"] - row["usd_submit_batch_http"] >= saved
    submit, http, _ = _batch_submit_usd(batch)
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
