"""Unit tests run the core with in-memory adapters and a fake clock; the network is blocked."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.offline import refuse_network


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    refuse_network(monkeypatch, "unit tests")
    yield


@pytest.fixture
def world() -> Any:
    """A fresh in-memory scheduler at Monday 2026-01-05 09:00 UTC (see tests/unit/fixtures.py)."""
    from tests.unit.fixtures import MemoryCore

    return MemoryCore.build()
