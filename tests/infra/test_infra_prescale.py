"""Pre-scaling in the template: provisioned worker mappings, and the sweeper's least-privilege grant to read and set
exactly their pollers (cdk/punctual_cdk/prescale.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

ACTIONS = {"lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"}


@pytest.fixture(scope="module")
def prescaled(synth: Any) -> Any:
    return synth({"prescale": True, "prescale_ceiling_pollers": 80, "prescale_maximum_pollers": 400})


def mappings(stack: Any) -> dict[str, dict[str, Any]]:
    return stack.resources("AWS::Lambda::EventSourceMapping")


def every_statement(stack: Any) -> list[dict[str, Any]]:
    policies = stack.resources("AWS::IAM::Policy").values()
    return [s for p in policies for s in p["Properties"]["PolicyDocument"]["Statement"]]


def actions_of(statement: dict[str, Any]) -> set[str]:
    action = statement["Action"]
    return set(action if isinstance(action, list) else [action])


def test_off_by_default_the_mappings_stay_in_standard_mode_and_nobody_may_change_them(default: Any) -> None:
    for mapping in mappings(default).values():
        assert "ProvisionedPollerConfig" not in mapping["Properties"]
        assert mapping["Properties"]["ScalingConfig"]["MaximumConcurrency"] >= 2
    assert not any(actions_of(s) & ACTIONS or "lambda:*" in actions_of(s) for s in every_statement(default))
    _, sweeper = default.function("sweeper")
    assert "SCHEDULER_PRESCALE_ENABLED" not in sweeper["Environment"]["Variables"]


def test_on_every_worker_mapping_is_provisioned_at_the_floor_without_a_maximum_concurrency(prescaled: Any) -> None:
    found = mappings(prescaled)
    assert len(found) == 3  # one per priority lane
    for mapping in found.values():
        props = mapping["Properties"]
        assert props["ProvisionedPollerConfig"] == {"MinimumPollers": 2, "MaximumPollers": 400}
        assert "ScalingConfig" not in props  # AWS refuses both together


def test_the_sweeper_may_get_and_update_exactly_those_mappings_and_nothing_else_may(prescaled: Any) -> None:
    ids = set(mappings(prescaled))
    grants = [s for s in prescaled.statements("sweeper") if actions_of(s) & ACTIONS]
    assert len(grants) == 1
    (grant,) = grants
    assert actions_of(grant) == ACTIONS and grant["Effect"] == "Allow"
    resources = grant["Resource"] if isinstance(grant["Resource"], list) else [grant["Resource"]]
    assert len(resources) == len(ids)
    text = json.dumps(resources)
    assert all(logical_id in text for logical_id in ids) and "*" not in text
    for handler in ("api", "worker"):
        assert not any(actions_of(s) & ACTIONS for s in prescaled.statements(handler))


def test_the_sweeper_is_told_which_mapping_is_which_lane_and_its_ceiling(prescaled: Any) -> None:
    _, sweeper = prescaled.function("sweeper")
    env = sweeper["Environment"]["Variables"]
    assert env["SCHEDULER_PRESCALE_ENABLED"] == "true"
    assert env["SCHEDULER_PRESCALE_CEILING_POLLERS"] == "80" and env["SCHEDULER_PRESCALE_MAXIMUM_POLLERS"] == "400"
    lanes = json.dumps(env["SCHEDULER_PRESCALE_MAPPINGS"])
    for lane in ("high", "normal", "low"):
        assert f'\\"{lane}\\"' in lanes
    assert all(logical_id in lanes for logical_id in mappings(prescaled))


def test_the_ceiling_is_validated_against_what_aws_accepts() -> None:
    from punctual_cdk.config import ConfigError, parse_config

    with pytest.raises(ConfigError, match="prescale_ceiling_pollers"):
        parse_config({"prescale_ceiling_pollers": 201})
    with pytest.raises(ConfigError, match="prescale_maximum_pollers"):
        parse_config({"prescale_maximum_pollers": 2001})
