"""The sections of results.md on flow control (`scheduler_bench.flow_isolation`): a held key's isolation, and what a
key costs a fire."""

from __future__ import annotations

from typing import Any

from scheduler_bench.figures import dollars, figure, table
from scheduler_bench.flow_isolation import compare


def _seconds(summary: dict[str, Any], name: str) -> str:
    return figure(summary.get(name), 2)


def _by_kind(result: dict[str, Any]) -> str:
    """Each kind's p99 difference and whether it is within the tolerance (computed from the kinds' summaries)."""
    parts = []
    baseline, loaded = result["unrelated"]["baseline"]["by_kind"], result["unrelated"]["during_drain"]["by_kind"]
    for kind in baseline:
        verdict = compare(baseline[kind], loaded.get(kind, {}))
        p99 = verdict["p99"] or {}
        within = "within" if verdict["p99_within_tolerance"] else "not within"
        parts.append(f"{kind} {figure(p99.get('difference'), 2)} s ({within})")
    return ", ".join(parts)


def isolation_section(result: dict[str, Any]) -> list[str]:
    lines = ["## Flow control: a held key's isolation", ""]
    if "error" in result:
        return [*lines, f"Not measured: {result['error'].splitlines()[-1]}", ""]
    config, unrelated, key = result["config"], result["unrelated"], result["held_key"]
    rows = []
    for moment, label in (("baseline", "baseline: no backlog"), ("during_drain", "in the middle of the key's drain")):
        group = unrelated[moment]
        late = group["lateness_seconds"]
        rows.append(
            [label, "all", figure(late.get("count", 0))]
            + [_seconds(late, n) for n in ("p50", "p99", "max")]
            + [figure(group["early_starts"])]
        )
        for kind, by_kind in group["by_kind"].items():
            rows.append(
                ["", kind, figure(by_kind.get("count", 0))]
                + [_seconds(by_kind, n) for n in ("p50", "p99", "max")]
                + [""]
            )
    lines += table(["Unrelated occurrences", "Kind", "Started", "p50 (s)", "p99 (s)", "max (s)", "Early"], rows)
    comparison = result["comparison"]
    p99 = comparison.get("p99") or {}
    ratio = p99.get("ratio")
    verdict = "within" if comparison.get("p99_within_tolerance") else "NOT within"
    lines += [
        "",
        f"{config['unrelated']:,} unrelated occurrences due at one instant with no backlog, and the same "
        f"{config['unrelated']:,} due {figure(config['unrelated_after_seconds'], 0)} s into the drain of "
        f"{config['held']:,} occurrences of one key limited to {figure(config['rate'], 0)} calls a second, all due at "
        f"once, in the same run of the local stack ({config['workers']}-{config['max_workers']} worker pollers). The "
        f"unrelated are a third each: no key in the held key's tenant, another key of that tenant (rate "
        f"{figure(config['other_key_rate'], 0)} a second) and another tenant. p99 start lateness "
        f"{_seconds(p99, 'baseline')} s without the backlog, {_seconds(p99, 'during_drain')} s during the drain: "
        f"difference **{figure(p99.get('difference'), 2)} s**, ratio **{figure(ratio, 2)}** "
        f"({verdict} {figure(comparison['tolerance_seconds'], 1)} s of the baseline). By kind, p99 during the "
        f"drain less the baseline's: {_by_kind(result)}.",
        "",
    ]
    lines += table(
        [
            "Held key",
            "Calls (occurrences)",
            "Most calls in any 1 s",
            "Bound (rate + 1)",
            "Most in 1 s around the unrelated",
            "First to last call (s)",
            "Due to last call (s)",
            "Ideal drain (s)",
            "Early calls",
        ],
        [
            [
                f"{config['held']:,} at {figure(config['rate'], 0)}/s",
                f"{key['calls']:,} ({key['distinct_occurrences']:,})",
                f"**{key['most_calls_in_any_second']}**",
                figure(key["bound_calls_in_any_second"], 0),
                figure(key.get("most_calls_in_any_second_around_the_unrelated")),
                figure(key["first_to_last_call_seconds"], 1),
                figure(key["due_to_last_call_seconds"], 1),
                figure(key["ideal_drain_seconds"], 1),
                figure(key["early_calls"]),
            ]
        ],
    )
    receiver = result["receiver"]
    ahead = result.get("all_dispatched_before_baseline_seconds", "unknown")
    if ahead == "unknown":
        handed = ""
    elif ahead is None:
        handed = " The sweeper was still handing the messages over when the baseline fell due (a busier baseline)."
    else:
        handed = f" Every message was with SQS {figure(ahead, 0)} s before the baseline fell due."
    lines += [
        "",
        f"Arrived {result['arrived']:,} of {result['expected']:,} occurrences; duplicate calls "
        f"{receiver['duplicate_calls']:,}, effects per key at most {receiver['max_effects_per_key']}; "
        f"worker pollers at most {result['worker_peak']}.{handed}",
        "",
    ]
    return lines


