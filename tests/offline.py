"""Tests that must never reach the network (unit tests, the simulator) refuse every connection and lookup."""

from __future__ import annotations

import socket
from typing import Any

import pytest


class NetworkBlocked(RuntimeError):
    pass


def refuse_network(monkeypatch: pytest.MonkeyPatch, who: str) -> None:
    """Make every socket connection and name lookup fail for the rest of the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NetworkBlocked(f"{who} must not touch the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
