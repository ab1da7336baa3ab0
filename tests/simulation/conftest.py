"""The simulation runs the core on in-memory adapters with a fake clock: it never needs the network."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.offline import refuse_network


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    refuse_network(monkeypatch, "the simulation")
    yield
