"""Fixtures of the SDK client's tests: a scripted API (no network) that records each request (fake_api.py).

These tests also run against the installed wheel (scripts/sdk-check), so they import only `punctual_sdk`, pytest
and tests/sdk's own modules - never the scheduler's core.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.sdk.client.fake_api import FakeApi, job_json, problem


@pytest.fixture
def api() -> FakeApi:
    """A scripted API; set `api.answers` and make a client with `api.client()`."""
    return FakeApi()


@pytest.fixture(name="problem")
def problem_fixture() -> Callable[..., tuple[int, dict[str, Any]]]:
    return problem


@pytest.fixture(name="job_json")
def job_json_fixture() -> Callable[..., dict[str, Any]]:
    return job_json
