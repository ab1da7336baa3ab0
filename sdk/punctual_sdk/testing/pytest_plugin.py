"""The `punctual` pytest fixture: a started `TestScheduler`, closed after the test.

    # conftest.py
    pytest_plugins = ["punctual_sdk.testing.pytest_plugin"]

    def test_charges_once(punctual):
        punctual.handler("billing.charge")(charge)
        ...

A test that needs receivers, a start time or settings at construction marks itself:
`@pytest.mark.punctual(receivers=app, start=datetime(2026, 3, 28, tzinfo=UTC))` (the marker's keyword arguments
are `TestScheduler`'s).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from punctual_sdk.testing.scheduler import TestScheduler


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "punctual(**options): options of the test's `punctual` TestScheduler")


@pytest.fixture
def punctual(request: pytest.FixtureRequest) -> Iterator[TestScheduler]:
    """A started test scheduler (moto, virtual clock), closed after the test."""
    marker = request.node.get_closest_marker("punctual")
    options = dict(marker.kwargs) if marker is not None else {}
    with TestScheduler(**options) as scheduler:
        yield scheduler
