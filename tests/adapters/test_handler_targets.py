"""The `handler` target (`scheduler.targets.registry`) and the example handler `payments.charge` (against
DynamoDB Local)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler.adapters.memory import FakeClock, RecordingMetrics
from scheduler.composition import memory_stores
from scheduler.core.errors import LeaseLost
from scheduler.core.execution.executor import ExecuteConfig, Executor
from scheduler.core.model.job import Job, JobSpec, RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.ports import Dispatch, TargetCall, TargetFailure
from scheduler.core.records import Attempt
from scheduler.examples import payments
from scheduler.provision import EXAMPLE_TABLE, create_table
from scheduler.targets.registry import HandlerContext, HandlerRegistry, HandlerTargetInvoker, registry

# In the future on purpose: DynamoDB Local really deletes items whose TTL attribute lies in the (real) past.
T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)
TENANT = "tenant-a"


def make_job(name: str, payload: Any = None, job_id: str | None = None) -> Job:
    spec = JobSpec.model_validate(
        {
            "schedule": {"type": "rate", "every_seconds": 60},
            "target": {"type": "handler", "name": name},
            "payload": payload,
        }
    )
    return Job.new(job_id or uuid.uuid4().hex, TENANT, spec, T0)


def make_call(
    job: Job, *, attempt: int = 1, token: int = 1, heartbeat: Callable[[], None] = lambda: None
) -> TargetCall:
    return TargetCall(
        job=job,
        occurrence_key=occurrence_key(job.job_id, T0),
        scheduled_for=T0,
        attempt=attempt,
        fencing_token=token,
        heartbeat=heartbeat,
        deadline=T0 + timedelta(seconds=30),
    )


# -- the registry ---------------------------------------------------------------------------------------------


def test_registered_handler_is_found_by_name_and_called_with_the_occurrence() -> None:
    # Given a handler registered by name
    handlers = HandlerRegistry()
    seen: list[HandlerContext] = []

    @handlers.register("reports.nightly")
    def nightly(context: HandlerContext) -> str:
        seen.append(context)
        return "sent 3 reports"

    assert handlers.lookup("reports.nightly") is nightly
    assert handlers.names() == ["reports.nightly"]

    # When a job targeting it runs
    job = make_job("reports.nightly", payload={"day": "monday"})
    result = HandlerTargetInvoker(handlers).invoke(make_call(job, attempt=2, token=9))

    # Then it received the occurrence and its result is the run's result
    assert result == "sent 3 reports"
    (context,) = seen
    assert context.occurrence_key == occurrence_key(job.job_id, T0)
    assert (context.fencing_token, context.attempt) == (9, 2)
    assert (context.job_id, context.tenant) == (job.job_id, TENANT)
    assert context.scheduled_for == T0
    assert context.deadline == T0 + timedelta(seconds=30)
    assert context.payload == {"day": "monday"}


def test_unknown_handler_is_a_permanent_failure_naming_the_registered_ones() -> None:
    handlers = HandlerRegistry()
    handlers.register("a.one")(lambda context: None)
    handlers.register("b.two")(lambda context: None)

    with pytest.raises(TargetFailure) as raised:
        HandlerTargetInvoker(handlers).invoke(make_call(make_job("c.three")))

    assert raised.value.kind == "permanent"
    assert "'c.three'" in raised.value.message
    assert "a.one, b.two" in raised.value.message


def test_a_name_cannot_be_taken_twice_or_be_invalid() -> None:
    handlers = HandlerRegistry()
    handlers.register("jobs.one")(lambda context: None)
    with pytest.raises(ValueError, match="already registered"):
        handlers.register("jobs.one")(lambda context: "other")
    with pytest.raises(ValueError, match="not valid"):
        handlers.register("1 bad name")


@pytest.mark.parametrize(
    ("returned", "result"),
    [(None, None), ("done", "done"), ({"charged": 2, "ids": [1, 2]}, '{"charged":2,"ids":[1,2]}'), (42, "42")],
)
def test_the_return_value_becomes_the_short_result(returned: object, result: str | None) -> None:
    handlers = HandlerRegistry()
    handlers.register("value.returned")(lambda context: returned)
    assert HandlerTargetInvoker(handlers).invoke(make_call(make_job("value.returned"))) == result


def test_a_long_result_is_cut_short() -> None:
    handlers = HandlerRegistry()
    handlers.register("value.long")(lambda context: "x" * 5000)
    result = HandlerTargetInvoker(handlers).invoke(make_call(make_job("value.long")))
    assert result is not None and len(result) == 1000 and result.endswith("...")


def test_target_failures_pass_through_and_other_exceptions_propagate() -> None:
    handlers = HandlerRegistry()
    declined = TargetFailure("permanent", "card declined")

    @handlers.register("fails.classified")
    def classified(context: HandlerContext) -> None:
        raise declined

    @handlers.register("fails.crashing")
    def crashing(context: HandlerContext) -> None:
        raise KeyError("account")

    invoker = HandlerTargetInvoker(handlers)
    with pytest.raises(TargetFailure) as raised:
        invoker.invoke(make_call(make_job("fails.classified")))
    assert raised.value is declined
    with pytest.raises(KeyError):
        invoker.invoke(make_call(make_job("fails.crashing")))


# -- heartbeats ---------------------------------------------------------------------------------------------


def test_heartbeat_calls_the_executors_heartbeat_and_lease_lost_propagates() -> None:
    # Given a handler that heartbeats between steps, and a heartbeat that finds the lease gone on the second beat
    handlers = HandlerRegistry()
    steps: list[int] = []
    beats: list[int] = []

    def heartbeat() -> None:
        beats.append(len(beats) + 1)
        if len(beats) == 2:
            raise LeaseLost("another worker holds the occurrence")

    @handlers.register("batch.long")
    def long_batch(context: HandlerContext) -> str:
        for step in range(5):
            context.heartbeat()
            steps.append(step)
        return "all done"

    # When it runs
    with pytest.raises(LeaseLost):
        HandlerTargetInvoker(handlers).invoke(make_call(make_job("batch.long"), heartbeat=heartbeat))

    # Then LeaseLost came out of invoke, and the handler did no work after it
    assert beats == [1, 2]
    assert steps == [0]


class StubMessage:
    receive_count = 1

    def __init__(self) -> None:
        self.extensions: list[int] = []

    def extend_visibility(self, seconds: int) -> None:
        self.extensions.append(seconds)


def test_executor_aborts_without_writing_when_a_handler_loses_its_lease() -> None:
    # Given a handler that pauses past its lease while another worker takes the occurrence over, then heartbeats
    clock = FakeClock(T0)
    stores, metrics = memory_stores(clock), RecordingMetrics()
    jobs, ledger, queue = stores.jobs, stores.ledger, stores.queue
    job = make_job("batch.paused")
    jobs.create(job, None, None, False, 100)
    dispatch = Dispatch(job.job_id, TENANT, T0, T0, 1)
    lease = timedelta(seconds=30)
    handlers = HandlerRegistry()
    wrote_after_heartbeat: list[bool] = []

    @handlers.register("batch.paused")
    def paused(context: HandlerContext) -> str:
        clock.advance(lease.total_seconds() + 5)
        ledger.claim(dispatch, Attempt("worker-2/other", clock.now(), clock.now() + lease, True))
        context.heartbeat()
        wrote_after_heartbeat.append(True)
        return "done"

    executor = Executor(
        jobs,
        ledger,
        queue,
        {"handler": HandlerTargetInvoker(handlers)},
        clock,
        ExecuteConfig(lease=lease, heartbeat_fraction=None),
        metrics,
        "worker-1",
    )

    # When worker 1 runs the occurrence
    outcome = executor.execute(dispatch, StubMessage())

    # Then it aborts: nothing after the heartbeat ran, and the ledger still belongs to worker 2
    assert outcome.reason == "lease lost"
    assert wrote_after_heartbeat == []
    execution = ledger.get(dispatch.key)
    assert execution is not None
    assert (execution.state, execution.epoch, execution.owner) == (RunState.RUNNING, 2, "worker-2/other")
    assert metrics.counts.get("LeaseLost") == 1


# -- the example handler ------------------------------------------------------------------------------------


def test_the_example_handlers_are_registered_only_where_configured() -> None:
    # A fresh interpreter (this one imported the examples above): the production worker registers nothing
    # by itself, and the configured modules when asked to (the local stack lists scheduler.examples).
    code = (
        "from scheduler.targets.registry import registry, register_handler_modules; print(registry.names()); "
        "register_handler_modules(['scheduler.examples']); print(registry.names())"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "functions")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == ["[]", "['payments.charge']"]
    assert registry.lookup("payments.charge") is payments.charge


@pytest.fixture
def payments_table(dynamodb_client: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh payments table in DynamoDB Local, as the local stack provisions it, named in the environment as the
    worker would have it."""
    name = f"payments-{uuid.uuid4().hex[:10]}"
    create_table(dynamodb_client, EXAMPLE_TABLE, name)
    monkeypatch.setenv(payments.TABLE_ENV, name)
    monkeypatch.setattr(payments, "dynamodb_client", lambda: dynamodb_client)
    return name


