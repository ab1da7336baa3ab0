"""Per-tenant budgets through the sweeper handler (DynamoDB Local, moto SQS): a tenant over its budget is delayed
by DelaySeconds, its budget calendar is one item in the jobs table, and other tenants are not held back."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.core.model.timefmt import rfc3339, truncate_ms
from scheduler.handlers import sweeper, wiring
from scheduler.handlers.local_invocation import LocalContext

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

NOISY = "arn:aws:iam::111111111111:user/noisy"
QUIET = "arn:aws:iam::222222222222:user/quiet"


def create(api_call: Any, tenant: str, at: datetime) -> None:
    body = {"schedule": {"type": "once", "at": rfc3339(at)}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}}
    assert api_call("POST", "/v1/jobs", body, tenant=tenant).status == 201


def test_a_tenant_over_its_budget_is_delayed_and_another_is_not(env, api_call, dynamodb_client, monkeypatch) -> None:
    # Given the noisy tenant may release 5 occurrences per 5 s window (rate 1/s, burst 5); everyone else 100/s
    monkeypatch.setenv("SCHEDULER_TENANT_BUDGETS", json.dumps({NOISY: {"rate": 1, "burst": 5}}))
    wiring.container.cache_clear()
    at = truncate_ms(datetime.now(UTC) + timedelta(seconds=60))
    for _ in range(15):
        create(api_call, NOISY, at)
    for _ in range(3):
        create(api_call, QUIET, at)
    # (record when each message is released: the moment it is sent plus its DelaySeconds - unlike arrival times on
    # a busy machine, exact to the second DelaySeconds rounds down to)
    queue = wiring.container(sweeper.metrics).queue
    released: dict[str, list[float]] = {NOISY: [], QUIET: []}
    real_send = queue.client.send_message_batch

    def spy(**kwargs: Any) -> Any:
        sent_at = time.time() - at.timestamp()
        for entry in kwargs["Entries"]:
            # (a message may carry several occurrences of its tenant, released together)
            carried = int(entry["MessageAttributes"].get("occurrences", {"StringValue": "1"})["StringValue"])
            tenant = entry["MessageAttributes"]["tenant"]["StringValue"]
            released[tenant] += [sent_at + entry["DelaySeconds"]] * carried
        return real_send(**kwargs)

    monkeypatch.setattr(queue.client, "send_message_batch", spy)

    # When the sweeper dispatches them
    sweeper.lambda_handler({"source": "aws.events"}, LocalContext("punctual-sweeper", 60))

    # Then the quiet tenant's three and the noisy tenant's first five are released at their time (up to the second
    # DelaySeconds rounds down); the other ten a window and two windows later (windows start on multiples of 5 s)
    assert len(released[QUIET]) == 3 and len(released[NOISY]) == 15
    assert all(-1 < r <= 0 for r in released[QUIET])
    noisy = sorted(released[NOISY])
    assert all(-1 < r <= 0 for r in noisy[:5])
    assert all(-1 < r <= 5 for r in noisy[5:10])
    assert all(5 - 1 < r <= 10 for r in noisy[10:])

    # And each tenant's budget is one item next to its quota counter
    item = dynamodb_client.get_item(
        TableName=env.jobs_table, Key={"PK": {"S": f"TENANT#{NOISY}"}, "SK": {"S": "BUDGET"}}, ConsistentRead=True
    )["Item"]
    assert int(item["window_ms"]["N"]) == 5000
    assert sorted(int(count["N"]) for count in item["slots"]["M"].values()) == [5, 5, 5]
