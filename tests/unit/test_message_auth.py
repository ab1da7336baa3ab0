"""Dispatch messages carry an HMAC only the scheduler's functions can compute; the secrets fail closed outside local
mode; targets naming the scheduler's own resources are refused at call time too (docs/security.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.adapters.dispatch_message import (
    MalformedMessage,
    UnauthenticatedMessage,
    dispatch_from_body,
    dispatch_to_body,
    message_key,
)
from scheduler.core.model.job import Job, JobSpec, JobState
from scheduler.core.ports import Dispatch, TargetCall, TargetFailure
from scheduler.security.secrets import MissingSecret, resolve_secret
from scheduler.settings import Settings
from scheduler.targets.policy import OwnResources, PolicedInvoker, TargetPolicy
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DISPATCH = Dispatch("j1", "tenant-a", T0, T0, 3, "manual", "high")


def test_a_signed_message_round_trips() -> None:
    assert dispatch_from_body(dispatch_to_body(DISPATCH, LOCAL_MESSAGE_KEY), LOCAL_MESSAGE_KEY) == DISPATCH


@pytest.mark.parametrize(
    "field, value",
    [("job_id", "j2"), ("tenant", "tenant-b"), ("version", 4), ("kind", "scheduled"), ("priority", "low"),
     ("fire_at", "2026-03-01T12:00:01Z"), ("scheduled_for", "2026-03-01T11:00:00Z"), ("occurrence_key", "j2:x")],
)  # fmt: skip
def test_changing_any_field_breaks_the_hmac(field: str, value: Any) -> None:
    raw = json.loads(dispatch_to_body(DISPATCH, LOCAL_MESSAGE_KEY))
    raw[field] = value
    with pytest.raises(UnauthenticatedMessage, match="does not match"):
        dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY)


def test_a_message_without_hmac_is_refused_unless_the_upgrade_window_is_open() -> None:
    raw = json.loads(dispatch_to_body(DISPATCH, LOCAL_MESSAGE_KEY))
    del raw["mac"]
    with pytest.raises(UnauthenticatedMessage, match="carries no HMAC"):
        dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY)
    assert dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY, accept_unsigned=True) == DISPATCH
    # The window never lets a wrong HMAC through.
    wrong = dispatch_to_body(DISPATCH, message_key("another deployment"))
    with pytest.raises(UnauthenticatedMessage):
        dispatch_from_body(wrong, LOCAL_MESSAGE_KEY, accept_unsigned=True)


@pytest.mark.parametrize("mac", [7, None, "é", ["x"]])
def test_a_malformed_hmac_is_refused_as_unauthenticated(mac: Any) -> None:
    raw = json.loads(dispatch_to_body(DISPATCH, LOCAL_MESSAGE_KEY)) | {"mac": mac}
    with pytest.raises(MalformedMessage):
        dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY)


@pytest.mark.parametrize("name", ["signing_secret", "signing_keys", "message_secret"])
def test_secrets_fail_closed_outside_local_mode(name: str) -> None:
    with pytest.raises(MissingSecret, match=f"SCHEDULER_{name.upper()}_ARN"):
        resolve_secret(Settings(local_mode=False), name)
    assert resolve_secret(Settings(local_mode=True), name) == getattr(Settings(), name)
    # A value of the operator's own (not the public one) is used as it is.
    if name != "signing_keys":
        assert resolve_secret(Settings(local_mode=False, **{name: "s3cret-of-my-own"}), name) == "s3cret-of-my-own"


def test_a_secret_arn_is_read_from_secrets_manager() -> None:
    class FakeSecrets:
        def get_secret_value(self, SecretId: str) -> dict[str, str]:  # noqa: N803 (boto3's spelling)
            return {"SecretString": f"value of {SecretId}"}

    settings = Settings(local_mode=False, message_secret_arn="arn:aws:secretsmanager:eu-west-1:1:secret:m")
    assert (
        resolve_secret(settings, "message_secret", FakeSecrets())
        == "value of arn:aws:secretsmanager:eu-west-1:1:secret:m"
    )


def _call(target: dict[str, Any]) -> TargetCall:
    spec = JobSpec.model_validate({"schedule": {"type": "once", "at": "2030-01-01T00:00:00Z"}, "target": target})
    job = Job(job_id="j1", tenant="t", spec=spec, version=1, state=JobState.ACTIVE, created_at=T0, updated_at=T0)
    return TargetCall(job, "j1:x", T0, 1, 1, lambda: None, T0)


def test_a_stored_job_naming_a_scheduler_queue_is_refused_at_call_time_without_calling() -> None:
    ready = "https://sqs.eu-west-1.amazonaws.com/123456789012/punctual-ReadyQueue"
    policy = TargetPolicy(OwnResources.of(Settings(ready_queue_url=ready)), default_open=True)
    called: list[TargetCall] = []

    class Inner:
        def invoke(self, call: TargetCall) -> str | None:
            called.append(call)
            return "sent"

    invoker = PolicedInvoker(policy, Inner())
    with pytest.raises(TargetFailure) as refused:
        invoker.invoke(_call({"type": "sqs", "queue_url": ready.replace("sqs.eu-west-1.", "")}))
    assert refused.value.kind == "permanent" and "scheduler's own resources" in refused.value.message
    assert called == []
    assert invoker.invoke(_call({"type": "sqs", "queue_url": ready.replace("Ready", "Tenant")})) == "sent"
