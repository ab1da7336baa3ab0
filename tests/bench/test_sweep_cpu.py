"""The sweep-cpu scenario (one sweep of a herd, with botocore and with the fast path) at a tiny size against the
emulators. A behaviour test, not a timed one: `scripts/bench --only sweep-cpu` measures the figures, never asserted
here."""

from __future__ import annotations

import pytest

from scheduler_bench import sweep_cpu

pytestmark = pytest.mark.emulator


def test_each_variant_sweeps_the_whole_herd_and_the_report_compares_them(aws_env: dict[str, str]) -> None:
    # Given a herd of 40 one-shot jobs due in one second
    config = sweep_cpu.SweepCpuConfig(jobs=40, rounds=2)

    # When the scenario runs both variants twice, alternating
    result = sweep_cpu.run(config, lambda message: None)

    # Then each sweep dispatched the whole herd, its CPU was taken, and the rounds swapped the variants' order
    assert [(r["round"], r["variant"]) for r in result["runs"]] == [
        (1, "botocore"),
        (1, "fast"),
        (2, "fast"),
        (2, "botocore"),
    ]
    for run in result["runs"]:
        assert run["fires"] == 40 and run["cpu_seconds"] > 0, run
        assert run["cpu_seconds"] == pytest.approx(run["user_seconds"] + run["system_seconds"], abs=0.002)
    assert set(result["cpu_ms_per_fire"]) == {"botocore", "fast"}
    stretched = result["lambda_ms_per_fire_at_deployed_memory"]["fast"] / result["cpu_ms_per_fire"]["fast"]
    assert stretched == pytest.approx(1769 / result["settings"]["sweeper_memory_mb"], rel=0.01)
    assert result["ratio_fast_to_botocore"] == pytest.approx(
        result["cpu_ms_per_fire"]["fast"] / result["cpu_ms_per_fire"]["botocore"], rel=0.01
    )

    # And results.md gets a row for each and the ratio
    section = "\n".join(sweep_cpu.sweep_cpu_section(result))
    assert "| botocore |" in section and "| fast |" in section and "Fast over botocore" in section
