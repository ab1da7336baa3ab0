"""Plain `http://` targets are for the local stack and deployments that call receivers on their own network: on AWS
the signed call, its headers and its payload travel over https only. Refused at submit (a 422 naming `target.url`)
and, for a job stored before, at every call - permanently, without connecting."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.http_target import HttpTargetInvoker
from scheduler.core.errors import InvalidRequest
from scheduler.core.model.job import JobSpec, RunState
from scheduler.core.ports import TargetFailure
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS, Settings
from tests.unit.test_http_guard import call_of

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PUBLIC = "93.184.216.34"  # a literal public address: no DNS
#: The deployed stack's settings (cdk/punctual_cdk/environment.py sets both explicitly).
ON_AWS = Settings(local_mode=False, allow_private_targets=False)


def spec(url: str) -> JobSpec:
    return JobSpec.model_validate(
        {"schedule": {"type": "once", "at": "2026-03-01T00:00:00Z"}, "target": {"type": "http", "url": url}}
    )


@pytest.mark.parametrize("url", [f"http://{PUBLIC}/hook", f"HTTP://{PUBLIC}:8080/hook", "http://receiver.example/"])
def test_plain_http_is_refused_at_submit_on_aws(url: str) -> None:
    guard = AddressGuard.of(ON_AWS)
    with pytest.raises(InvalidRequest) as refused:
        guard.check_spec(spec(url))
    assert refused.value.field == "target.url"
    assert "https" in refused.value.detail and "clear text" in refused.value.detail


def test_a_refused_urls_query_is_not_repeated_in_the_refusal() -> None:
    for guard, url in (
        (AddressGuard.of(ON_AWS), f"http://{PUBLIC}/hook?token=S3CR3T"),
        (AddressGuard.of(ON_AWS), "https://10.0.0.8/hook?token=S3CR3T"),
        (AddressGuard.of(ON_AWS), "https://metadata.internal/hook?token=S3CR3T"),
    ):
        with pytest.raises(InvalidRequest) as refused:
            guard.check_spec(spec(url))
        assert "token=<redacted>" in refused.value.detail and "S3CR3T" not in refused.value.detail


def test_https_is_accepted_on_aws() -> None:
    AddressGuard.of(ON_AWS).check_spec(spec(f"https://{PUBLIC}/hook"))


@pytest.mark.parametrize(
    "settings",
    [
        Settings(local_mode=True, allow_private_targets=False),  # the local stack with the SSRF guard closed
        Settings(local_mode=True, allow_private_targets=True),  # the local stack (scripts/dev)
        Settings(local_mode=False, allow_private_targets=True),  # the emulated deployment: receivers on 127.0.0.1
    ],
    ids=["local", "local-private", "emulated-deployment"],
)
def test_plain_http_is_accepted_where_receivers_are_local(settings: Settings) -> None:
    AddressGuard.of(settings).check_spec(spec(f"http://{PUBLIC}/hook"))


def test_a_stored_plain_http_job_fails_permanently_without_a_connection(no_connections: list[Any]) -> None:
    # Given a job stored with an http URL (before https was required), called on AWS
    invoker = HttpTargetInvoker(AddressGuard.of(ON_AWS), KeyRing.parse(LOCAL_SIGNING_KEYS))
    with pytest.raises(TargetFailure) as refused:
        invoker.invoke(call_of(spec(f"http://{PUBLIC}/hook")))
    # Then it is not sent, and not retried
    assert refused.value.kind == "permanent"
    assert refused.value.message.startswith("not sent:") and "https" in refused.value.message
    assert no_connections == []
    # ... while the same job over https does go out (and fails here only because the test refuses connections)
    with pytest.raises(TargetFailure) as tried:
        invoker.invoke(call_of(spec(f"https://{PUBLIC}/hook")))
    assert tried.value.kind == "retryable" and no_connections == [(PUBLIC, 443)]


def test_a_stored_plain_http_urls_query_is_redacted_in_the_run_the_dead_letter_log_and_the_event(
    world: Any, no_connections: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a job stored with a plain http URL whose query carries a secret (before https was required) ...
    url = f"http://{PUBLIC}/hook?token=S3CR3T&x=1#S3CR3T-fragment"
    body = {"schedule": {"type": "once", "delay_seconds": 10}, "target": {"type": "http", "url": url}}
    job = world.service.create("acme", JobSpec.model_validate(body), None, body).job
    # ... called by a worker on AWS, which refuses plain http before any connection
    invoker = HttpTargetInvoker(AddressGuard.of(ON_AWS), KeyRing.parse(LOCAL_SIGNING_KEYS))
    executor = world.executor(extra_targets={"http": invoker})
    world.set_time(job.next_run_at)
    world.sweep()

    with caplog.at_level(logging.INFO):
        world.deliver(executor)

    # Then the run is DEAD with the reason, which shows the URL's shape but none of its secrets
    (run,) = [e for e in world.ledger.items.values() if e.job_id == job.job_id]
    assert run.state == RunState.DEAD and no_connections == []
    shown = f"http://{PUBLIC}/hook?token=<redacted>&x=<redacted>#<redacted>"
    assert f"target url '{shown}' uses plain http" in run.last_error
    # ... and neither its dead-letter log line nor its completion event carry them
    (dead,) = [r for r in caplog.records if r.getMessage() == "occurrence dead"]
    assert "token=<redacted>" in dead.error
    (event,) = [e for e in world.events.published if e.job_id == job.job_id]
    assert "token=<redacted>" in str(event.error)
    written = [run.last_error, *(r.getMessage() + str(r.__dict__) for r in caplog.records), repr(event)]
    assert not [text for text in written if "S3CR3T" in text]
