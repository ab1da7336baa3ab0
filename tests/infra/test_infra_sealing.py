"""The KMS key that seals secret header values: the api seals and opens, the worker opens, the sweeper neither."""

from __future__ import annotations

import pytest

from punctual_cdk.sealing import HEADER_KEY_VARIABLE


def test_the_key_rotates(default) -> None:
    key = default.resources("AWS::KMS::Key")[default.logical_id(default.punctual.sealing.key)]
    assert key["Properties"]["EnableKeyRotation"] is True


@pytest.mark.parametrize(
    "handler, actions",
    [("api", {"kms:GenerateDataKey", "kms:Decrypt"}), ("worker", {"kms:Decrypt"}), ("sweeper", set())],
)
def test_each_function_may_do_exactly_its_part_with_the_key(default, handler: str, actions: set[str]) -> None:
    key = default.punctual.sealing.key
    assert default.actions_on(handler, key) == actions


@pytest.mark.parametrize("handler, named", [("api", True), ("worker", True), ("sweeper", False)])
def test_the_sealing_functions_know_the_key(default, handler: str, named: bool) -> None:
    _, props = default.function(handler)
    variables = props["Environment"]["Variables"]
    assert (HEADER_KEY_VARIABLE in variables) is named
    if named:
        assert default.logical_id(default.punctual.sealing.key) in str(variables[HEADER_KEY_VARIABLE])