def cost_section(result: dict[str, Any]) -> list[str]:
    lines = ["## Flow control: what a key costs a fire", ""]
    if "error" in result:
        return [*lines, f"Not measured: {result['error'].splitlines()[-1]}", ""]
    config = result["config"]
    rows, by_function = [], []
    for spread in result["spreads"].values():
        for name, run in spread["runs"].items():
            per_fire, usd = run["per_fire"], run["per_million_fires_usd"]
            rows.append(
                [
                    spread["what"],
                    name,
                    f"{run['fires']:,} of {run['jobs']:,}",
                    figure(run["held_attempts"]),
                    figure(per_fire["read_units"]),
                    figure(per_fire["write_units"]),
                    figure(per_fire["dynamodb_calls"]),
                    figure(per_fire["sqs_billed_requests"]),
                    dollars(usd["fire_path"]["total"]),
                    dollars(usd["with_submission"]["total"]),
                ]
            )
        for name, extra in spread["added"].items():
            rows.append(
                [
                    spread["what"],
                    f"**added by a {name}**",
                    "",
                    "",
                    figure(extra["read_units"]),
                    figure(extra["write_units"]),
                    figure(extra["dynamodb_calls"]),
                    figure(extra["sqs_billed_requests"]),
                    f"**{dollars(extra['usd_per_million_fires']['fire_path'])}**",
                    f"**{dollars(extra['usd_per_million_fires']['with_submission'])}**",
                ]
            )
            parts = ", ".join(
                f"{phase} {figure(units['read_units'])} R {figure(units['write_units'])} W"
                for phase, units in extra["by_function"].items()
            )
            by_function.append(f"a {name} ({spread['what']}): {parts}")
    lines += table(
        [
            "Jobs",
            "Key",
            "Fired",
            "Attempts held",
            "R / fire",
            "W / fire",
            "DynamoDB calls / fire",
            "SQS requests / fire",
            "$ / M fires (fire path)",
            "$ / M fires (with submit)",
        ],
        rows,
    )
    lines += [
        "",
        f"{config['jobs']:,} one-shot jobs on the cost scenario's virtual "
        "timeline (the real api, sweeper and worker code on metered clients, the job-less timeline subtracted); the "
        f"key's rate is {figure(config['rate'], 0)} a second (its parallelism {figure(config['parallelism'], 0)}), "
        "above what the jobs need. *Attempts held*: attempts the key's start pacing or slots sent back to the queue "
        "(they came back and ran, billed): a batch's records start together and race for the key's next start, "
        "and one that has not started within 2 s of its first try waits hidden. What a key adds a fire, by function: "
        + "; ".join(by_function)
        + ".",
        "",
    ]
    return lines


def flow_sections(result: dict[str, Any]) -> list[str]:
    """Both sections, or the scenario's error."""
    if "error" in result:
        return ["## Flow control", "", f"Not measured: {result['error'].splitlines()[-1]}", ""]
    lines = isolation_section(result["isolation"])
    if "cost" in result:
        lines += cost_section(result["cost"])
    return lines
