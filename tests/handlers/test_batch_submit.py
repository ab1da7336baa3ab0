"""`POST /v1/jobs/batch`: up to 25 job definitions in one request, each created, replayed or refused on its own."""

from __future__ import annotations

from typing import Any

TENANT_A = "arn:aws:iam::111111111111:user/alice"


def job_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "nightly-report",
        "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
        "target": {"type": "http", "url": "http://127.0.0.1:9/hook"},
    }
    body.update(changes)
    return body


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert response.body["status"] == status and response.body["detail"]
    return dict(response.body)


def batch(api_call: Any, items: list[Any], tenant: str = TENANT_A) -> Any:
    return api_call("POST", "/v1/jobs/batch", {"items": items}, tenant=tenant)


def test_a_batch_creates_each_item_and_answers_in_order(api_call) -> None:
    # When three valid definitions are submitted at once
    response = batch(api_call, [{"job": job_body(name=f"n{i}")} for i in range(3)])

    # Then each is created, in the items' order, and each is readable
    assert response.status == 200
    results = response.body["results"]
    assert [r["index"] for r in results] == [0, 1, 2] and all(r["status"] == 201 for r in results)
    assert [r["job"]["name"] for r in results] == ["n0", "n1", "n2"]
    for r in results:
        assert api_call("GET", f"/v1/jobs/{r['job']['job_id']}", tenant=TENANT_A).status == 200


def test_invalid_items_are_refused_alone_with_their_reason_and_store_nothing(api_call, snapshot) -> None:
    # Given one valid item between two invalid ones
    bad_schedule = job_body(schedule={"type": "once"})
    items = [{"job": bad_schedule}, {"job": job_body(name="ok")}, {"job": {"target": 1}}, "not an object"]

    # When the batch is submitted
    results = batch(api_call, items).body["results"]

    # Then only the valid one is created; each invalid one has its own problem
    assert [r["status"] for r in results] == [422, 201, 422, 422]
    assert "schedule" in results[0]["problem"]["detail"]
    assert results[3]["problem"]["detail"] == "each item is an object with a 'job' definition"
    before = snapshot()
    batch(api_call, [{"job": bad_schedule}])
    assert snapshot() == before


def test_each_item_has_its_own_idempotency_key(api_call) -> None:
    # Given a batch whose items carry idempotency keys
    items = [
        {"job": job_body(name="a"), "idempotency_key": "k-a"},
        {"job": job_body(name="b"), "idempotency_key": "k-b"},
    ]
    first = batch(api_call, items).body["results"]

    # When it is sent again, and a key is reused for a different job
    again = batch(api_call, items).body["results"]
    conflict = batch(api_call, [{"job": job_body(name="other"), "idempotency_key": "k-a"}]).body["results"]

    # Then the replay returns the same jobs (200), and the conflicting reuse is refused alone (409)
    assert [r["status"] for r in first] == [201, 201]
    assert [r["status"] for r in again] == [200, 200]
    assert [r["job"]["job_id"] for r in again] == [r["job"]["job_id"] for r in first]
    assert conflict[0]["status"] == 409


def test_a_batch_is_bounded_and_must_have_items(api_call) -> None:
    assert_problem(batch(api_call, [{"job": job_body()}] * 26), 422)
    assert_problem(batch(api_call, []), 422)
    assert_problem(api_call("POST", "/v1/jobs/batch", {"jobs": []}, tenant=TENANT_A), 422)
    assert_problem(api_call("GET", "/v1/jobs/batch", tenant=TENANT_A), 404)
