"""Header secrets kept secret: every header value is write-only unless public, a change to another origin drops
the secret headers, URL credentials and query values are never shown, and secret values are sealed at rest (and
never travel in a message)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.adapters.codec import job_from_item, job_to_item
from scheduler.adapters.sealing import LocalSealer
from scheduler.core.errors import InvalidRequest
from scheduler.core.jobs.secrecy import headers_to_send, redact_url, spec_view
from scheduler.core.jobs.service import JobService
from scheduler.core.model.job import REDACTED, Job, JobSpec, JobState
from scheduler.core.ports import SealFailed
from tests.unit.fixtures import T0, TENANT, MemoryCore

SEALER = LocalSealer("test sealing secret")
HEADERS = {
    "Authorization": "Bearer s3cret",
    "X-Signature": "sig-s3cret",
    "X-Hub-Signature-256": "sha256=s3cret",
    "X-Tenant": "acme",
    "Accept": "application/json",
}


def http_target(url: str = "https://hooks.example.com/run", **fields: Any) -> dict[str, Any]:
    return {"type": "http", "url": url, "headers": dict(HEADERS), "public_headers": ["X-Tenant"], **fields}


def service(world: MemoryCore, sealer: Any = SEALER) -> JobService:
    return replace(world.service, sealer=sealer)


def create(svc: JobService, target: dict[str, Any], sched: dict[str, Any] | None = None) -> Job:
    body = {"schedule": sched or {"type": "cron", "expression": "0 * * * *"}, "target": target}
    return svc.create(TENANT, JobSpec.model_validate(body), None, body).job


# -- b. every value is secret unless public -------------------------------------------------------------------


@pytest.mark.parametrize("sealer", [SEALER, None], ids=["sealed", "unsealed"])
def test_a_read_shows_only_public_header_values(world: MemoryCore, sealer: Any) -> None:
    job = create(service(world, sealer), http_target())

    shown = spec_view(world.job(job.job_id).spec)["target"]

    assert shown["headers"] == {
        "Authorization": REDACTED,
        "X-Signature": REDACTED,
        "X-Hub-Signature-256": REDACTED,
        "X-Tenant": "acme",
        "Accept": "application/json",
    }
    assert "s3cret" not in json.dumps(shown)


@pytest.mark.parametrize("name", ["Authorization", "X-Hub-Signature-256", "X-Api-Key", "Cookie"])
def test_a_credential_cannot_be_declared_public(name: str) -> None:
    with pytest.raises(ValidationError, match="looks like a credential"):
        target = {**http_target(), "public_headers": [name]}
        JobSpec.model_validate({"schedule": {"type": "cron", "expression": "0 * * * *"}, "target": target})


def test_declaring_a_sealed_header_public_does_not_reveal_its_value(world: MemoryCore) -> None:
    svc = service(world)
    job = create(svc, {**http_target(), "public_headers": []})

    changed = svc.update(TENANT, job.job_id, {"target": {"public_headers": ["X-Tenant"]}}, None)

    assert spec_view(changed.spec)["target"]["headers"]["X-Tenant"] == REDACTED
    assert headers_to_send(changed, SEALER)["X-Tenant"] == "acme"


# -- a. a change to another origin drops the secret headers -------------------------------------------------


@pytest.mark.parametrize("sealer", [SEALER, None], ids=["sealed", "unsealed"])
@pytest.mark.parametrize(
    "url", ["https://evil.example.net/run", "http://hooks.example.com/run", "https://hooks.example.com:8443/run"]
)
def test_a_change_to_another_origin_drops_the_secret_headers(world: MemoryCore, sealer: Any, url: str) -> None:
    svc = service(world, sealer)
    job = create(svc, http_target())

    changed = svc.update(TENANT, job.job_id, {"target": {"url": url}}, None)

    assert headers_to_send(changed, sealer) == {"X-Tenant": "acme", "Accept": "application/json"}


def test_a_change_within_the_origin_keeps_the_secret_headers(world: MemoryCore) -> None:
    svc = service(world)
    job = create(svc, http_target())

    changed = svc.update(TENANT, job.job_id, {"target": {"url": "https://HOOKS.example.com:443/other?x=1"}}, None)

    assert headers_to_send(changed, SEALER) == HEADERS


def test_a_change_to_another_origin_keeps_the_secret_headers_it_sends_again(world: MemoryCore) -> None:
    svc = service(world)
    job = create(svc, http_target())
    patch = {"target": {"url": "https://new.example.com/", "headers": {"Authorization": "Bearer n3w"}}}

    changed = svc.update(TENANT, job.job_id, patch, None)

    assert headers_to_send(changed, SEALER) == {
        "Authorization": "Bearer n3w",
        "X-Tenant": "acme",
        "Accept": "application/json",
    }


def test_sending_a_placeholder_back_keeps_the_value_but_not_to_another_origin(world: MemoryCore) -> None:
    svc = service(world)
    job = create(svc, http_target())
    shown = spec_view(job.spec)["target"]

    # Given a client that read the job and sends its whole target back
    same = svc.update(TENANT, job.job_id, {"target": shown | {"url": "https://hooks.example.com/run"}}, None)
    assert headers_to_send(same, SEALER) == HEADERS

    # Then the same to another origin is refused, and changes nothing
    with pytest.raises(InvalidRequest, match="another origin") as refused:
        svc.update(TENANT, job.job_id, {"target": shown | {"url": "https://evil.example.net/"}}, None)
    assert refused.value.field == "target.headers.Authorization"
    assert world.job(job.job_id) == same


def test_a_placeholder_for_an_unknown_header_is_refused(world: MemoryCore) -> None:
    svc = service(world)
    job = create(svc, http_target())
    with pytest.raises(InvalidRequest, match="no such header"):
        svc.update(TENANT, job.job_id, {"target": {"headers": {"X-Other": REDACTED}}}, None)


def test_a_placeholder_is_refused_at_create(world: MemoryCore) -> None:
    with pytest.raises(InvalidRequest, match="send the value itself") as refused:
        create(service(world), {**http_target(), "headers": {"Authorization": REDACTED}})
    assert refused.value.field == "target.headers.Authorization"


# -- c. URL credentials and query values --------------------------------------------------------------------


def test_url_credentials_are_refused_at_submit(world: MemoryCore) -> None:
    with pytest.raises(InvalidRequest, match="Authorization") as refused:
        create(service(world), http_target("https://user:pa55@hooks.example.com/run"))
    assert refused.value.field == "target.url"
    assert world.jobs.list(TENANT, None, 10, None)[0] == []


def test_a_read_shows_no_url_credentials_nor_query_values() -> None:
    shown = redact_url("https://user:pa55@hooks.example.com/run?token=t0k&sig=abc&flag#frag")
    assert shown == f"https://{REDACTED}@hooks.example.com/run?token={REDACTED}&sig={REDACTED}&{REDACTED}#{REDACTED}"


def test_a_stored_job_with_url_credentials_reads_without_them() -> None:
    body = {
        "schedule": {"type": "cron", "expression": "0 * * * *"},
        "target": {"type": "http", "url": "https://user:pa55@hooks.example.com/run?key=k3y"},
    }
    shown = spec_view(JobSpec.model_validate(body))
    assert "pa55" not in json.dumps(shown) and "k3y" not in json.dumps(shown)


# -- d. sealed at rest --------------------------------------------------------------------------------------


def test_secret_values_are_stored_sealed_and_sent_opened(world: MemoryCore) -> None:
    job = create(service(world), http_target())

    stored = world.job(job.job_id)
    item = json.dumps(job_to_item(stored))

    assert "s3cret" not in stored.model_dump_json() and "s3cret" not in item
    assert stored.sealed_headers is not None
    assert job_from_item(job_to_item(stored)) == stored
    assert headers_to_send(stored, SEALER) == HEADERS


def test_sealed_values_open_only_for_their_own_job_and_key(world: MemoryCore) -> None:
    job = create(service(world), http_target())
    stored = world.job(job.job_id)

    with pytest.raises(SealFailed):
        headers_to_send(stored.model_copy(update={"job_id": "another-job"}), SEALER)
    with pytest.raises(SealFailed):
        headers_to_send(stored, LocalSealer("another secret"))
    with pytest.raises(SealFailed):
        headers_to_send(stored, None)


def test_a_job_stored_in_clear_before_sealing_is_read_sent_and_sealed_at_its_next_change(world: MemoryCore) -> None:
    # Given a job stored before sealing existed: its secret values in clear in the spec
    old = create(service(world, None), http_target())
    assert world.job(old.job_id).sealed_headers is None

    # Then it is sent as it is, and a change that does not touch its headers seals them, losing none
    assert headers_to_send(world.job(old.job_id), SEALER) == HEADERS
    changed = service(world).update(TENANT, old.job_id, {"payload": {"n": 1}}, None)
    assert changed.sealed_headers is not None and "s3cret" not in changed.model_dump_json()
    assert headers_to_send(world.job(old.job_id), SEALER) == HEADERS


def _copy_of_one_shot(world: MemoryCore, target: dict[str, Any]) -> Any:
    job = create(service(world), target, {"type": "once", "delay_seconds": 10})
    assert job.next_run_at is not None
    world.set_time(job.next_run_at)
    world.sweep()
    (dispatch,) = world.sent(job.job_id)
    return dispatch.job_copy


def test_a_one_shot_job_with_secrets_travels_without_a_copy(world: MemoryCore) -> None:
    assert _copy_of_one_shot(world, http_target()) is None


def test_a_one_shot_job_with_a_query_travels_without_a_copy(world: MemoryCore) -> None:
    target = {"type": "http", "url": "https://hooks.example.com/run?sig=abc", "headers": {"Accept": "text/plain"}}
    assert _copy_of_one_shot(world, target) is None


def test_a_one_shot_job_with_only_public_headers_travels_with_its_copy(world: MemoryCore) -> None:
    target = {"type": "http", "url": "https://hooks.example.com/run", "headers": {"X-Tenant": "acme"}}
    copy = _copy_of_one_shot(world, {**target, "public_headers": ["X-Tenant"]})
    assert copy is not None and copy.state == JobState.COMPLETED


def test_the_item_of_a_job_without_sealed_values_has_no_sealed_attribute() -> None:
    body = {"schedule": {"type": "cron", "expression": "0 * * * *"}, "target": {"type": "handler", "name": "h"}}
    job = Job(
        job_id="j1",
        tenant=TENANT,
        spec=JobSpec.model_validate(body),
        version=1,
        state=JobState.ACTIVE,
        created_at=T0,
        updated_at=T0,
    )
    assert "sealed" not in job_to_item(job)
