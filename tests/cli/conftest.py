"""Fixtures of the CLI tests: the network blocked for unit tests, an environment free of the caller's
PUNCTUAL_* settings, and (for the system tests) a local stack of their own, as tests/system starts one."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "system"))

from harness import LocalStack, receiver, serve  # noqa: F401 (receiver: a fixture for these tests)

from tests.offline import refuse_network


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI reads these; a developer's shell must not change what a test sees."""
    for name in ("PUNCTUAL_API_URL", "PUNCTUAL_TOKEN", "SCHEDULER_STATE_DIR"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_network(monkeypatch, "CLI unit tests")


@pytest.fixture(scope="session")
def stack(aws_endpoints: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A local stack (as scripts/dev runs it) for the CLI's system tests, tokens t-alice, t-bob, t-fuzz; bob is its
    operator."""
    env = {**aws_endpoints, "SCHEDULER_OPERATORS": json.dumps(["bob"])}
    yield from serve(LocalStack(Path(tmp_path_factory.mktemp("cli-stack")), env))
