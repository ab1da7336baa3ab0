"""The sweepers scenario (dispatch with one and with two sweeper processes) at a tiny size against the emulators.

A behaviour test, not a timed one: `scripts/bench --only sweepers` measures the figures, never asserted here."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_bench import sweepers
from scheduler_bench.report_sweepers import sweepers_section

pytestmark = pytest.mark.system


def test_a_tiny_herd_is_dispatched_whole_by_one_process_and_by_two_sharing_it(
    aws_env: dict[str, str], tmp_path: Path
) -> None:
    # Given a herd of 60 jobs over 12 shards, more than a sweep takes at once (8), so a second process finds buckets
    config = sweepers.SweepersConfig(jobs=60, shards=12, rounds=1, tenants=3, state_dir=tmp_path)

    # When the scenario runs one round: one process, then two
    result = sweepers.run(config, lambda message: None)

    # Then each run sent every occurrence exactly once, from the processes it ran, and was timed
    runs = result["runs"]
    assert [run["processes"] for run in runs] == [1, 2]
    for run in runs:
        assert run["complete"] and run["dispatched"] == 60, run
        assert sorted(run["per_process"]) == ["sweeper", "sweeper-2"][: run["processes"]]
        assert 1 <= run["messages"] <= 60
        assert run["seconds_to_dispatch_all"] is not None and run["seconds_to_dispatch_all"] >= 0
        assert sum(run["cpu_profile"]["cpu_seconds"].values()) > 0
    assert set(result["median_seconds"]) == {"1", "2"}
    # and the logs and tables of each run are gone
    assert not list(tmp_path.glob("bw*"))

    # And results.md gets its table and the ratio
    section = "\n".join(sweepers_section(result))
    assert "## Dispatch with one and with two sweeper processes" in section
    assert "ratio one / two" in section and section.count("\n| ") == 4  # the header, its rule and a row per run
