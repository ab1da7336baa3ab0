from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from harness import LocalStack, browser, receiver, serve  # noqa: F401 (browser, receiver: fixtures for these tests)


@pytest.fixture(scope="session")
def stack(aws_endpoints: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """One local stack (as scripts/dev runs it) for the system tests, on its own port and state folder."""
    # carol may run one occurrence at a time (test_execution_budgets); everyone else has the defaults
    env = {**aws_endpoints, "SCHEDULER_TENANT_BUDGETS": json.dumps({"carol": {"concurrency": 1}})}
    tokens = "t-alice=alice,t-bob=bob,t-fuzz=fuzz,t-carol=carol"
    yield from serve(LocalStack(Path(tmp_path_factory.mktemp("stack")), env, tokens))
