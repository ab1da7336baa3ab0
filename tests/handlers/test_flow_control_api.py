"""`/v1/flow-controls`: a tenant's flow-control keys through the api Lambda on DynamoDB Local - set by a job or a PUT
(last write wins), read with their live view, listed; bad limits are a 422 that says what to fix and change
nothing; a create beyond a key's max_backlog is a 429 naming the key."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.core.model.timefmt import rfc3339
from scheduler.handlers import sweeper
from scheduler.handlers.local_invocation import LocalContext

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT_A = "arn:aws:iam::111111111111:user/alice"
TENANT_B = "arn:aws:iam::222222222222:user/bob"


def keyed_job(flow: dict[str, Any], when: datetime | None = None) -> dict[str, Any]:
    at = when or datetime.now(UTC) + timedelta(minutes=30)
    return {
        "schedule": {"type": "once", "at": rfc3339(at)},
        "target": {"type": "http", "url": "http://127.0.0.1:9/hook"},
        "flow_control": flow,
    }


def test_a_job_names_a_key_a_put_changes_its_limits_and_each_tenant_has_its_own(api_call) -> None:
    created = api_call("POST", "/v1/jobs", keyed_job({"key": "payments-api", "rate": 50}), tenant=TENANT_A)
    assert created.status == 201, created.text
    assert created.body["flow_control"] == {"key": "payments-api", "rate": 50, "period_seconds": 1}

    key = api_call("GET", "/v1/flow-controls/payments-api", tenant=TENANT_A)
    assert key.status == 200, key.text
    assert key.body["rate"] == 50 and key.body["parallelism"] is None
    assert key.body["backlog"] == 0 and key.body["in_flight"] == 0 and key.body["rate_factor"] == 1.0

    put = api_call("PUT", "/v1/flow-controls/payments-api", {"parallelism": 4, "rate": 10, "period_seconds": 2},
                   tenant=TENANT_A)  # fmt: skip
    assert put.status == 200, put.text
    assert (put.body["rate"], put.body["period_seconds"], put.body["parallelism"]) == (10, 2, 4)
    assert api_call("GET", "/v1/flow-controls", tenant=TENANT_A).body["keys"][0]["parallelism"] == 4
    assert api_call("GET", "/v1/flow-controls/payments-api", tenant=TENANT_B).status == 404
    assert api_call("GET", "/v1/flow-controls", tenant=TENANT_B).body == {"keys": []}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),
        ({"rate": 0}, "rate"),
        ({"rate": 5, "period_seconds": 7200}, "period_seconds"),
        ({"rate": 100_000}, "body"),
        ({"rate": 5, "key": "other"}, "key"),
        ({"rate": 5, "burst": 9}, "burst"),
    ],
)
def test_bad_limits_are_a_422_that_names_the_field_and_change_nothing(api_call, snapshot, body, field) -> None:
    before = snapshot()
    response = api_call("PUT", "/v1/flow-controls/payments-api", body, tenant=TENANT_A)

    assert response.status == 422, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert field in response.text and response.body["detail"]
    assert snapshot() == before


def test_a_bad_key_in_the_path_or_a_job_is_a_422(api_call) -> None:
    assert api_call("PUT", "/v1/flow-controls/pay%20ments", {"rate": 1}, tenant=TENANT_A).status == 422
    refused = api_call("POST", "/v1/jobs", keyed_job({"key": "payments-api"}), tenant=TENANT_A)
    assert refused.status == 422 and "at least one of 'rate'" in refused.body["detail"]


def test_a_create_beyond_the_keys_max_backlog_is_a_429_naming_the_key(api_call) -> None:
    soon = datetime.now(UTC) + timedelta(seconds=40)
    flow = {"key": "slow-api", "rate": 1, "period_seconds": 60, "max_backlog": 2}
    for _ in range(3):
        assert api_call("POST", "/v1/jobs", keyed_job(flow, soon), tenant=TENANT_A).status == 201
    sweeper.lambda_handler({"source": "aws.events"}, LocalContext("punctual-sweeper", 60))  # the second and third held

    refused = api_call("POST", "/v1/jobs", keyed_job(flow, soon), tenant=TENANT_A)

    assert refused.status == 429, refused.text
    assert "slow-api" in refused.body["detail"] and int(refused.header("Retry-After") or 0) >= 1
    assert api_call("GET", "/v1/flow-controls/slow-api", tenant=TENANT_A).body["backlog"] == 2
