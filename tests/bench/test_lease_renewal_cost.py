"""What renewing an occurrence's lease costs, metered on DynamoDB Local and ministack (docs/cost.md, "Long calls: the
lease's renewals"): one renewal is a conditional update of the ledger item (1 write unit), one of the execution slot
when the tenant has an execution budget (1 more), and one ChangeMessageVisibility; the background heartbeat renews
once a period (a third of the lease) while the target runs."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.sqs import SqsMessage
from scheduler.composition import Configs
from scheduler.core.model.job import JobSpec
from scheduler.core.ports import Dispatch, TargetCall
from scheduler.core.runtime.metrics import NullMetrics
from scheduler.handlers import wiring
from scheduler.provision import Resources
from scheduler_bench.metering import Meter
from scheduler_bench.services import client, settings_for

TENANT = "bench"


class Renewing:
    """An `http` target that renews its lease `renewals` times (as a handler's `ctx.heartbeat()` does, and the
    background heartbeat at every period), metered as the phase "renewal", or just takes `seconds`."""

    def __init__(self, meter: Meter, renewals: int = 0, seconds: float = 0) -> None:
        self.meter, self.renewals, self.seconds = meter, renewals, seconds

    def invoke(self, call: TargetCall) -> str:
        for _ in range(self.renewals):
            with self.meter.phase("renewal"):
                call.heartbeat()
        with self.meter.phase("renewal"):
            time.sleep(self.seconds)  # (the background heartbeat's renewals fall in here)
        return "ok"


def run_one(resources: Resources, target: Renewing, meter: Meter, **settings: Any) -> Any:
    """One occurrence of a job through the deployed composition on metered clients, with `target` as its `http`
    target; the executor's outcome."""
    configured = settings_for(resources, "bench-signing-secret", 100).model_copy(update=settings)
    configs = Configs.of(configured)
    if not target.seconds:  # renewals by hand only: no background heartbeat
        configs = replace(configs, execute=replace(configs.execute, heartbeat_fraction=None))
    dynamodb, sqs = meter.attach(client("dynamodb")), meter.attach(client("sqs"))
    container = wiring.build(configured, NullMetrics(), clients=wiring.Clients(dynamodb, sqs, None), configs=configs)
    at = datetime.now(UTC).replace(microsecond=0)
    body = {"schedule": {"type": "once", "at": (at + timedelta(hours=1)).isoformat()}, "target": {"type": "http",
            "url": "http://127.0.0.1:9/never-called"}}  # fmt: skip
    with meter.phase("setup"):
        job = container.core.job_service().create(TENANT, JobSpec.model_validate(body), None, body).job
        plain = client("sqs")
        plain.send_message(QueueUrl=resources.ready_queue_url, MessageBody="the occurrence's message")
        [received] = plain.receive_message(QueueUrl=resources.ready_queue_url)["Messages"]
    message = SqsMessage(sqs, resources.ready_queue_url, received["ReceiptHandle"], 1)
    executor = container.new_executor("bench-worker", targets={"http": target})
    with meter.phase("setup"):
        return executor.execute(Dispatch(job.job_id, TENANT, at, at, job.version, "manual"), message)


@pytest.mark.parametrize(("budget", "slot_units"), [(0, 0), (5, 1)], ids=["no-execution-budget", "execution-budget"])
def test_a_renewal_costs_a_write_unit_on_the_ledger_one_on_the_slot_and_an_sqs_request(
    resources: Resources, budget: int, slot_units: int
) -> None:
    # Given an occurrence whose target renews its lease 4 times
    meter = Meter()

    outcome = run_one(resources, Renewing(meter, renewals=4), meter, tenant_max_concurrency=budget)

    # Then each renewal wrote the ledger item (and the slot, with an execution budget) and changed the message's
    # visibility once: nothing else
    assert outcome.ack
    renewals = meter.totals({"renewal"})
    per_renewal = {op: row["calls"] / 4 for op, row in renewals.by_operation.items()}
    assert per_renewal == {"dynamodb:UpdateItem": 1 + slot_units, "sqs:ChangeMessageVisibility": 1}
    assert renewals.write_units / 4 == 1 + slot_units
    assert (renewals.read_units, renewals.sqs_requests / 4) == (0, 1)


def test_the_background_heartbeat_renews_once_a_period_while_the_target_runs(resources: Resources) -> None:
    # Given the shortest lease (5 s: a beat every 5/3 s) and a target that takes 4 periods and a half
    meter = Meter()
    period = 5 / 3

    outcome = run_one(resources, Renewing(meter, seconds=4.5 * period), meter, lease_seconds=5)

    # Then the heartbeat renewed 4 times meanwhile: renewals per minute of call = 60 s / the period
    assert outcome.ack
    renewals = meter.totals({"renewal"})
    assert renewals.by_operation["sqs:ChangeMessageVisibility"]["calls"] == 4
    assert renewals.by_operation["dynamodb:UpdateItem"]["calls"] == 4
