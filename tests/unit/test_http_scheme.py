"""Plain `http://` targets are for the local stack and deployments that call receivers on their own network: on AWS
the signed call, its headers and its payload travel over https only. Refused at submit (a 422 naming `target.url`)
and, for a job stored before, at every call - permanently, without connecting."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.http_target import HttpTargetInvoker
from scheduler.core.errors import InvalidRequest
from scheduler.core.model.job import JobSpec
from scheduler.core.ports import TargetFailure
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS, Settings
from tests.unit.test_http_guard import call_of

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PUBLIC = "93.184.216.34"  # a literal public address: no DNS
#: The deployed stack's settings (infra/environment.py sets both explicitly).
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
