"""The benchmark runs end to end on a tiny size against the emulators and writes well-formed results.

A behaviour test, not a timed one: figures are measured by `scripts/bench`, never asserted here.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.system, pytest.mark.load_tolerant]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_benchmark_runs_end_to_end_on_a_tiny_size(aws_endpoints: dict[str, str], tmp_path: Path) -> None:
    # Given the emulators (their endpoints in AWS_ENDPOINT_URL_*, so the benchmark starts none of its own)
    env = {**os.environ, **aws_endpoints, "PYTHONPATH": str(ROOT / "functions")}
    tiny = ["--quick", "--pending", "200", "--due", "20", "--burst", "20", "--cost-jobs", "3", "--submit-jobs", "16"]
    tiny += ["--herd-jobs", "12", "--recurring-herd-jobs", "12"]
    tiny += ["--recurring-jobs", "2", "--occurrences", "2", "--jitter", "2", "--out", str(tmp_path)]
    tiny += ["--emulator-depths", "0,30", "--moto-depths", "0", "--peer-processes", "2"]
    tiny += ["--capacity-sizes", "500", "--sweepers-jobs", "20", "--sweepers-shards", "2", "--sweepers-rounds", "1"]
    tiny += ["--flow-held", "10", "--flow-rate", "10", "--flow-unrelated", "3", "--flow-after", "0.5"]
    tiny += ["--flow-cost-jobs", "3", "--capacity-sustained", "3000,3"]
    tiny += ["--empty-buckets-shards", "1,3", "--empty-buckets-minutes", "1", "--empty-buckets-rounds", "1"]
    tiny += ["--sweep-cpu-jobs", "20", "--sweep-cpu-rounds", "1"]

    # When the benchmark runs every scenario at a tiny size
    done = subprocess.run(
        [sys.executable, "-m", "scheduler_bench", *tiny], env=env, capture_output=True, text=True, timeout=600
    )

    # Then it succeeds and records where it ran
    assert done.returncode == 0, done.stderr[-4000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["machine"]["cores"] >= 1 and results["machine"]["cpu_model"]
    assert results["versions"]["python"] and results["versions"]["boto3"]
    assert results["git"]["commit"] is None or len(results["git"]["commit"]) == 40
    assert results["endpoints"]["started_by_the_benchmark"] is False

    # And every fire of the cost scenario reached SUCCEEDED and was counted in units, priced beside EventBridge
    for kind, expected in (("one_shot", 3), ("recurring", 4), ("one_shot_herd", 12), ("recurring_herd", 24)):
        for run in results["cost"][kind]:
            assert run["states"] == {"SUCCEEDED": expected}
            assert run["fires"] == expected and not run["kept_messages"]
            assert run["per_fire"]["write_units"] > 0 and run["per_fire"]["sqs_billed_requests"] > 0
            assert run["per_fire"]["lambda_invocations"]["worker"] > 0
            assert run["per_million_fires_usd"]["with_submission"]["total"] > 0
    assert {r["batch_size"] for r in results["cost"]["one_shot"]} == {1, 10}
    # the herd (due within one second) in full batches only, sharing its sends: fewer SQS requests a fire
    (herd,) = results["cost"]["one_shot_herd"]
    assert herd["batch_size"] == 10
    (busy,) = [r for r in results["cost"]["one_shot"] if r["batch_size"] == 10]
    assert herd["per_fire"]["sqs_billed_requests"] < busy["per_fire"]["sqs_billed_requests"]
    assert [a["design"] for a in results["cost"]["alternatives"]] == [
        "EventBridge Scheduler alone",
        "EventBridge Scheduler + Lambda + Powertools idempotency",
    ]
    assert results["cost"]["duplicates_at_receiver"]["duplicate_calls"] == 0

    # And the sweep dispatched exactly the due jobs, which the Scan baseline found among all the pending ones
    (round_,) = results["sweep_scaling"]["rounds"]
    assert round_["pending"] == 200 and round_["sweep"]["dispatched"] == 20
    assert round_["scan"]["found"] == 20 and round_["scan"]["scanned"] == 220
    batching = results["sweep_scaling"]["batching"]
    assert batching["batched"]["requests"] <= batching["one_each"]["requests"] == 2
    assert batching["single"]["requests"] == 20

    # And each burst (with and without jitter) fired every occurrence once, never early
    runs = [r for r in results["burst"]["runs"] if r["system"].startswith("punctual")]
    assert [r["jitter_seconds"] for r in runs] == [0, 2]
    for run in runs:
        assert run["receiver"]["missing_keys"] == 0
        assert run["receiver"]["max_effects_per_key"] == 1
        assert run["ledger_states"].get("SUCCEEDED") == 20
        assert run["early_starts"] == 0
        assert len(run["lateness_samples"]) == 20
        assert sum(run["cpu_profile"]["cpu_seconds"].values()) > 0
        # the drain's own window: every fire in it, CPU per fire by process, and the ceiling it implies
        drain = run["drain_cpu"]
        assert drain["fires"] == 20 and drain["cpu_ms_per_fire"]["worker pollers"] > 0
        assert drain["ceiling_fires_per_second"] == pytest.approx(
            1000 * drain["cores"] / drain["cpu_ms_per_fire_total"], rel=0.01
        )

    # And the peer ran the same herds, two APScheduler processes on one store: every occurrence, none early
    peers = [r for r in results["burst"]["runs"] if r["system"].startswith("APScheduler")]
    assert [(r["jitter_seconds"], r["processes"]) for r in peers] == [(0, 2), (2, 2)]
    for run in peers:
        assert run["receiver"]["missing_keys"] == 0 and run["early_starts"] == 0

    # And the submit rate was measured through the API: every job accepted
    one = results["burst"]["submit"]["one_by_one"]
    assert one["accepted_jobs"] == 16 and one["statuses"] == {"201": 16}
    batch = results["burst"]["submit"]["batch"]
    assert batch["accepted_jobs"] == batch["requests"] * 25 and batch["statuses"] == {"200": batch["requests"]}
    assert results["burst"]["submit"]["store"]["accepted_jobs"] == 16

    # And the emulators' SQS latency was measured at each depth asked for, ministack's and moto's
    measured = results["emulator_latency"]["emulators"]
    assert [row["depth"] for row in measured["ministack"]["depths"]] == [0, 30]
    assert [row["depth"] for row in measured["moto"]["depths"]] == [0]
    assert all(row["receive_message_10"]["median_ms"] > 0 for row in measured["ministack"]["depths"])

    # And the sweepers scenario sent the whole herd once with one process and once with two
    assert [(r["processes"], r["dispatched"]) for r in results["sweepers"]["runs"]] == [(1, 20), (2, 20)]

    # And the flow scenario ran every occurrence of its held key and of the unrelated ones, and priced a key
    isolation = results["flow_control"]["isolation"]
    assert isolation["arrived"] == isolation["expected"] == 10 + 2 * 3
    assert isolation["held_key"]["distinct_occurrences"] == 10 and isolation["held_key"]["early_calls"] == 0
    for spread in results["flow_control"]["cost"]["spreads"].values():
        assert {run["fires"] for run in spread["runs"].values()} == {3}

    # And the report and the plot are written
    markdown = (tmp_path / "results.md").read_text()
    for heading in (
        "## Cost per million fires",
        "## Sweep cost vs. pending set",
        "## The herd",
        "## Submit rate",
        "## Batching",
        "## The local SQS",
        "Where the CPU went while the herd drained",
        "## Dispatch with one and with two sweeper processes",
        "## Flow control: a held key's isolation",
        "## Flow control: what a key costs a fire",
    ):
        assert heading in markdown
    assert "EventBridge Scheduler alone" in markdown
    assert png_size((tmp_path / "lateness.png").read_bytes()) == (1000, 720)

    # And the capacity model ran on this run's figures: today, provisioned and pre-scaled, for each spread
    rows = results["capacity"]["rows"]
    assert [(r["scenario"]["spread_seconds"], r["scenario"]["mode"]) for r in rows] == [
        (spread, mode) for spread in (1.0, 60.0) for mode in ("standard", "provisioned", "prescaled")
    ] + [(3.0, "prescaled")]
    assert all(r["early_starts"] == 0 and r["p99"] >= r["p50"] >= 0 for r in rows)
    # the sustained rate is priced per million fires
    assert rows[-1]["scenario"]["occurrences"] == 3000 and rows[-1]["dollars_per_million"]["total"] > 0
    assert "## Capacity model" in markdown and "## Forecast cost" in markdown and "per million fires" in markdown
    # And the sweep's CPU was taken with both variants, and an empty bucket's cost a minute at each shard count
    assert {r["variant"] for r in results["sweep_cpu"]["runs"]} == {"botocore", "fast"}
    assert "## The sweep's CPU per fire" in markdown
    assert set(results["empty_buckets"]["per_shard"]) == {"1", "3"}
    assert "## What an empty bucket costs" in markdown
    assert png_size((tmp_path / "capacity.png").read_bytes()) == (1000, 720)


def test_png_writer_round_trips_pixels(tmp_path: Path) -> None:
    # Given a canvas with one red pixel
    from scheduler_bench.plot import Canvas

    canvas = Canvas(3, 2)
    canvas.blend(1, 1, (255, 0, 0))

    # When it is encoded
    data = canvas.png()

    # Then the IDAT holds the rows (filter byte 0) with the pixel where it was drawn
    assert png_size(data) == (3, 2)
    start = data.index(b"IDAT") + 4
    (length,) = struct.unpack(">I", data[start - 8 : start - 4])
    rows = zlib.decompress(data[start : start + length])
    assert rows[0] == 0 and rows[10] == 0
    assert rows[11 + 3 : 11 + 6] == b"\xff\x00\x00"
