"""Deployment configuration: defaults, overrides from the CLI, and clear errors for bad values."""

from __future__ import annotations

import json

import pytest

from infra import REPO_ROOT
from infra.app import build_app
from punctual_cdk.config import ConfigError, PunctualConfig, load_config, parse_config

CDK_JSON_SETTINGS = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]["punctual"]
ACCOUNT_REGION = "eu-central-1:123456789012"


class FakeNode:
    """Stands in for a construct node: only `try_get_context` is used."""

    def __init__(self, context: dict) -> None:
        self._context = context

    def try_get_context(self, key: str):
        return self._context.get(key)


def test_cdk_json_lists_every_key_with_its_default() -> None:
    assert set(CDK_JSON_SETTINGS) == set(PunctualConfig.model_fields)
    # null means "not set" (CDK drops null context values), i.e. the default
    shipped = {key: value for key, value in CDK_JSON_SETTINGS.items() if value is not None}
    assert parse_config(shipped) == PunctualConfig()


def test_missing_context_gives_the_defaults() -> None:
    assert load_config(FakeNode({})) == PunctualConfig()


def test_flat_keys_override_the_object_with_cli_strings() -> None:
    # Given the object from cdk.json and `-c punctual.<key>=<string>` overrides, as the CLI passes them
    node = FakeNode(
        {
            "punctual": {"stage": "staging", "shard_count": 4},
            "punctual.shard_count": "32",
            "punctual.retain_data": "false",
            "punctual.alarm_email": "ops@example.com",
            "punctual.sweeper_reserved_concurrency": "0",
            "punctual.target_sqs_queue_arns": f"arn:aws:sqs:{ACCOUNT_REGION}:a, arn:aws:sqs:{ACCOUNT_REGION}:b",
            "punctual.target_sns_topic_arns": f'["arn:aws:sns:{ACCOUNT_REGION}:t"]',
        }
    )

    # When the configuration is loaded
    config = load_config(node)

    # Then the flat keys win, typed
    assert config.stage == "staging"
    assert config.shard_count == 32
    assert config.retain_data is False
    assert config.alarm_email == "ops@example.com"
    assert config.sweeper_reserved_concurrency == 0
    assert config.target_sqs_queue_arns == (f"arn:aws:sqs:{ACCOUNT_REGION}:a", f"arn:aws:sqs:{ACCOUNT_REGION}:b")
    assert config.target_sns_topic_arns == (f"arn:aws:sns:{ACCOUNT_REGION}:t",)


def test_cli_can_clear_an_optional_value() -> None:
    node = FakeNode({"punctual": {"alarm_email": "ops@example.com"}, "punctual.alarm_email": "none"})
    assert load_config(node).alarm_email is None


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"shard_count": 0}, "shard_count"),
        ({"shard_count": 4097}, "shard_count"),
        ({"lookahead_seconds": 781}, "lookahead_seconds"),
        ({"lease_seconds": 4}, "lease_seconds"),
        ({"worker_batch_size": 11}, "worker_batch_size"),
        ({"worker_max_concurrency": 1}, "worker_max_concurrency"),
        ({"sweeper_reserved_concurrency": -1}, "sweeper_reserved_concurrency"),
        ({"api_reserved_concurrency": -1}, "api_reserved_concurrency"),
        ({"bulk_max_running": -1}, "bulk_max_running"),
        ({"sweep_safety_seconds": 60}, "sweep_safety_seconds"),
        ({"api_throttle_rate_limit": 0}, "api_throttle_rate_limit"),
        ({"console_throttle_rate_limit": 60}, "console_throttle_rate_limit"),  # above the stage's 50
        ({"api_throttle_burst_limit": 10}, "console_throttle_burst_limit"),  # the console's 20 above the stage's
        ({"stage": "Prod_1"}, "stage"),
        ({"alarm_email": "not-an-address"}, "alarm_email"),
        ({"log_retention_days": 31}, "log_retention_days"),
        ({"log_level": "TRACE"}, "log_level"),
        ({"shrad_count": 8}, "shrad_count"),
        ({"target_sqs_queue_arns": [f"arn:aws:sqs:{ACCOUNT_REGION}:*"]}, "target_sqs_queue_arns"),
        ({"target_sqs_queue_arns": [f"arn:aws:sns:{ACCOUNT_REGION}:topic"]}, "target_sqs_queue_arns"),
        (
            {"target_lambda_function_arns": [f"arn:aws:lambda:{ACCOUNT_REGION}:function:*"]},
            "target_lambda_function_arns",
        ),
        ({"target_event_bus_arns": ["*"]}, "target_event_bus_arns"),
        ({"target_sns_topic_arns": [f"arn:aws:sns:{ACCOUNT_REGION}:t"] * 2}, "target_sns_topic_arns"),
        ({"operators": ["arn:aws:iam::123456789012:role/oncall"]}, "operators"),  # no unique id: matches no tenant
    ],
)
def test_invalid_values_are_rejected_naming_the_key(settings: dict, key: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(settings)
    assert f"punctual.{key}:" in str(raised.value)


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config({"shard_count": 0, "lookahead_seconds": 9999})
    assert "punctual.shard_count" in str(raised.value)
    assert "punctual.lookahead_seconds" in str(raised.value)


def test_the_app_refuses_to_build_with_invalid_context() -> None:
    with pytest.raises(ConfigError, match=r"punctual\.shard_count"):
        build_app({"punctual": {"shard_count": 5000}, "aws:cdk:bundling-stacks": []})


def test_stack_is_named_after_the_stage(default, configured) -> None:
    assert default.stack.stack_name == "punctual-dev"
    assert configured.stack.stack_name == "punctual-prod"


def test_function_settings_have_one_home_in_the_functions_settings() -> None:
    """A function setting is declared once, on scheduler.settings.Settings: the deployment names it, takes its
    bounds from there and restates no default (cdk.json ships it unset)."""
    from punctual_cdk.config import function_settings
    from scheduler.settings import Settings

    names = function_settings()
    assert "shard_count" in names and "tenant_request_rate" in names
    for name in names:
        ours, theirs = PunctualConfig.model_fields[name], Settings.model_fields[name]
        assert ours.default is None and CDK_JSON_SETTINGS[name] is None, name
        assert ours.annotation == theirs.annotation | None, name
        assert set(map(repr, theirs.metadata)) <= set(map(repr, ours.metadata)), name


@pytest.mark.parametrize(("key", "value"), [("shard_count", 4097), ("sweep_safety_seconds", 50), ("lease_seconds", 1)])
def test_a_function_setting_out_of_its_bounds_fails_the_synth(key: str, value: int) -> None:
    with pytest.raises(ConfigError, match=key):
        parse_config({key: value})
