from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from crashable import CrashableCore


@pytest.fixture(params=["memory", "dynamodb"])
def world(request: pytest.FixtureRequest) -> CrashableCore:
    """The same protocol test against the in-memory adapters and against DynamoDB Local (which, unlike moto,
    rejects expressions real DynamoDB rejects)."""
    if request.param == "memory":
        return CrashableCore.build("memory")
    resources: Any = request.getfixturevalue("resources")
    return CrashableCore.build("dynamodb", resources, request.getfixturevalue("dynamodb_client"))
