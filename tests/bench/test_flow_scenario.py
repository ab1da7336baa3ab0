"""The flow-control scenario (a held key's isolation, and what a key costs) at a tiny size against the emulators.

A behaviour test, not a timed one: `scripts/bench --only flow` measures the figures, never asserted here (but a key's
rate is: the receiver never sees more than its rate plus one call in a second)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_bench import flow_isolation
from scheduler_bench.report_flow import flow_sections

pytestmark = pytest.mark.system


def test_a_tiny_drain_runs_its_unrelated_occurrences_and_prices_a_key(aws_env: dict[str, str], tmp_path: Path) -> None:
    # Given a key at 10 a second with 20 occurrences due at once, 6 unrelated ones a second into its drain (and at a
    # baseline moment before), and a herd of 6 priced with and without a key
    config = flow_isolation.FlowConfig(
        held=20,
        rate=10,
        unrelated=6,
        unrelated_after_seconds=1.0,
        state_dir=tmp_path,
        cost_jobs=6,
        cost_spreads=("quiet", "herd"),
    )

    # When the scenario runs
    result = flow_isolation.run(config, lambda message: None)

    # Then every occurrence arrived, once, none early, and the key kept its rate at the receiver
    isolation = result["isolation"]
    assert isolation["arrived"] == isolation["expected"] == 20 + 2 * 6
    assert isolation["receiver"]["max_effects_per_key"] == 1
    for moment in ("baseline", "during_drain"):
        group = isolation["unrelated"][moment]
        assert group["lateness_seconds"]["count"] == 6 and group["early_starts"] == 0
        assert {kind: s["count"] for kind, s in group["by_kind"].items()} == dict.fromkeys(flow_isolation.KINDS, 2)
    key = isolation["held_key"]
    assert key["distinct_occurrences"] == 20 and key["early_calls"] == 0
    assert key["most_calls_in_any_second"] <= 11 and key["within_bound"]
    assert key["first_to_last_call_seconds"] >= 1.5  # 20 at 10 a second: the key held them
    assert isolation["comparison"]["p99"]["baseline"] is not None
    # whether the sweeper had sent everything before the baseline is recorded (a measurement of the run's conditions,
    # not asserted: on a busy machine the sends can still be going on)
    assert "all_dispatched_before_baseline_seconds" in isolation
    # and the stack's logs and tables are gone
    assert not list(tmp_path.glob("bf*"))

    # And each cost run fired every job; a key's booking and start pacing wrote more a fire than no key
    for spread in result["cost"]["spreads"].values():
        assert {name: run["fires"] for name, run in spread["runs"].items()} == {
            "no key": 6,
            "key with a rate": 6,
            "key with a rate and parallelism": 6,
        }
        assert spread["runs"]["no key"]["held_attempts"] == 0
        added = spread["added"]
        assert 0 < added["key with a rate"]["write_units"] < added["key with a rate and parallelism"]["write_units"]
        # priced from its units, which are exact (the total adds the Lambda time measured, which moves with the
        # machine's load: on a busy machine it once came out lower for the keyed run than for the one without a key)
        assert added["key with a rate"]["dynamodb_usd_per_million_fires"]["fire_path"] > 0
        assert "fire_path" in added["key with a rate"]["usd_per_million_fires"]

    # And results.md gets both sections
    text = "\n".join(flow_sections(result))
    assert "## Flow control: a held key's isolation" in text and "## Flow control: what a key costs a fire" in text
