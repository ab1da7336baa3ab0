"""Input a caller crafts to break the API rather than use it: list cursors it made up and JSON nested deeper than
any job needs. Each is a 4xx problem+json that says what is wrong, and changes nothing - never a 500."""

from __future__ import annotations

import base64
import json
import random
import re
from typing import Any

import pytest

from scheduler.handlers.api_requests import MAX_JSON_DEPTH

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT_A = "arn:aws:iam::111111111111:user/alice"
TENANT_B = "arn:aws:iam::222222222222:user/bob"
SCHEDULE = {"type": "cron", "expression": "0 9 * * 1-5"}
TARGET = {"type": "http", "url": "http://127.0.0.1:9/hook"}


def job_body(**changes: Any) -> dict[str, Any]:
    return {"schedule": SCHEDULE, "target": TARGET, **changes}


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert response.body["status"] == status and response.body["detail"]
    return dict(response.body)


def token(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode()


def nested(depth: int, inner: Any = None, key: str | None = None) -> Any:
    """Arrays (or objects with the one key `key`) nested `depth` levels deep, built without recursion."""
    value = inner
    for _ in range(depth):
        value = [value] if key is None else {key: value}
    return value


def crafted_cursors(job_id: str, seed: int = 7) -> list[str]:
    """Random bytes, base64 of garbage JSON, JSON of the wrong shape, and nesting past the parser's limit."""
    rng = random.Random(seed)
    mine = {"S": f"TENANT#{TENANT_A}"}
    cursors = [
        base64.urlsafe_b64encode(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 48)))).decode()
        for _ in range(15)
    ]
    cursors += ["%00", "%ff%fe", "!!!", "a", "abc=", "===="]
    cursors += [
        token(value)
        for value in (
            1,
            "text",
            ["PK"],
            None,
            {"PK": {"S": 1}},
            {"PK": {"B": "AAAA"}},
            {"PK": {"S": "x", "N": "1"}},
            {"PK": [{"S": "x"}]},
            {"tenant_pk": mine, "at": 1},  # a position without the entry it is in
            {"tenant_pk": mine, "at": True},
            {"tenant_pk": mine, "PK": {"S": "x"}},
            {"PK": {"S": "x"}, "SK": {"S": "y"}, "tenant_pk": mine, "tenant_sk": {"S": "z"}, "at": {"N": "1"}},
            {"job_id": {"S": job_id}, "PK": {"S": "x"}, "scheduled_ms": {"N": "not a number"}},
            {"job_id": {"S": job_id}, "PK": {"S": "x"}, "scheduled_ms": {"S": "1"}},
        )
    ]
    cursors += [base64.urlsafe_b64encode(text.encode()).decode() for text in ("[" * 100_000, '{"a":' * 5_000)]
    return cursors


def test_a_crafted_cursor_is_a_422_on_every_list_and_changes_nothing(api_call, snapshot) -> None:
    # Given a tenant with jobs, and another tenant's valid cursor
    job_id = api_call("POST", "/v1/jobs", job_body()).body["job_id"]
    api_call("POST", "/v1/jobs", job_body())
    for _ in range(2):
        api_call("POST", "/v1/jobs", job_body(), tenant=TENANT_B)
    foreign = api_call("GET", "/v1/jobs?limit=1", tenant=TENANT_B).body["next_cursor"]
    assert foreign
    before = snapshot()
    lists = ("/v1/jobs", f"/v1/jobs/{job_id}/runs", f"/v1/jobs/{job_id}/backfill")

    for cursor in [*crafted_cursors(job_id), foreign]:
        for path in lists:
            # When a list is asked for a page after a cursor the API never handed this caller
            response = api_call("GET", f"{path}?cursor={cursor}")
            # Then it is refused, naming the cursor
            problem = assert_problem(response, 422)
            assert problem["errors"][0]["field"] == "cursor", (path, cursor)
            assert "cursor is not one this API returned" in problem["detail"]
            assert TENANT_B not in response.text
    assert snapshot() == before


@pytest.mark.parametrize(
    ("method", "path", "wrap"),
    [
        ("POST", "/v1/jobs", lambda payload: job_body(payload=payload)),
        ("PATCH", "/v1/jobs/{job_id}", lambda payload: {"payload": payload}),
        ("POST", "/v1/jobs/batch", lambda payload: {"items": [{"job": job_body(payload=payload)}]}),
    ],
    ids=["create", "patch", "batch"],
)
def test_json_nested_too_deep_is_a_400_that_says_so(api_call, snapshot, method, path, wrap) -> None:
    job_id = api_call("POST", "/v1/jobs", job_body()).body["job_id"]
    path = path.format(job_id=job_id)
    before = snapshot()
    bodies = {
        # past the parser's own limit (a RecursionError inside json.loads)
        "100k brackets": b"[" * 100_000,
        "payload 1000 deep": json.dumps(wrap("<>")).encode().replace(b'"<>"', b"[" * 1_000 + b"]" * 1_000),
        # within the parser's limit, past what pydantic can serialise
        "payload 300 deep": json.dumps(wrap(nested(299, []))).encode(),
        # one level past the limit
        "payload objects 128 deep": json.dumps(wrap(nested(128, 1, "a"))).encode(),
    }
    for name, raw in bodies.items():
        response = api_call(method, path, raw=raw)
        if name == "100k brackets" and not path.endswith("/batch"):
            assert_problem(response, 413)  # over the body size limit before it is parsed
            continue
        problem = assert_problem(response, 400)
        assert f"more than {MAX_JSON_DEPTH} levels deep" in problem["detail"], name
    assert snapshot() == before


