"""Bulk actions through the api Lambda: `POST /v1/jobs/bulk` and `GET /v1/operations/{id}`."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT_B = "arn:aws:iam::222222222222:user/bob"
PAUSE = {"action": "pause", "selector": {"labels": {"customer": "42"}}}


def create(api_call: Any, labels: dict[str, str]) -> str:
    job = {
        "schedule": {"type": "rate", "every_seconds": 3600},
        "target": {"type": "http", "url": "http://127.0.0.1:9/hook"},
        "labels": labels,
    }
    response = api_call("POST", "/v1/jobs", job)
    assert response.status == 201, response.text
    return str(response.body["job_id"])


def state(api_call: Any, job_id: str) -> str:
    return str(api_call("GET", f"/v1/jobs/{job_id}").body["state"])


def test_a_bulk_pause_pauses_the_labelled_jobs_and_reads_back(api_call: Any) -> None:
    # Given
    labelled = [create(api_call, {"customer": "42"}) for _ in range(3)]
    other = create(api_call, {"customer": "43"})
    # When
    done = api_call("POST", "/v1/jobs/bulk", PAUSE, headers={"Idempotency-Key": "k1"})
    # Then
    assert done.status == 200, done.text
    report = done.body
    assert (report["state"], report["matched"], report["changed"], report["failed"]) == ("DONE", 3, 3, [])
    assert all(state(api_call, j) == "PAUSED" for j in labelled) and state(api_call, other) == "ACTIVE"
    assert done.header("Location") == f"/v1/operations/{report['operation_id']}"
    # The same request again is the same operation, and its report reads back for this tenant only
    again = api_call("POST", "/v1/jobs/bulk", PAUSE, headers={"Idempotency-Key": "k1"})
    assert (again.status, again.body) == (200, report)
    assert api_call("GET", f"/v1/operations/{report['operation_id']}").body == report
    assert api_call("GET", f"/v1/operations/{report['operation_id']}", tenant=TENANT_B).status == 404


@pytest.mark.parametrize(
    ("body", "headers", "status", "detail"),
    [
        (PAUSE, {}, 400, "Idempotency-Key"),
        ({**PAUSE, "action": "delete"}, {"Idempotency-Key": "k"}, 422, "action must be"),
        ({**PAUSE, "selector": {"labels": {}}}, {"Idempotency-Key": "k"}, 422, "at least one label"),
        ({**PAUSE, "selector": {"labels": {"bad key!": "x"}}}, {"Idempotency-Key": "k"}, 422, "label key"),
        ({**PAUSE, "selector": {"labels": {"a": 1}}}, {"Idempotency-Key": "k"}, 422, "selector"),
        ({**PAUSE, "extra": 1}, {"Idempotency-Key": "k"}, 422, "extra"),
    ],
)
def test_a_bad_bulk_request_is_a_problem_that_changes_nothing(
    api_call: Any, snapshot: Any, body: Any, headers: dict[str, str], status: int, detail: str
) -> None:
    create(api_call, {"customer": "42"})
    before = snapshot()
    response = api_call("POST", "/v1/jobs/bulk", body, headers=headers)
    assert response.status == status, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert detail in response.body["detail"]
    assert snapshot() == before


def test_a_key_reused_with_another_action_is_a_conflict(api_call: Any) -> None:
    create(api_call, {"customer": "42"})
    assert api_call("POST", "/v1/jobs/bulk", PAUSE, headers={"Idempotency-Key": "k"}).status == 200
    cancel = {**PAUSE, "action": "cancel"}
    assert api_call("POST", "/v1/jobs/bulk", cancel, headers={"Idempotency-Key": "k"}).status == 409
