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


def bulk_request(api_call: Any, team: str) -> Any:
    body = {"action": "pause", "selector": {"labels": {"team": team}}}
    return api_call("POST", "/v1/jobs/bulk", body, headers={"Idempotency-Key": f"pause-{team}"})


def assert_throttled(response: Any, detail: str) -> int:
    assert response.status == 429, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert detail in response.body["detail"], response.body
    retry_after = int(response.header("Retry-After") or 0)
    assert retry_after >= 1
    return retry_after


def test_a_tenants_third_running_bulk_operation_is_a_429_that_stores_nothing(
    api_call: Any, snapshot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from scheduler.handlers import api_bulk

    # Given two operations of the tenant running: each request stopped before its first page
    for team in ("a", "b", "c"):
        create(api_call, {"team": team})
    monkeypatch.setattr(api_bulk, "_time_left", lambda: timedelta(0))
    assert [bulk_request(api_call, team).status for team in ("a", "b")] == [202, 202]
    before = snapshot()

    # When the tenant starts a third, it is refused with Retry-After, and nothing of it is stored
    assert assert_throttled(bulk_request(api_call, "c"), "has 2 bulk operations running") == 20
    assert snapshot() == before
    # ... while another tenant's starts
    other = {"action": "pause", "selector": {"labels": {"team": "a"}}}
    assert api_call("POST", "/v1/jobs/bulk", other, headers={"Idempotency-Key": "x"}, tenant=TENANT_B).status == 202

    # Then once one of the tenant's is done, the third runs
    monkeypatch.setattr(api_bulk, "_time_left", lambda: timedelta(seconds=20))
    assert bulk_request(api_call, "a").status == 200
    assert bulk_request(api_call, "c").status == 200


def test_a_bulk_action_counts_each_job_it_changes_against_the_tenants_request_limit(
    api_call: Any, snapshot: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from scheduler.adapters.memory import FakeClock
    from scheduler.handlers import api, wiring

    jobs = [create(api_call, {"team": "a"}) for _ in range(25)]
    # Given a tenant limited to 1 request a second (10 in a window of 10 s), on a clock that stands still
    monkeypatch.setenv("SCHEDULER_TENANT_REQUEST_RATE", "1")
    wiring.container.cache_clear()
    container = wiring.container(api.metrics)
    clock = FakeClock(container.core.clock.now().replace(second=0, microsecond=0))
    monkeypatch.setattr(container, "core", replace(container.core, clock=clock))

    # When a bulk action pauses them: the request itself counts one, its pages take the 9 left
    first = bulk_request(api_call, "a")
    assert first.status == 202, first.text
    assert (first.body["matched"], first.body["processed"], first.body["changed"]) == (25, 9, 9)

    # Then the same request again, in the same window, is a 429 with Retry-After that changes nothing
    before = snapshot()
    assert assert_throttled(bulk_request(api_call, "a"), "request limit") == 10
    assert snapshot() == before

    # And each window takes 9 more jobs, until all are paused
    for processed in (18, 25):
        clock.advance(10)
        response = bulk_request(api_call, "a")
        assert response.body["processed"] == processed, response.text
    assert response.status == 200
    monkeypatch.setenv("SCHEDULER_TENANT_REQUEST_RATE", "0")
    wiring.container.cache_clear()
    assert all(state(api_call, job_id) == "PAUSED" for job_id in jobs)
