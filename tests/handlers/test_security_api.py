"""The API refuses targets that name the scheduler's own resources or lie outside a tenant's allow-list (422 naming
the field, nothing stored), so no job can make the worker write its own queues or bus (docs/security.md)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.core.jobs.secrecy import headers_to_send
from scheduler.handlers import api, wiring
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

ONCE = {"type": "once", "delay_seconds": 60}
TENANT_B = "arn:aws:iam::222222222222:user/bob"


def refused(api_call: Any, target: dict[str, Any], tenant: str | None = None) -> dict[str, Any]:
    kwargs = {"tenant": tenant} if tenant else {}
    response = api_call("POST", "/v1/jobs", {"schedule": ONCE, "target": target}, **kwargs)
    assert response.status == 422, response.text
    assert response.header("Content-Type") == "application/problem+json"
    return dict(response.body)


@pytest.mark.parametrize("queue", ["ready_queue_url", "ready_queue_high_url", "ready_queue_low_url", "dlq_url"])
def test_an_sqs_target_naming_a_scheduler_queue_is_refused(env, api_call, snapshot, queue) -> None:
    before = snapshot()
    # A forged dispatch as the payload: what a tenant would need to run another tenant's job.
    target = {"type": "sqs", "queue_url": getattr(env, queue)}
    problem = refused(api_call, target)
    assert problem["errors"][0]["field"] == "target.queue_url"
    assert "the scheduler's own resources" in problem["detail"]
    assert snapshot() == before


def test_a_queue_url_spelled_with_another_host_is_still_the_scheduler_queue(env, api_call) -> None:
    account_and_name = env.ready_queue_url.split("/", 3)[3]
    problem = refused(api_call, {"type": "sqs", "queue_url": f"https://sqs.us-east-1.amazonaws.com/{account_and_name}"})
    assert problem["errors"][0]["field"] == "target.queue_url"


@pytest.mark.parametrize("source", ["punctual.scheduler", "punctual", "Punctual.jobs", "aws.events"])
def test_an_event_source_in_the_scheduler_namespace_is_refused(env, api_call, source) -> None:
    problem = refused(api_call, {"type": "eventbridge", "event_bus_name": "tenant-bus", "source": source})
    assert problem["errors"][0]["field"] == "target.source"


def test_the_completion_bus_is_refused_when_it_is_the_scheduler_own(env, api_call, monkeypatch) -> None:
    monkeypatch.setenv("SCHEDULER_EVENT_BUS_NAME", "punctual-test-events")
    wiring.container.cache_clear()
    problem = refused(api_call, {"type": "eventbridge", "event_bus_name": "punctual-test-events", "source": "com.x"})
    assert problem["errors"][0]["field"] == "target.event_bus_name"


def test_a_resource_named_with_the_stack_prefix_is_refused(env, api_call, monkeypatch) -> None:
    monkeypatch.setenv("SCHEDULER_STACK_NAME", "punctual-prod")
    wiring.container.cache_clear()
    arn = "arn:aws:lambda:us-east-1:111111111111:function:punctual-prod-WorkerFunction1234"
    assert refused(api_call, {"type": "lambda", "function_name": arn})["errors"][0]["field"] == "target.function_name"


def test_a_tenant_allow_list_limits_its_targets(env, api_call, monkeypatch) -> None:
    alice = "arn:aws:iam::111111111111:user/alice"
    allowed = "arn:aws:sns:us-east-1:111111111111:alice-topic"
    monkeypatch.setenv("SCHEDULER_TENANT_TARGETS", f'{{"{alice}": {{"sns": ["{allowed}"]}}}}')
    wiring.container.cache_clear()
    other = "arn:aws:sns:us-east-1:111111111111:bob-topic"

    problem = refused(api_call, {"type": "sns", "topic_arn": other}, tenant=alice)
    assert problem["errors"][0]["field"] == "target.topic_arn"
    assert "allow-list" in problem["detail"]
    created = api_call("POST", "/v1/jobs", {"schedule": ONCE, "target": {"type": "sns", "topic_arn": allowed}})
    assert created.status == 201, created.text
    # A type the tenant's list leaves out is closed to it.
    machine = "arn:aws:states:us-east-1:111111111111:stateMachine:alice-flow"
    problem = refused(api_call, {"type": "stepfunctions", "state_machine_arn": machine}, tenant=alice)
    assert "allow-list" in problem["detail"]


# -- http targets: SSRF and headers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/latest/meta-data/", "http://[::ffff:169.254.169.254]/", "http://2852039166/"]
)
def test_metadata_addresses_are_refused_even_where_private_targets_are_allowed(env, api_call, snapshot, url) -> None:
    before = snapshot()
    problem = refused(api_call, {"type": "http", "url": url})
    assert problem["errors"][0]["field"] == "target.url"
    assert "cloud-metadata" in problem["detail"]
    assert snapshot() == before


# Each header rule is tested on its own in tests/unit/test_http_guard.py; here, that a refusal is the API's 422.
@pytest.mark.parametrize(
    "headers, field",
    [
        ({"Transfer-Encoding": "chunked"}, "target.headers.Transfer-Encoding"),
        ({"X-Evil": "a\r\nHost: b"}, "target.headers.X-Evil"),
    ],
)
def test_bad_headers_are_a_422_naming_the_header(env, api_call, headers, field) -> None:
    problem = refused(api_call, {"type": "http", "url": "http://127.0.0.1:9/x", "headers": headers})
    assert problem["errors"][0]["field"] == field


def test_secret_headers_are_write_only(env, api_call) -> None:
    headers = {"Authorization": "Bearer s3cret", "X-Hub-Signature-256": "sha256=s3cret", "X-T": "a"}
    target = {"type": "http", "url": "http://127.0.0.1:9/x", "headers": headers, "public_headers": ["X-T"]}
    created = api_call("POST", "/v1/jobs", {"schedule": ONCE, "target": target})
    assert created.status == 201, created.text
    assert "s3cret" not in created.text
    job_id = created.body["job_id"]
    shown = api_call("GET", f"/v1/jobs/{job_id}").body["target"]["headers"]
    assert shown == {"Authorization": "<redacted>", "X-Hub-Signature-256": "<redacted>", "X-T": "a"}
    assert "s3cret" not in api_call("GET", "/v1/jobs").text
    # Stored sealed: the item holds no secret value
    container = wiring.container(api.metrics)
    stored = container.core.stores.jobs.get(job_id)
    assert stored is not None and "s3cret" not in stored.model_dump_json()
    # Sending the redacted view back keeps the stored secret
    patched = api_call("PATCH", f"/v1/jobs/{job_id}", {"target": {**target, "headers": shown | {"X-T": "b"}}})
    assert patched.status == 200, patched.text
    stored = container.core.stores.jobs.get(job_id)
    assert stored is not None and headers_to_send(stored, container.core.sealer) == headers | {"X-T": "b"}
    # ... but not to another origin: a clear 422 that changes nothing
    moved = api_call("PATCH", f"/v1/jobs/{job_id}", {"target": {"url": "http://127.0.0.2:9/x", "headers": shown}})
    assert moved.status == 422, moved.text
    assert "another origin" in moved.body["detail"]
    assert container.core.stores.jobs.get(job_id) == stored


def test_url_credentials_are_refused_with_a_helpful_problem(env, api_call) -> None:
    target = {"type": "http", "url": "http://user:pa55@127.0.0.1:9/x"}
    refused = api_call("POST", "/v1/jobs", {"schedule": ONCE, "target": target})
    assert refused.status == 422, refused.text
    assert "Authorization" in refused.body["detail"] and "pa55" not in refused.text


# -- signing keys ----------------------------------------------------------------------------------------


def test_a_tenant_fetches_its_jobs_signing_keys_and_only_those(env, api_call) -> None:
    created = api_call("POST", "/v1/jobs", {"schedule": ONCE, "target": {"type": "http", "url": "http://127.0.0.1:9/"}})
    job_id = created.body["job_id"]

    response = api_call("GET", f"/v1/jobs/{job_id}/signing-keys")

    assert response.status == 200, response.text
    assert response.header("Cache-Control") == "no-store"
    ring = KeyRing.parse(LOCAL_SIGNING_KEYS)
    assert response.body == {
        "job_id": job_id, "signature": "v2", "algorithm": "HMAC-SHA256", "current_key_id": ring.current,
        "key_version": 1,
        "keys": [
            {"key_id": kid, "key": key, "version": 1, "expires_at": None} for kid, key in ring.job_keys(job_id).items()
        ],
    }  # fmt: skip
    assert response.header("ETag") == '"1"'
    assert api_call("GET", f"/v1/jobs/{job_id}/signing-keys", tenant=TENANT_B).status == 404
    assert api_call("GET", f"/v1/jobs/{job_id}/signing-keys", tenant=None).status == 401


def _http_job(api_call: Any) -> str:
    created = api_call("POST", "/v1/jobs", {"schedule": ONCE, "target": {"type": "http", "url": "http://127.0.0.1:9/"}})
    assert created.status == 201, created.text
    return str(created.body["job_id"])


def test_a_rotation_hands_out_the_new_key_and_the_old_one_until_the_overlap_ends(env, api_call) -> None:
    job_id = _http_job(api_call)
    ring = KeyRing.parse(LOCAL_SIGNING_KEYS)

    rotated = api_call("POST", f"/v1/jobs/{job_id}/signing-keys/rotate", {"overlap_seconds": 3600},
                       headers={"If-Match": '"1"'})  # fmt: skip

    assert rotated.status == 200, rotated.text
    assert rotated.header("ETag") == '"2"' and rotated.header("Cache-Control") == "no-store"
    assert (rotated.body["key_version"], rotated.body["current_key_id"]) == (2, f"{ring.current}.2")
    [new, old] = rotated.body["keys"]
    assert (new["key_id"], new["version"], new["expires_at"]) == (f"{ring.current}.2", 2, None)
    assert (old["key_id"], old["version"]) == (ring.current, 1)
    assert {new["key"], old["key"]} == {*ring.job_keys(job_id, 2).values(), *ring.job_keys(job_id, 1).values()}
    assert old["expires_at"] is not None
    assert api_call("GET", f"/v1/jobs/{job_id}/signing-keys").body == rotated.body
    assert api_call("GET", f"/v1/jobs/{job_id}").body["version"] == 2

    # A revoke (no overlap): only the new version is handed out, and the default overlap applies without a body
    revoked = api_call("POST", f"/v1/jobs/{job_id}/signing-keys/rotate", {"overlap_seconds": 0})
    assert [(k["key_id"], k["version"]) for k in revoked.body["keys"]] == [(f"{ring.current}.3", 3)]
    again = api_call("POST", f"/v1/jobs/{job_id}/signing-keys/rotate")
    assert again.status == 200, again.text
    assert [k["version"] for k in again.body["keys"]] == [4, 3]


@pytest.mark.parametrize(
    "body, status, field",
    [
        ({"overlap_seconds": -1}, 422, "overlap_seconds"),
        ({"overlap_seconds": 604801}, 422, "overlap_seconds"),
        ({"overlap_seconds": 1.5}, 422, "overlap_seconds"),
        ({"overlap_seconds": "60"}, 422, "overlap_seconds"),
        ({"overlap_seconds": True}, 422, "overlap_seconds"),
        ({"overlap": 60}, 422, "overlap"),
    ],
)
def test_a_bad_rotation_is_a_problem_that_changes_nothing(env, api_call, snapshot, body, status, field) -> None:
    job_id = _http_job(api_call)
    before = snapshot()
    response = api_call("POST", f"/v1/jobs/{job_id}/signing-keys/rotate", body)
    assert response.status == status, response.text
    assert response.header("Content-Type") == "application/problem+json"
    assert response.body["errors"][0]["field"] == field
    assert snapshot() == before


def test_a_rotation_is_refused_for_a_stale_version_another_tenant_and_a_cancelled_job(env, api_call, snapshot) -> None:
    job_id = _http_job(api_call)
    path = f"/v1/jobs/{job_id}/signing-keys/rotate"
    before = snapshot()
    stale = api_call("POST", path, headers={"If-Match": '"7"'})
    assert stale.status == 412 and stale.body["current_version"] == 1
    assert api_call("POST", path, headers={"If-Match": "seven"}).status == 400
    assert api_call("POST", path, tenant=TENANT_B).status == 404
    assert api_call("POST", path, tenant=None).status == 401
    assert api_call("GET", path).status == 405
    assert snapshot() == before
    api_call("DELETE", f"/v1/jobs/{job_id}")
    cancelled = api_call("POST", path)
    assert cancelled.status == 409 and "cancelled" in cancelled.body["detail"]


def test_a_federated_user_is_refused(env, api_call) -> None:
    response = api_call("GET", "/v1/jobs", tenant="arn:aws:sts::111111111111:federated-user/i-say-i-am-alice")
    assert response.status == 403
    assert "federated users" in response.body["detail"]


def test_a_tenant_over_its_request_limit_gets_a_429_and_the_others_are_served(env, api_call, monkeypatch) -> None:
    # Given a request limit of 3 requests in a 10 s window per tenant
    monkeypatch.setenv("SCHEDULER_TENANT_REQUEST_RATE", "0.3")
    wiring.container.cache_clear()
    # When one tenant makes 7 requests at once (two windows at most: 6 admitted at most)
    answers = [api_call("GET", "/v1/jobs", tenant="greedy") for _ in range(7)]
    # Then some are refused with a problem and a Retry-After, and another tenant is still served
    refused = [a for a in answers if a.status == 429]
    assert refused and {a.status for a in answers} == {200, 429}, [a.status for a in answers]
    assert refused[0].headers["Content-Type"] == "application/problem+json"
    assert 1 <= int(refused[0].headers["Retry-After"]) <= 10
    assert "request limit" in refused[0].body["detail"]
    assert api_call("GET", "/v1/jobs", tenant="patient").status == 200
