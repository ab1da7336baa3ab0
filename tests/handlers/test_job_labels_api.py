"""Labels, external ids and the filtered job list through the api Lambda (API Gateway REST proxy events)."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT_A = "arn:aws:iam::111111111111:user/alice"
TENANT_B = "arn:aws:iam::222222222222:user/bob"


def body(**changes: Any) -> dict[str, Any]:
    return {
        "name": "charge",
        "schedule": {"type": "rate", "every_seconds": 3600},
        "target": {"type": "http", "url": "http://127.0.0.1:9/hook"},
        **changes,
    }


def create(api_call: Any, tenant: str = TENANT_A, **changes: Any) -> dict[str, Any]:
    response = api_call("POST", "/v1/jobs", body(**changes), tenant=tenant)
    assert response.status == 201, response.text
    return dict(response.body)


def listed(api_call: Any, query: str, tenant: str = TENANT_A) -> list[str]:
    """Every page of `GET /v1/jobs?{query}&limit=1`, the job ids in order."""
    ids: list[str] = []
    cursor = ""
    for _ in range(20):
        response = api_call("GET", f"/v1/jobs?{query}&limit=1&cursor={cursor}", tenant=tenant)
        assert response.status == 200, response.text
        ids += [j["job_id"] for j in response.body["jobs"]]
        cursor = response.body["next_cursor"]
        if not cursor:
            return ids
    raise AssertionError("list never ended")


def test_an_external_id_is_unique_per_tenant_and_reads_the_job(api_call, snapshot) -> None:
    job = create(api_call, external_id="order-1", labels={"customer": "42"})
    assert (job["external_id"], job["labels"]) == ("order-1", {"customer": "42"})

    found = api_call("GET", "/v1/jobs/by-external-id/order-1")
    assert (found.status, found.body["job_id"]) == (200, job["job_id"])
    assert api_call("GET", "/v1/jobs/by-external-id/order-1", tenant=TENANT_B).status == 404

    # A second create with the id is a 409 naming it, and stores nothing
    before = snapshot()
    taken = api_call("POST", "/v1/jobs", body(external_id="order-1"))
    assert taken.status == 409 and taken.header("Content-Type") == "application/problem+json"
    assert "order-1" in taken.body["detail"] and taken.body["job_id"] == job["job_id"]
    assert snapshot() == before

    # Unless it repeats the create of its Idempotency-Key: the same job, replayed
    keyed = body(external_id="order-2")
    first = api_call("POST", "/v1/jobs", keyed, headers={"Idempotency-Key": "k-2"})
    again = api_call("POST", "/v1/jobs", keyed, headers={"Idempotency-Key": "k-2"})
    assert (first.status, again.status) == (201, 200)
    assert again.body["job_id"] == first.body["job_id"] and again.body["replayed"] is True

    # Another tenant may use it; and it cannot change
    create(api_call, TENANT_B, external_id="order-1")
    patched = api_call("PATCH", f"/v1/jobs/{job['job_id']}", {"external_id": "order-9"})
    assert patched.status == 422 and patched.body["errors"][0]["field"] == "external_id"


def test_the_list_filters_by_labels_state_target_type_and_name_prefix(api_call) -> None:
    a = create(api_call, labels={"customer": "42", "tier": "gold"})["job_id"]
    b = create(api_call, labels={"customer": "42"}, name="refund")["job_id"]
    c = create(api_call, labels={"customer": "7", "tier": "silver"})["job_id"]
    create(api_call, TENANT_B, labels={"customer": "42"})

    assert listed(api_call, "label=customer:42") == sorted([a, b])
    assert listed(api_call, "label=customer:42&label=tier:") == [a]
    assert listed(api_call, "label=tier:") == [a, c]  # by value: gold, then silver
    assert listed(api_call, "label=customer:42&name_prefix=ref") == [b]
    assert listed(api_call, "label=customer:42&target_type=sqs") == []
    assert listed(api_call, "name_prefix=charge&state=ACTIVE") == [a, c]

    # A change of labels moves the job
    assert api_call("PATCH", f"/v1/jobs/{b}", {"labels": {"customer": "8"}}).status == 200
    assert listed(api_call, "label=customer:42") == [a]
    assert listed(api_call, "label=customer:8") == [b]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("label=customer", "label"),
        ("label=-bad:1", "label"),
        ("label=customer:4%202", "label"),
        ("target_type=ftp", "target_type"),
        ("name_prefix=" + "x" * 129, "name_prefix"),
        ("label=" + "&label=".join(f"k{i}:" for i in range(11)), "label"),
    ],
)
def test_a_malformed_filter_is_a_422_naming_it(api_call, query, field) -> None:
    response = api_call("GET", f"/v1/jobs?{query}")
    assert response.status == 422, response.text
    assert response.body["errors"][0]["field"] == field


@pytest.mark.parametrize(
    "changes",
    [
        {"labels": {"customer:x": "1"}},
        {"labels": {"a": "x" * 64}},
        {"labels": {f"k{i}": "" for i in range(21)}},
        {"labels": {"Example.com/x": "1"}},
        {"external_id": "has space"},
        {"external_id": "a/b"},
        {"external_id": ""},
        {"external_id": "x" * 129},
    ],
)
def test_bad_labels_or_external_ids_are_refused_and_store_nothing(api_call, snapshot, changes) -> None:
    before = snapshot()
    response = api_call("POST", "/v1/jobs", body(**changes))
    assert response.status == 422, response.text
    assert next(iter(changes)) in response.body["errors"][0]["field"]
    assert snapshot() == before
