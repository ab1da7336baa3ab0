"""The benchmark's cost variants (`--variants`): each turns one optional cost mechanism off (or execution slots on),
the command line refuses a name it does not know, and results.md sets each variant's fire path beside the
baseline's. No emulator: the variants' configuration is checked on the in-memory core."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from scheduler.composition import Configs
from scheduler.core.sweep.dispatch import COPY_MAX_BYTES
from scheduler.settings import Settings
from scheduler_bench import cost
from scheduler_bench.__main__ import parse_args
from scheduler_bench.report_cost import _variants
from tests.unit.fixtures import MemoryCore

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.json"


def settings() -> Settings:
    return Settings(
        jobs_table="jobs", executions_table="runs", ready_queue_url="http://q", dlq_url="http://dlq", local_mode=True
    )


def test_the_variants_option_runs_the_baseline_first_and_each_named_variant_once() -> None:
    args = parse_args(["--only", "cost", "--variants", "no-landing,baseline,slots,no-landing"])

    assert [v.name for v in args.cost_variants] == ["baseline", "no-landing", "slots"]


def test_an_unknown_variant_is_refused_with_the_names_it_could_be(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--variants", "baseline,no-landings"])

    error = capsys.readouterr().err
    assert "no-landings" in error and "one-per-message" in error


def test_without_the_option_only_the_baseline_runs() -> None:
    assert [v.name for v in parse_args([]).cost_variants] == ["baseline"]


def test_the_baseline_is_the_deployed_configuration() -> None:
    changed, configs = cost.BASELINE.configure(settings())

    assert changed == settings()
    assert configs == Configs.of(settings())


def test_each_variant_changes_its_mechanism_and_nothing_else() -> None:
    deployed = Configs.of(settings())
    expected = {
        "one-per-message": replace(deployed, packing=replace(deployed.packing, occurrences=1)),
        "no-job-copy": replace(deployed, dispatch=replace(deployed.dispatch, job_copy_max_bytes=0)),
        "no-landing": replace(deployed, dispatch=replace(deployed.dispatch, landing_window=None)),
    }
    for name, configs in expected.items():
        assert cost.VARIANTS[name].configure(settings())[1] == configs, name

    changed, configs = cost.VARIANTS["slots"].configure(settings())
    assert changed.tenant_max_concurrency == cost.SLOTS_LIMIT
    assert deployed.concurrency is None and configs.concurrency is not None
    assert replace(configs, concurrency=None) == deployed


def _sent_copy(job_copy_max_bytes: int) -> Any:
    world = MemoryCore.build()
    world.core.dispatcher.config = replace(world.core.dispatcher.config, job_copy_max_bytes=job_copy_max_bytes)
    job = world.create({"type": "once", "delay_seconds": 10})
    assert job.next_run_at is not None
    world.set_time(job.next_run_at)
    world.sweep()
    (dispatch,) = world.sent(job.job_id)
    return dispatch.job_copy


def test_no_job_copy_sends_a_one_shot_occurrence_without_its_job() -> None:
    assert _sent_copy(COPY_MAX_BYTES) is not None
    assert _sent_copy(0) is None


def test_results_md_sets_each_variant_beside_the_baseline_fire_by_fire() -> None:
    # Given this run's cost section, and a variant that measured one more write unit a busy one-shot fire
    baseline = json.loads(RESULTS.read_text())["cost"]
    dearer = copy.deepcopy(baseline)
    dearer["variant"] = {"name": "no-job-copy", "what": "every worker reads its job"}
    busy = next(run for run in dearer["one_shot"] if run["batch_size"] == 10)
    busy["per_fire"]["by_function"]["worker"]["write_units"] += 1
    busy["per_million_fires_usd"]["fire_path"]["total"] += 0.625

    lines = _variants(baseline, {"no-job-copy": dearer, "slots": {"error": "Traceback ...\nRuntimeError: boom"}})

    rows = [line.split(" | ") for line in lines if line.startswith("| one-shot job | 10 |")]
    assert [row[2] for row in rows] == ["baseline", "no-job-copy", "slots"]
    base, variant, failed = rows
    assert float(variant[3]) == pytest.approx(float(base[3]) + 1, abs=0.01)
    assert variant[-1].rstrip(" |") == "+0.62"  # dearer: what the mechanism saves
    assert failed[-1].rstrip(" |") == "failed"
    assert "**no-job-copy**: every worker reads its job" in "\n".join(lines)


def test_the_wiring_builds_the_core_on_the_variants_configuration() -> None:
    import boto3

    from scheduler.core.runtime.metrics import NullMetrics
    from scheduler.handlers import wiring

    changed, configs = cost.VARIANTS["no-landing"].configure(settings())
    made = [boto3.client(name, region_name="us-east-1") for name in ("dynamodb", "sqs", "events")]

    container = wiring.build(changed, NullMetrics(), clients=wiring.Clients(*made), configs=configs)

    assert container.core.configs.dispatch.landing_window is None
    assert container.core.dispatcher.config == configs.dispatch
