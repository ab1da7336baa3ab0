"""Fixtures of the adapter contract suite: every port fixture is parametrised over its implementations, so one
test function asserts the same behaviour of the in-memory adapter and of the real one (DynamoDB Local / moto).

Test modules cannot import each other under `--import-mode=importlib`, so the builders they share (jobs,
timers, dispatches at fixed instants) are handed out as fixtures too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoJobStore, DynamoLedger, DynamoTimerStore
from scheduler.adapters.memory import FakeClock
from scheduler.composition import memory_stores
from scheduler.core.model.job import Job, JobSpec, JobState
from scheduler.core.ports import Dispatch, Timer
from scheduler.core.sweep.dispatch import timer_for

#: Every instant in the contract tests is fixed: the adapters take `now` as an argument, never read a clock.
# In the future on purpose: DynamoDB Local really deletes items whose TTL attribute lies in the (real) past.
T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
SHARDS = 4

BACKENDS = ["memory", pytest.param("dynamodb", marks=pytest.mark.emulator)]


def jobs_table_store(
    request: pytest.FixtureRequest, memory: Callable[[], Any], dynamo: Callable[[str, Any], Any]
) -> Any:
    """The store a contract fixture parametrised over BACKENDS hands out: `memory()`, or `dynamo(table, client)` on
    the jobs table of DynamoDB Local."""
    if request.param == "memory":
        return memory()
    resources = request.getfixturevalue("resources")
    return dynamo(resources.jobs_table, request.getfixturevalue("dynamodb_client"))


@dataclass
class Stores:
    """One implementation of each storage port, sharing one backend (the jobs and timers share a table)."""

    name: str
    jobs: Any
    timers: Any
    ledger: Any


@pytest.fixture(params=BACKENDS)
def stores(request: pytest.FixtureRequest) -> Stores:
    if request.param == "memory":
        memory = memory_stores(FakeClock(), SHARDS)
        return Stores("memory", memory.jobs, memory.timers, memory.ledger)
    resources = request.getfixturevalue("resources")
    client = request.getfixturevalue("dynamodb_client")
    return Stores(
        "dynamodb",
        DynamoJobStore(resources.jobs_table, SHARDS, client),
        DynamoTimerStore(resources.jobs_table, SHARDS, client),
        DynamoLedger(resources.executions_table, client),
    )


@pytest.fixture
def jobs(stores: Stores) -> Any:
    return stores.jobs


@pytest.fixture
def timers(stores: Stores) -> Any:
    return stores.timers


@pytest.fixture
def ledger(stores: Stores) -> Any:
    return stores.ledger


# -- builders ---------------------------------------------------------------------------------------------

_counter = iter(range(1_000_000))


def new_id(prefix: str = "job") -> str:
    return f"{prefix}{next(_counter):06d}"


def spec(schedule: dict[str, Any] | None = None, payload: Any = None) -> JobSpec:
    return JobSpec.model_validate(
        {
            "name": "contract",
            "schedule": schedule or {"type": "rate", "every_seconds": 60},
            "target": {"type": "http", "url": "https://example.com/hook"},
            "payload": {"ratio": 0.1, "n": [1.5, 2]} if payload is None else payload,
        }
    )


def build_job(
    tenant: str = "tenant-a",
    *,
    job_id: str | None = None,
    created_at: datetime = T0,
    state: JobState = JobState.ACTIVE,
    version: int = 1,
    schedule: dict[str, Any] | None = None,
    next_run_at: datetime | None = None,
    last_dispatched_for: datetime | None = None,
) -> Job:
    return Job(
        job_id=job_id or new_id(),
        tenant=tenant,
        spec=spec(schedule),
        version=version,
        state=state,
        created_at=created_at,
        updated_at=created_at,
        next_run_at=next_run_at if next_run_at is not None else created_at + timedelta(seconds=60),
        last_dispatched_for=last_dispatched_for,
    )


def build_timer(job: Job, scheduled_for: datetime | None = None) -> Timer:
    return timer_for(job, scheduled_for or job.next_run_at or job.created_at)


def build_dispatch(job_id: str | None = None, scheduled_for: datetime = T0, tenant: str = "tenant-a") -> Dispatch:
    return Dispatch(job_id or new_id(), tenant, scheduled_for, scheduled_for, 1)


@dataclass(frozen=True)
class Builders:
    t0: datetime
    new_id: Callable[..., str]
    spec: Callable[..., JobSpec]
    job: Callable[..., Job]
    timer: Callable[..., Timer]
    dispatch: Callable[..., Dispatch]


@pytest.fixture
def make() -> Builders:
    return Builders(T0, new_id, spec, build_job, build_timer, build_dispatch)
