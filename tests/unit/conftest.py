"""Unit tests run the core with in-memory adapters and a fake clock; the network is blocked."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest


class NetworkBlocked(RuntimeError):
    pass


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NetworkBlocked("unit tests must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    yield


@pytest.fixture
def world() -> Any:
    """A fresh in-memory scheduler at Monday 2026-01-05 09:00 UTC (see tests/unit/fixtures.py)."""
    from tests.unit.fixtures import World

    return World.build()