def test_json_nested_to_the_limit_is_accepted(api_call) -> None:
    # The body is level 1, the payload level 2: a payload of MAX_JSON_DEPTH - 1 levels fills the limit exactly.
    depth = MAX_JSON_DEPTH - 1
    payload = nested(depth - 1, [])
    created = api_call("POST", "/v1/jobs", job_body(payload=payload))
    assert created.status == 201, created.text
    assert created.body["payload"] == payload
    batch = api_call("POST", "/v1/jobs/batch", {"items": [{"job": job_body(payload=nested(119, []))}]})
    assert batch.status == 200 and batch.body["results"][0]["status"] == 201, batch.text


#: Past DynamoDB's key limits (2,048 bytes for a partition key, 1,024 for a sort key) and any id the API hands out.
OVER_LONG = "a" * 3000


def over_long_cursors(job_id: str) -> list[str]:
    """Cursors shaped as each list's own, with every key part over-long."""
    mine = {"S": f"TENANT#{TENANT_A}"}
    long = {"S": OVER_LONG}
    shapes: list[dict[str, Any]] = [
        {"PK": long, "SK": long, "tenant_pk": mine, "tenant_sk": long, "at": 0},  # inside a batch's list entry
        {"PK": long, "SK": long, "tenant_pk": mine, "tenant_sk": long},
        {"PK": long, "SK": long},  # a label list's
        {"PK": long, "job_id": {"S": job_id}, "scheduled_ms": {"N": "1"}},  # the run history's
        {"PK": {"S": "BACKFILL"}, "SK": long, "job_id": {"S": job_id}},  # the backfills'
    ]
    return [token(shape) for shape in shapes] + ["A" * 20_000]


def test_an_over_long_id_is_a_4xx_naming_it_on_every_route_and_changes_nothing(api_call, snapshot) -> None:
    from urllib.parse import quote

    from scheduler.handlers.api_routes import route

    # Given a job, and a valid value of every id a route takes in its path
    job_id = api_call("POST", "/v1/jobs", job_body(external_id="ext-1")).body["job_id"]
    at = "2026-01-05T09:00:00Z"
    valid = {
        "job_id": job_id,
        "external_id": "ext-1",
        "operation_id": "0" * 32,
        "backfill_id": "0" * 24,
        "occurrence_key": f"{job_id}:{at}",
        "scheduled_for": at,
        "name": "app.js",  # a console file's
    }
    bodies: dict[tuple[str, str], Any] = {
        ("POST", "/v1/jobs"): job_body(),
        ("POST", "/v1/jobs/batch"): {"items": [{"job": job_body()}]},
        ("POST", "/v1/jobs/bulk"): {"action": "pause", "selector": {"labels": {"team": "a"}}},
        ("PATCH", "/v1/jobs/<job_id>"): {"payload": {"n": 2}},
        ("POST", "/v1/jobs/<job_id>/runs/<occurrence_key>/resolve"): {"outcome": "succeeded"},
        ("POST", "/v1/jobs/<job_id>/backfill"): {"from": "2026-01-01T00:00:00Z", "to": "2026-01-02T00:00:00Z"},
    }
    requests: list[tuple[str, str, Any, dict[str, str], str]] = []
    for operation in route.operations:
        body = bodies.get((operation.method, operation.rule))
        path_names = [p.name for p in operation.params if p.where == "path"]

        def path(values: dict[str, str], rule: str = operation.rule) -> str:
            return re.sub(r"<(\w+)>", lambda m: quote(values[m[1]], safe=":"), rule)

        # each id in the path over-long in turn (the others valid), and each list's cursor
        for name in path_names:
            requests.append((operation.method, path({**valid, name: OVER_LONG}), body, {}, name))
        if any(p.name == "cursor" for p in operation.params):
            for cursor in over_long_cursors(job_id):
                requests.append((operation.method, f"{path(valid)}?cursor={cursor}", body, {}, "cursor"))
        if any(p.name == "Idempotency-Key" for p in operation.params):
            requests.append((operation.method, path(valid), body, {"Idempotency-Key": OVER_LONG}, "Idempotency-Key"))
    # ... and the ids a body carries
    requests += [
        ("POST", "/v1/jobs", job_body(external_id=OVER_LONG), {}, "external_id"),
        ("POST", "/v1/jobs/batch", {"items": [{"job": job_body(external_id=OVER_LONG)}]}, {}, "external_id"),
        ("POST", "/v1/jobs/batch", {"items": [{"job": job_body(), "idempotency_key": OVER_LONG}]}, {}, "idempotency"),
        ("PATCH", f"/v1/jobs/{job_id}", {"external_id": OVER_LONG}, {}, "external_id"),
    ]
    assert {name for *_, name in requests} >= set(valid), "every id of every route is sent over-long"
    before = snapshot()

    refused_badly = []
    for method, path, body, headers, name in requests:
        # When a route is sent an over-long id
        response = api_call(method, path, body, headers=headers)
        # Then it is refused with a 4xx problem that names it (a batch refuses the item), never a 500
        problem = response.body if isinstance(response.body, dict) else {}
        if path.startswith("/v1/jobs/batch") and response.status == 200:
            problem = response.body["results"][0]["problem"]
        named = name in str(problem.get("detail")) or name in json.dumps(problem.get("errors"))
        if not (400 <= problem.get("status", response.status) < 500 and named):
            refused_badly.append((method, path[:60], name, response.status, str(problem.get("detail"))[:100]))
    assert refused_badly == [], "\n".join(map(str, refused_badly))
    assert snapshot() == before
