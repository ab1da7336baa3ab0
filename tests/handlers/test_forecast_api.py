"""`GET /v1/forecast`: a tenant's occurrences due per minute, through the api Lambda on DynamoDB Local."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.core.model.timefmt import rfc3339

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT_A = "arn:aws:iam::111111111111:user/alice"
TENANT_B = "arn:aws:iam::222222222222:user/bob"


def once_at(when: datetime) -> dict[str, Any]:
    return {
        "name": "herd",
        "schedule": {"type": "once", "at": rfc3339(when)},
        "target": {"type": "http", "url": "http://127.0.0.1:9/hook"},
    }


def test_a_tenant_sees_its_own_occurrences_minute_by_minute(api_call) -> None:
    # Given jobs of two tenants due in ten minutes, and one recurring job every five minutes
    due = (datetime.now(UTC) + timedelta(minutes=10)).replace(second=30, microsecond=0)
    for _ in range(3):
        assert api_call("POST", "/v1/jobs", once_at(due), tenant=TENANT_A).status == 201
    assert api_call("POST", "/v1/jobs", once_at(due), tenant=TENANT_B).status == 201
    rate = {**once_at(due), "schedule": {"type": "rate", "every_seconds": 300}}
    assert api_call("POST", "/v1/jobs", rate, tenant=TENANT_A).status == 201

    # When tenant A asks for the next 30 minutes
    response = api_call("GET", "/v1/forecast?minutes=30", tenant=TENANT_A)

    # Then it sees its own: 3 in the minute of `due`, the recurring job's 5 (now + 5, 10, ... 25 min), none of B
    assert response.status == 200, response.text
    forecast = response.body
    assert len(forecast["minutes"]) == 30
    minute = rfc3339(due.replace(second=0))
    row = next(m for m in forecast["minutes"] if m["minute"] == minute)
    assert row["due"] >= 3 and row["by_tenant"].get(TENANT_A, 0) == row["due"]
    assert all(set(m["by_tenant"]) <= {TENANT_A} for m in forecast["minutes"])
    assert forecast["total"] == 3 + 5
    assert forecast["peak_minute"] == minute and forecast["timers_read"] >= 5


@pytest.mark.parametrize("query", ["minutes=0", "minutes=181", "minutes=ten", "minutes=-5"])
def test_a_bad_window_is_a_problem_and_changes_nothing(api_call, query: str) -> None:
    response = api_call("GET", f"/v1/forecast?{query}")
    assert response.status == 422
    assert response.header("Content-Type") == "application/problem+json"
    assert "minutes" in response.body["detail"] and response.body["errors"][0]["field"] == "minutes"


def test_the_forecast_needs_an_identity(api_call) -> None:
    assert api_call("GET", "/v1/forecast", tenant=None).status == 401