def payment_items(dynamodb_client: Any, table: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = dynamodb_client.scan(TableName=table, ConsistentRead=True)["Items"]
    return items


CHARGE = {"account": "acct-42", "amount": "12.50", "currency": "EUR"}


@pytest.mark.emulator
def test_example_charges_once_per_occurrence_key(dynamodb_client: Any, payments_table: str) -> None:
    # Given a job that charges an account
    job = make_job("payments.charge", payload=CHARGE)
    invoker = HandlerTargetInvoker()

    # When the occurrence runs, and runs again after a crash (the retry carries a higher fencing token)
    first = invoker.invoke(make_call(job, attempt=1, token=1))
    second = invoker.invoke(make_call(job, attempt=2, token=2))

    # Then there is one payment, made by the first attempt, and the retry reports it
    assert first == "charged 12.50 EUR"
    assert second == "already charged (by the attempt with fencing token 1)"
    (item,) = payment_items(dynamodb_client, payments_table)
    assert item["PK"] == {"S": "PAYMENT#" + occurrence_key(job.job_id, T0)}
    assert item["amount"] == {"N": "12.5"}  # DynamoDB normalises numbers
    assert item["fencing_token"] == {"N": "1"}


@pytest.mark.emulator
def test_example_a_stale_worker_waking_up_late_does_not_charge_again(dynamodb_client: Any, payments_table: str) -> None:
    # Given the new holder (token 2) charged first
    job = make_job("payments.charge", payload=CHARGE)
    invoker = HandlerTargetInvoker()
    invoker.invoke(make_call(job, attempt=2, token=2))

    # When the paused worker of the earlier attempt (token 1) gets to its charge
    late = invoker.invoke(make_call(job, attempt=1, token=1))

    # Then it finds the payment there
    assert late == "already charged (by the attempt with fencing token 2)"
    assert len(payment_items(dynamodb_client, payments_table)) == 1


@pytest.mark.emulator
def test_example_each_occurrence_is_its_own_charge(dynamodb_client: Any, payments_table: str) -> None:
    invoker = HandlerTargetInvoker()
    invoker.invoke(make_call(make_job("payments.charge", payload=CHARGE)))
    invoker.invoke(make_call(make_job("payments.charge", payload=CHARGE)))
    assert len(payment_items(dynamodb_client, payments_table)) == 2


@pytest.mark.parametrize("payload", [None, {"amount": "lots"}, {"amount": -5}, {"amount": True}, {"account": "a"}])
def test_example_refuses_a_payload_without_a_positive_amount(payload: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(payments.TABLE_ENV, "unused")
    monkeypatch.setattr(payments, "dynamodb_client", lambda: pytest.fail("must not write"))
    with pytest.raises(TargetFailure) as raised:
        HandlerTargetInvoker().invoke(make_call(make_job("payments.charge", payload=payload)))
    assert raised.value.kind == "permanent"
    assert "amount" in raised.value.message


def test_example_without_its_table_is_a_permanent_failure_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(payments.TABLE_ENV, raising=False)
    with pytest.raises(TargetFailure) as raised:
        HandlerTargetInvoker().invoke(make_call(make_job("payments.charge", payload=CHARGE)))
    assert raised.value.kind == "permanent"
    assert payments.TABLE_ENV in raised.value.message
