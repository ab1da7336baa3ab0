"""Shared fixtures. Emulator-backed tests use DynamoDB Local and ministack (SQS and the other services): the ones
scripts/test started (it exports AWS_ENDPOINT_URL_*), or ones started here for a direct `pytest` run."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from scheduler.adapters.fast_calls import fast_calls
from scheduler.provision import Resources, deprovision, provision
from scheduler_local import emulators

ROOT = Path(__file__).resolve().parents[1]

#: Fixtures that reach the emulators. A test that uses one (directly, through another fixture, or as the
#: "dynamodb" parameter of a backend fixture) is marked `emulator` here, so `-m "not emulator"` selects exactly
#: the tests that run without DynamoDB Local and the SQS emulator, and no test module has to remember the mark.
EMULATOR_FIXTURES = frozenset(
    {"aws_endpoints", "aws_env", "dynamodb_client", "sqs_client", "events_client", "resources"}
)
EMULATOR_BACKENDS = frozenset({"dynamodb", "sqs"})


#: The system test files that take minutes (measured with --durations on 2 workers), longest first. `scripts/test`
#: spreads the system tests over three workers a file at a time, in the order collected: these start first, so the
#: short files fill the gaps instead of one of these running last, alone.
LONGEST_FIRST = (
    "test_jobs_as_code_deploy.py",
    "test_deploy.py",
    "test_bench.py",
    "test_prescale_local.py",
    "test_schemathesis.py",
    "test_flow_control.py",
    "test_careful_user.py",
    "test_chaos.py",
    "test_sweepers.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        backends = {value for value in (callspec.params.values() if callspec else ()) if isinstance(value, str)}
        if fixtures & EMULATOR_FIXTURES or backends & EMULATOR_BACKENDS or item.get_closest_marker("system"):
            item.add_marker(pytest.mark.emulator)
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(scope="session")
def aws_endpoints() -> Iterator[dict[str, str]]:
    """Endpoint and credential variables for boto3 clients that talk to the emulators."""
    if os.environ.get("PUNCTUAL_NO_EMULATORS"):
        pytest.fail("a test selected with PUNCTUAL_NO_EMULATORS set reached the emulators: mark it `emulator`")
    if os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") and os.environ.get("AWS_ENDPOINT_URL_SQS"):
        env = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
        env.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        yield env
        return
    started = emulators.start(ROOT / ".local" / "logs")
    env = {**started.env()}
    try:
        yield env
    finally:
        started.stop()


@pytest.fixture(scope="session")
def aws_env(aws_endpoints: dict[str, str]) -> Iterator[dict[str, str]]:
    """Set the endpoint variables in this process for the session (boto3 reads them)."""
    saved = {k: os.environ.get(k) for k in aws_endpoints}
    os.environ.update(aws_endpoints)
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    yield aws_endpoints
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def dynamodb_client(aws_env: dict[str, str]) -> Any:
    """As the functions have it: its per-occurrence calls on the fast path (scheduler.adapters.fast_calls)."""
    return fast_calls(boto3.client("dynamodb", region_name=aws_env.get("AWS_DEFAULT_REGION", "us-east-1")))


@pytest.fixture(scope="session")
def sqs_client(aws_env: dict[str, str]) -> Any:
    return fast_calls(boto3.client("sqs", region_name=aws_env.get("AWS_DEFAULT_REGION", "us-east-1")))


@pytest.fixture(scope="session")
def events_client(aws_env: dict[str, str]) -> Any:
    """EventBridge on the local emulator (the completion-event bus `provision` makes)."""
    return boto3.client("events", region_name=aws_env.get("AWS_DEFAULT_REGION", "us-east-1"))


@pytest.fixture
def resources(dynamodb_client: Any, sqs_client: Any, events_client: Any) -> Iterator[Resources]:
    """Fresh tables and queues (unique names) for one test, deleted after it."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    made = provision(prefix, dynamodb_client, sqs_client, events=events_client)
    yield made
    deprovision(prefix, dynamodb_client, sqs_client, events_client)
