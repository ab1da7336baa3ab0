"""`POST /v1/jobs/batch`: up to 25 job definitions in one request, each created, replayed or refused on its own."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoJobStore

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


def test_a_repeated_key_within_a_batch_replays_in_order(api_call) -> None:
    same = job_body(name="once")
    items = [{"job": same, "idempotency_key": "k-dup"}, {"job": same, "idempotency_key": "k-dup"}]
    items += [{"job": job_body(name="other"), "idempotency_key": "k-dup"}]

    results = batch(api_call, items).body["results"]

    # The repeated key is created once, replayed by the next item and refused for a different job, in order
    assert [r["status"] for r in results] == [201, 200, 409]
    assert results[1]["job"]["job_id"] == results[0]["job"]["job_id"]


def test_a_batch_is_bounded_and_must_have_items(api_call) -> None:
    assert_problem(batch(api_call, [{"job": job_body()}] * 26), 422)
    assert_problem(batch(api_call, []), 422)
    assert_problem(api_call("POST", "/v1/jobs/batch", {"jobs": []}, tenant=TENANT_A), 422)
    assert_problem(api_call("GET", "/v1/jobs/batch", tenant=TENANT_A), 404)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_store_failure_mid_batch_fails_that_item_alone_and_a_retry_creates_each_job_once(
    api_call, env, dynamodb_client, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    # Given the job store fails once on the batch's second item: before its atomic
    # write ("before") or after it committed, the answer lost on the way back ("after")
    real_create = DynamoJobStore.create
    failed: list[str] = []

    def failing_create(self: DynamoJobStore, job: Any, *args: Any, **kwargs: Any) -> None:
        fail = job.spec.name == "n1" and not failed
        if fail:
            failed.append(job.job_id)
        if fail and when == "before":
            raise ConnectionError("the connection to DynamoDB dropped")
        real_create(self, job, *args, **kwargs)
        if fail and when == "after":
            raise ConnectionError("the response from DynamoDB was lost")

    def failing_batch(self: DynamoJobStore, *args: Any) -> int:
        raise ConnectionError("the connection to DynamoDB dropped")  # so the items are created one at a time

    monkeypatch.setattr(DynamoJobStore, "create", failing_create)
    monkeypatch.setattr(DynamoJobStore, "create_all", failing_batch)
    items = [{"job": job_body(name=f"n{i}"), "idempotency_key": f"crash-{when}-{i}"} for i in range(3)]

    # When the batch is submitted, and sent again with the same keys (as the CLI and any client retry)
    first = batch(api_call, items).body["results"]
    again = batch(api_call, items).body["results"]

    # Then only the failed item is a 500 that says to retry with the same key; the others are created
    assert [r["status"] for r in first] == [201, 500, 201]
    assert "Retry with the same Idempotency-Key" in first[1]["problem"]["detail"]
    # And the retry replays what was stored and creates what was not: each key has exactly one job
    assert [r["status"] for r in again] == [200, 201 if when == "before" else 200, 200]
    assert again[0]["job"]["job_id"] == first[0]["job"]["job_id"]
    assert again[2]["job"]["job_id"] == first[2]["job"]["job_id"]
    stored = dynamodb_client.scan(TableName=env.jobs_table, ConsistentRead=True)["Items"]
    jobs = sorted(i["PK"]["S"] for i in stored if i["PK"]["S"].startswith("JOB#") and i["SK"]["S"] == "DEF")
    assert jobs == sorted(f"JOB#{r['job']['job_id']}" for r in again)
    # And each job has exactly one first timer (it will fire once)
    timers = [i["job_id"]["S"] for i in stored if i["PK"]["S"].startswith("DUE#")]
    assert sorted(timers) == sorted(r["job"]["job_id"] for r in again)


def stored_jobs_and_timers(dynamodb_client: Any, env: Any) -> tuple[list[str], list[str]]:
    stored = dynamodb_client.scan(TableName=env.jobs_table, ConsistentRead=True)["Items"]
    jobs = sorted(i["PK"]["S"][4:] for i in stored if i["PK"]["S"].startswith("JOB#") and i["SK"]["S"] == "DEF")
    return jobs, sorted(i["job_id"]["S"] for i in stored if i["PK"]["S"].startswith("DUE#"))


def test_a_batch_is_stored_in_one_transaction(api_call, env, dynamodb_client, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the writes the store makes are counted
    calls: list[str] = []
    real = DynamoJobStore.create

    def counted(self: DynamoJobStore, *args: Any, **kwargs: Any) -> None:
        calls.append("create")
        real(self, *args, **kwargs)

    monkeypatch.setattr(DynamoJobStore, "create", counted)
    dynamodb_client.meta.events.register(
        "before-call.dynamodb.TransactWriteItems", lambda **kw: calls.append("TransactWriteItems")
    )

    # When 25 jobs with keys are submitted in one batch
    items = [{"job": job_body(name=f"t{i}"), "idempotency_key": f"tx-{i}"} for i in range(25)]
    results = batch(api_call, items).body["results"]

    # Then all are created by one transaction, none one at a time
    assert [r["status"] for r in results] == [201] * 25
    assert calls.count("create") == 0
    jobs, timers = stored_jobs_and_timers(dynamodb_client, env)
    assert jobs == timers == sorted(r["job"]["job_id"] for r in results)


def test_a_batch_whose_answer_is_lost_after_it_committed_creates_each_job_once(
    api_call, env, dynamodb_client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the batch transaction commits but its answer is lost on the way back
    real = DynamoJobStore.create_all

    def lost(self: DynamoJobStore, new: Any, quota: int) -> int:
        real(self, new, quota)
        raise ConnectionError("the response from DynamoDB was lost")

    monkeypatch.setattr(DynamoJobStore, "create_all", lost)
    items = [{"job": job_body(name=f"l{i}"), "idempotency_key": f"lost-{i}"} for i in range(3)]

    # When the batch is submitted
    results = batch(api_call, items).body["results"]

    # Then the creates one at a time find each job by its key: each created (201, this request made it) and once
    assert [r["status"] for r in results] == [201, 201, 201]
    jobs, timers = stored_jobs_and_timers(dynamodb_client, env)
    assert jobs == timers == sorted(r["job"]["job_id"] for r in results)


def test_a_batch_larger_than_the_room_in_the_quota_creates_what_fits(api_call, monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler.handlers import wiring

    # Given a tenant with a quota of three and one job
    monkeypatch.setenv("SCHEDULER_MAX_ACTIVE_JOBS_PER_TENANT", "3")
    wiring.container.cache_clear()
    assert batch(api_call, [{"job": job_body(name="first")}]).body["results"][0]["status"] == 201

    # When a batch of four is submitted (the transaction for all four is refused)
    results = batch(api_call, [{"job": job_body(name=f"q{i}")} for i in range(4)]).body["results"]

    # Then the first two are created, one at a time, and the others are refused with the quota's problem
    assert [r["status"] for r in results] == [201, 201, 429, 429]
    assert "3" in results[2]["problem"]["detail"]
    listed = api_call("GET", "/v1/jobs", tenant=TENANT_A).body["jobs"]
    assert sorted(j["name"] for j in listed) == ["first", "q0", "q1"]


def test_a_batchs_jobs_are_listed_once_each_in_order_a_page_at_a_time(api_call) -> None:
    # Given a job, then a batch of five, then another job, all of one tenant
    tenant = "arn:aws:iam::111111111111:user/lister"
    first = api_call("POST", "/v1/jobs", job_body(name="before"), tenant=tenant).body["job_id"]
    results = batch(api_call, [{"job": job_body(name=f"b{i}")} for i in range(5)], tenant=tenant).body["results"]
    last = api_call("POST", "/v1/jobs", job_body(name="after"), tenant=tenant).body["job_id"]

    # When the tenant's jobs are listed two at a time
    listed: list[str] = []
    cursor = None
    for _ in range(10):
        page = api_call("GET", "/v1/jobs?limit=2" + (f"&cursor={cursor}" if cursor else ""), tenant=tenant).body
        listed += [job["job_id"] for job in page["jobs"]]
        cursor = page.get("next_cursor")
        if not cursor:
            break

    # Then each job is listed once, oldest first, the batch's in its order
    assert listed == [first, *(r["job"]["job_id"] for r in results), last]
