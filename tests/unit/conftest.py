"""Unit tests run the core with in-memory adapters and a fake clock; the network is blocked."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.offline import refuse_network


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    refuse_network(monkeypatch, "unit tests")
    yield


@pytest.fixture
def no_connections(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The addresses that `socket.create_connection` is asked for, each refused with an OSError (as by a host that
    cannot be reached): a test asserts it stays empty, or which addresses were tried."""
    opened: list[Any] = []

    def refuse(address: Any, *args: Any, **kwargs: Any) -> Any:
        opened.append(address)
        raise OSError(f"the test refuses every connection ({address})")

    monkeypatch.setattr(socket, "create_connection", refuse)
    return opened


@pytest.fixture
def world() -> Any:
    """A fresh in-memory scheduler at Monday 2026-01-05 09:00 UTC (see tests/unit/fixtures.py)."""
    from tests.unit.fixtures import MemoryCore

    return MemoryCore.build()
