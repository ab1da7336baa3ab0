"""The flow-control scenario's own arithmetic: the most calls in any one-second window, the key's drain, the
comparison with the baseline, what a key adds a fire, and the sections results.md gets from them. No emulator."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler_bench.flow_isolation import added, busiest_window, compare, key_drain, most_in_any_window
from scheduler_bench.receiver import Call
from scheduler_bench.report_flow import flow_sections

DUE = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


def calls_at(*offsets: float) -> list[Call]:
    return [Call(DUE.timestamp() + at, f"job{n}:{DUE.isoformat()}", f"job{n}", "", 1) for n, at in enumerate(offsets)]


def test_a_window_holds_its_start_but_not_its_end() -> None:
    # Calls exactly one second apart never share a window; 0.999 s apart they do
    assert most_in_any_window([0.0, 1.0, 2.0, 3.0]) == 1
    assert most_in_any_window([0.0, 0.999, 1.998]) == 2
    # Any window, not only whole seconds: five calls from 0.5 to 1.4 are one window's, whatever the clock's seconds
    assert most_in_any_window([0.1, 0.5, 0.7, 0.9, 1.2, 1.4, 2.6]) == 5
    # Order does not matter, nor does a window's length
    assert most_in_any_window([3.0, 0.2, 0.1, 2.9]) == 2
    assert most_in_any_window([0.0, 1.5, 2.9, 3.1], window=3.0) == 3
    assert most_in_any_window([]) == 0
    # And where: the first window that holds the most
    assert busiest_window([0.1, 0.5, 0.7, 0.9, 1.2, 1.4, 2.6]) == (5, 0.5)
    assert busiest_window([]) == (0, None)


def test_a_key_at_its_rate_is_within_the_bound_and_one_burst_over_it_is_not() -> None:
    # Given a key at 5 a second whose 20 calls came 0.2 s apart from its fire time
    paced = calls_at(*(0.2 * n for n in range(20)))

    drain = key_drain(paced, DUE, rate=5)

    # Then 5 a second, within rate + 1, 3.8 s first to last, the ideal drain 4 s, none early
    assert drain["most_calls_in_any_second"] == 5 and drain["bound_calls_in_any_second"] == 6
    assert drain["within_bound"] and drain["early_calls"] == 0
    assert drain["first_to_last_call_seconds"] == pytest.approx(3.8)
    assert drain["due_to_last_call_seconds"] == pytest.approx(3.8)
    assert drain["ideal_drain_seconds"] == pytest.approx(4.0)
    assert drain["calls"] == drain["distinct_occurrences"] == 20

    # And seven calls within one second, one of them before the fire time, break both
    burst = key_drain(calls_at(-0.1, *(0.1 * n for n in range(6)), 3.0), DUE, rate=5)
    assert burst["most_calls_in_any_second"] == 7 and not burst["within_bound"]
    assert burst["early_calls"] == 1
    assert burst["busiest_second_after_due_seconds"] == pytest.approx(-0.1)


def test_the_comparison_is_the_difference_and_the_ratio_judged_on_the_p99() -> None:
    baseline = {"p50": 0.5, "p99": 1.0, "max": 1.2}

    near = compare(baseline, {"p50": 0.6, "p99": 1.5, "max": 2.0})
    assert near["p99"]["difference"] == pytest.approx(0.5) and near["p99"]["ratio"] == pytest.approx(1.5)
    assert near["p99_within_tolerance"]  # 0.5 s is within 0.5 s
    assert near["p50"]["difference"] == pytest.approx(0.1) and near["max"]["ratio"] == pytest.approx(2.0 / 1.2)

    far = compare(baseline, {"p50": 0.6, "p99": 1.51, "max": 2.0})
    assert not far["p99_within_tolerance"]
    # Faster during the drain is within too; a baseline of zero has no ratio; nothing measured is not within
    assert compare(baseline, {"p50": 0.1, "p99": 0.2, "max": 0.3})["p99_within_tolerance"]
    assert compare({"p50": 0.0, "p99": 0.0, "max": 0.0}, {"p50": 0.0, "p99": 0.1, "max": 0.1})["p99"]["ratio"] is None
    assert not compare(baseline, {})["p99_within_tolerance"]


def per_fire(read: float, write: float, calls: float, sqs: float) -> dict[str, Any]:
    units = {"read_units": read, "write_units": write, "dynamodb_calls": calls, "sqs_billed_requests": sqs}
    zero = dict.fromkeys(units, 0.0)
    return {**units, "by_function": {"api": dict(zero), "sweeper": dict(zero), "worker": dict(units)}}


def usd(total: float) -> dict[str, Any]:
    return {part: {"total": total, "dynamodb": total / 2} for part in ("fire_path", "with_submission")}


def runs() -> dict[str, Any]:
    plain = {
        "fires": 10,
        "jobs": 10,
        "held_attempts": 0,
        "per_fire": per_fire(2.0, 5.0, 7.0, 0.1),
        "per_million_fires_usd": usd(2.0),
    }
    keyed = copy.deepcopy(plain) | {"per_fire": per_fire(3.5, 6.25, 9.0, 0.1), "per_million_fires_usd": usd(3.0)}
    return {"no key": plain, "key with a rate": keyed}


def test_what_a_key_adds_is_the_keyed_run_less_the_unkeyed_one_unit_by_unit() -> None:
    extra = added(runs())

    assert set(extra) == {"key with a rate"}
    rate = extra["key with a rate"]
    assert rate["read_units"] == pytest.approx(1.5) and rate["write_units"] == pytest.approx(1.25)
    assert rate["dynamodb_calls"] == pytest.approx(2.0) and rate["sqs_billed_requests"] == pytest.approx(0.0)
    assert rate["by_function"]["worker"]["write_units"] == pytest.approx(1.25)
    assert rate["by_function"]["sweeper"]["read_units"] == 0
    assert rate["usd_per_million_fires"] == {"fire_path": 1.0, "with_submission": 1.0}
    assert rate["dynamodb_usd_per_million_fires"]["fire_path"] == pytest.approx(0.5)


def test_results_md_gets_the_ratio_the_keys_bound_and_the_added_cost() -> None:
    late = {"count": 6, "p50": 0.4, "p99": 0.8, "max": 0.9}
    kind = {"count": 2, "p50": 0.4, "p99": 0.8, "max": 0.9}
    group = {"lateness_seconds": late, "by_kind": {"unkeyed, same tenant": kind}, "early_starts": 0}
    loaded = {
        **group,
        "lateness_seconds": {**late, "p99": 1.0},
        "by_kind": {"unkeyed, same tenant": {**kind, "p99": 1.5}},
    }
    isolation = {
        "config": {
            "held": 20,
            "rate": 5.0,
            "unrelated": 6,
            "unrelated_after_seconds": 2.0,
            "other_key_rate": 500.0,
            "workers": 2,
            "max_workers": 4,
        },
        "unrelated": {"baseline": group, "during_drain": loaded},
        "comparison": compare(late, loaded["lateness_seconds"]),
        "held_key": key_drain(calls_at(*(0.2 * n for n in range(20))), DUE, 5.0)
        | {"most_calls_in_any_second_around_the_unrelated": 5},
        "receiver": {"duplicate_calls": 0, "max_effects_per_key": 1},
        "arrived": 32,
        "expected": 32,
        "worker_peak": 2,
    }
    spread = {"what": "due within one second", "runs": runs(), "added": added(runs())}
    cost = {"config": {"jobs": 10, "batch_size": 10, "rate": 500, "parallelism": 100}, "spreads": {"herd": spread}}

    text = "\n".join(flow_sections({"isolation": isolation, "cost": cost}))

    assert "## Flow control: a held key's isolation" in text
    assert "difference **0.20 s**, ratio **1.25** (within 0.5 s of the baseline)" in text
    assert "| **5** | 6 | 5 |" in text
    assert "drain less the baseline's: unkeyed, same tenant 0.70 s (not within)." in text
    assert "## Flow control: what a key costs a fire" in text
    row = "| due within one second | **added by a key with a rate** |  |  | 1.50 | 1.25 | 2.00 | 0.00 | **$1.00** |"
    assert row in text
    # A failed scenario says so, and why
    failed = flow_sections({"error": "Traceback ...\nRuntimeError: the machine is too busy"})
    assert failed[-2] == "Not measured: RuntimeError: the machine is too busy"
