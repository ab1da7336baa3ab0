"""The synth-time check of each function's environment against the handlers' own Settings model."""

from __future__ import annotations

import pytest

from punctual_cdk.config import PunctualConfig
from punctual_cdk.environment import check_against_handler_settings, scheduler_environment

RESOURCES = {
    "jobs_table_name": "jobs",
    "executions_table_name": "executions",
    "ready_queue_url": "https://sqs.eu-central-1.amazonaws.com/123456789012/ready",
    "dlq_url": "https://sqs.eu-central-1.amazonaws.com/123456789012/dlq",
}


def test_the_default_environment_satisfies_the_handlers() -> None:
    check_against_handler_settings("worker", scheduler_environment(PunctualConfig(), **RESOURCES))


def test_a_value_the_handlers_would_reject_fails_the_synth() -> None:
    env = {**scheduler_environment(PunctualConfig(), **RESOURCES), "SCHEDULER_LEASE_SECONDS": "1"}

    with pytest.raises(ValueError, match="lease_seconds"):
        check_against_handler_settings("worker", env)


def test_the_synthesizing_machines_variables_do_not_leak_into_the_check(monkeypatch) -> None:
    # A developer's shell may carry SCHEDULER_* values for the local stack; they are not what deploys.
    monkeypatch.setenv("SCHEDULER_SHARD_COUNT", "999")

    check_against_handler_settings("worker", scheduler_environment(PunctualConfig(), **RESOURCES))


def test_backfill_settings_reach_the_functions_only_when_set() -> None:
    default = scheduler_environment(PunctualConfig(), **RESOURCES)
    assert "SCHEDULER_BACKFILL_WAVE_SIZE" not in default  # the handlers' own default applies

    env = scheduler_environment(PunctualConfig(backfill_wave_size=200, backfill_max_occurrences=5000), **RESOURCES)

    assert (env["SCHEDULER_BACKFILL_WAVE_SIZE"], env["SCHEDULER_BACKFILL_MAX_OCCURRENCES"]) == ("200", "5000")
    check_against_handler_settings("sweeper", env)


def test_tenant_budgets_reach_the_functions_only_when_set() -> None:
    assert "SCHEDULER_TENANT_DISPATCH_RATE" not in scheduler_environment(PunctualConfig(), **RESOURCES)

    env = scheduler_environment(PunctualConfig(tenant_dispatch_rate=25.5, tenant_dispatch_burst=400), **RESOURCES)

    assert (env["SCHEDULER_TENANT_DISPATCH_RATE"], env["SCHEDULER_TENANT_DISPATCH_BURST"]) == ("25.5", "400")
    check_against_handler_settings("sweeper", env)


def test_the_execution_budget_reaches_the_functions_only_when_set() -> None:
    assert "SCHEDULER_TENANT_MAX_CONCURRENCY" not in scheduler_environment(PunctualConfig(), **RESOURCES)

    env = scheduler_environment(PunctualConfig(tenant_max_concurrency=8), **RESOURCES)

    assert env["SCHEDULER_TENANT_MAX_CONCURRENCY"] == "8"
    check_against_handler_settings("worker", env)


def test_operators_reach_the_functions_as_a_json_list_only_when_set(monkeypatch) -> None:
    operator = "arn:aws:iam::123456789012:role/oncall#AROAAAAAAAAAAAAAAAAAA"
    assert "SCHEDULER_OPERATORS" not in scheduler_environment(PunctualConfig(), **RESOURCES)  # nobody

    env = scheduler_environment(PunctualConfig(operators=[operator]), **RESOURCES)

    assert env["SCHEDULER_OPERATORS"] == f'["{operator}"]'
    check_against_handler_settings("api", env)
    from scheduler.settings import Settings

    monkeypatch.setenv("SCHEDULER_OPERATORS", env["SCHEDULER_OPERATORS"])
    assert Settings().operators == [operator]
