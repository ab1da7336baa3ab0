"""Tenant isolation at AWS targets (docs/security.md): allow-lists closed by default and compared as full ARNs,
handler targets closed unless listed, no AWS target without the target role, and the target role assumed per tenant
with the tenant's session tag."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import TypeAdapter

from punctual_cdk.config import ConfigError, parse_config
from scheduler.adapters.aws_targets import SqsTargetInvoker, tenant_sessions
from scheduler.core.errors import InvalidRequest
from scheduler.core.model.job import JobSpec, Target
from scheduler.settings import Settings, TenantTargets
from scheduler.targets.policy import OwnResources, TargetPolicy
from scheduler.targets.resources import TENANT_TAG, tenant_session_name, tenant_tag

ACCOUNT = "111111111111"
OTHER = "222222222222"
REGION = "eu-west-1"
A = f"arn:aws:iam::{ACCOUNT}:role/app-a#AROAAAAAAAAAAAAAAAAAA"
B = f"arn:aws:iam::{ACCOUNT}:role/app-b#AROABBBBBBBBBBBBBBBBB"
QUEUE_A = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/orders-a"
QUEUE_B = f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/orders-b"


def _settings(**values: Any) -> Settings:
    base: dict[str, Any] = {
        "ready_queue_url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/punctual-prod-ready",
        "stack_name": "punctual-prod",
        "account_id": ACCOUNT,
        "region": REGION,
        "target_role_arn": f"arn:aws:iam::{ACCOUNT}:role/punctual-prod-TargetRole",
        "tenant_targets": {
            A: TenantTargets.model_validate(
                {
                    "sqs": [f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders-a"],
                    "lambda": [f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:report-a"],
                    "eventbridge": [f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/partners"],
                    "eventbridge_sources": ["com.a.*"],
                    "handler": ["greet"],
                }
            ),
            B: TenantTargets.model_validate({"sqs": [f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders-b"]}),
        },
    }
    return Settings(**{**base, **values})


_TARGET: TypeAdapter[Target] = TypeAdapter(Target)


def parse_target(target: dict[str, Any]) -> Target:
    return _TARGET.validate_python(target)


def _refusal(policy: TargetPolicy, tenant: str, target: dict[str, Any]) -> str | None:
    refused = policy.refusal(tenant, parse_target(target))
    return None if refused is None else str(refused)


@pytest.fixture
def policy() -> TargetPolicy:
    return TargetPolicy.of(_settings())


def test_a_tenant_is_refused_another_tenants_queue(policy: TargetPolicy) -> None:
    assert _refusal(policy, A, {"type": "sqs", "queue_url": QUEUE_A}) is None
    assert "allow-list" in (_refusal(policy, A, {"type": "sqs", "queue_url": QUEUE_B}) or "")
    assert "allow-list" in (_refusal(policy, B, {"type": "sqs", "queue_url": QUEUE_A}) or "")


def test_a_tenant_may_publish_only_under_its_own_sources(policy: TargetPolicy) -> None:
    bus = {"type": "eventbridge", "event_bus_name": "partners"}
    assert _refusal(policy, A, {**bus, "source": "com.a.billing"}) is None
    assert "event sources" in (_refusal(policy, A, {**bus, "source": "com.b.billing"}) or "")


def test_unlisted_tenants_may_call_nothing_unless_the_operator_opens_the_grants() -> None:
    stranger = f"arn:aws:iam::{ACCOUNT}:role/other#AROACCCCCCCCCCCCCCCCC"
    target = {"type": "sqs", "queue_url": QUEUE_A}
    assert "no entry in tenant_targets" in (_refusal(TargetPolicy.of(_settings()), stranger, target) or "")
    assert _refusal(TargetPolicy.of(_settings(default_targets_open=True)), stranger, target) is None
    # The default deployment is closed.
    assert Settings().default_targets_open is False


@pytest.mark.parametrize(
    "target",
    [
        # the same queue name in another account, and in another region
        {"type": "sqs", "queue_url": f"https://sqs.{REGION}.amazonaws.com/{OTHER}/orders-a"},
        {"type": "sqs", "queue_url": f"https://sqs.us-east-2.amazonaws.com/{ACCOUNT}/orders-a"},
        # the same function name in another account (by ARN and by partial ARN)
        {"type": "lambda", "function_name": f"arn:aws:lambda:{REGION}:{OTHER}:function:report-a"},
        {"type": "lambda", "function_name": f"{OTHER}:function:report-a"},
        # the same bus name in another account
        {
            "type": "eventbridge",
            "event_bus_name": f"arn:aws:events:{REGION}:{OTHER}:event-bus/partners",
            "source": "com.a.x",
        },
    ],
)
def test_allow_list_entries_admit_their_own_account_and_region_only(
    policy: TargetPolicy, target: dict[str, Any]
) -> None:
    assert "allow-list" in (_refusal(policy, A, target) or "")


def test_a_bare_name_resolves_in_the_workers_account_and_region(policy: TargetPolicy) -> None:
    assert _refusal(policy, A, {"type": "lambda", "function_name": "report-a"}) is None
    assert _refusal(policy, A, {"type": "lambda", "function_name": "report-a:live"}) is None


@pytest.mark.parametrize(
    "target",
    [
        {"type": "sqs", "queue_url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/punctual%2Dprod-ready"},
        {"type": "sqs", "queue_url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/punctual%2dprod-anything"},
        {"type": "lambda", "function_name": "punctual%2Dprod-Worker"},
    ],
)
def test_a_percent_encoded_own_resource_is_still_refused(target: dict[str, Any]) -> None:
    opened = TargetPolicy.of(_settings(default_targets_open=True))
    assert "scheduler's own resources" in (_refusal(opened, A, target) or "")


def test_handler_targets_are_closed_unless_listed() -> None:
    opened = TargetPolicy.of(_settings(default_targets_open=True))
    assert _refusal(opened, A, {"type": "handler", "name": "greet"}) is None
    assert "allow-list of handler targets" in (_refusal(opened, B, {"type": "handler", "name": "greet"}) or "")
    stranger = f"arn:aws:iam::{ACCOUNT}:role/other#AROACCCCCCCCCCCCCCCCC"
    refused = _refusal(opened, stranger, {"type": "handler", "name": "greet"})
    assert "handler targets are open to no tenant" in (refused or "")


def test_aws_targets_are_refused_without_a_target_role_outside_local_mode() -> None:
    target = {"type": "sqs", "queue_url": QUEUE_A}
    assert "no target role" in (_refusal(TargetPolicy.of(_settings(target_role_arn="")), A, target) or "")
    local = _settings(target_role_arn="", local_mode=True, default_targets_open=True)
    assert _refusal(TargetPolicy.of(local), A, target) is None
    # A handler target runs in the worker; it needs no role.
    assert _refusal(TargetPolicy.of(_settings(target_role_arn="")), A, {"type": "handler", "name": "greet"}) is None


def test_a_refused_target_is_a_422_naming_the_field(policy: TargetPolicy) -> None:
    spec = JobSpec.model_validate(
        {
            "name": "x",
            "schedule": {"type": "once", "at": (datetime.now(UTC) + timedelta(hours=1)).isoformat()},
            "target": {"type": "sqs", "queue_url": QUEUE_B},
        }
    )
    with pytest.raises(InvalidRequest) as refused:
        policy.check_spec(A, spec)
    assert refused.value.field == "target.queue_url"


def test_allow_list_entries_must_be_full_arns() -> None:
    with pytest.raises(ValueError, match="not a full ARN"):
        TenantTargets.model_validate({"lambda": ["report-a"]})
    with pytest.raises(ValueError, match="not a full ARN"):
        TenantTargets.model_validate({"sqs": [QUEUE_A]})


@pytest.mark.parametrize(
    "key, allow, message",
    [
        (f"arn:aws:iam::{ACCOUNT}:role/app-a", {}, "not a tenant as the API names it"),
        ("app-a", {}, "not a tenant as the API names it"),
        (A, {"eventbridge": ["*"]}, "no eventbridge_sources"),
        (A, {"sqs": [f"arn:aws:sqs:{REGION}:{ACCOUNT}:not-granted"]}, "is not granted"),
    ],
)
def test_the_synth_refuses_allow_lists_that_could_not_apply(key: str, allow: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"tenant_targets": {key: allow}})


class _FakeSts:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def assume_role(self, **request: Any) -> dict[str, Any]:
        self.requests.append(request)
        return {
            "Credentials": {
                "AccessKeyId": f"ASIA{len(self.requests)}",
                "SecretAccessKey": "secret",
                "SessionToken": "token",
                "Expiration": datetime.now(UTC) + timedelta(hours=1),
            }
        }


def test_each_tenant_calls_through_a_session_tagged_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    sts = _FakeSts()
    sessions = tenant_sessions(f"arn:aws:iam::{ACCOUNT}:role/punctual-prod-TargetRole", sts)
    invoker = SqsTargetInvoker(session=sessions)
    client_a, client_b = invoker.client_for(A), invoker.client_for(B)
    assert client_a is not client_b and invoker.client_for(A) is client_a
    assert [r["Tags"] for r in sts.requests] == [
        [{"Key": TENANT_TAG, "Value": tenant_tag(A)}],
        [{"Key": TENANT_TAG, "Value": tenant_tag(B)}],
    ]
    names = [r["RoleSessionName"] for r in sts.requests]
    assert names == [tenant_session_name(A), tenant_session_name(B)] and names[0] != names[1]
    assert client_a._request_signer._credentials.access_key == "ASIA1"
    assert all(len(name) <= 64 for name in names) and "app-a" in names[0]


def test_the_local_stack_opens_its_targets_to_its_tenants() -> None:
    local = Settings(local_mode=True, default_targets_open=True)
    policy = TargetPolicy.of(local)
    assert _refusal(policy, "dev", {"type": "handler", "name": "greet"}) is None
    assert OwnResources.of(local).home.account == "000000000000"


@pytest.mark.parametrize(
    "address",
    [
        "https://sqs.eu-central-1.amazonaws.com/123456789012/orders?token=S3CR3T",
        "https://sqs.eu-central-1.amazonaws.com/12345/orders#S3CR3T",
    ],
)
def test_a_refused_queue_urls_query_is_not_repeated_in_the_refusal(address: str) -> None:
    from scheduler.targets.resources import Home, NotAResource, sqs_queue_arn

    with pytest.raises(NotAResource) as refused:
        sqs_queue_arn(address, Home.of("123456789012"))

    assert "<redacted>" in str(refused.value) and "S3CR3T" not in str(refused.value)
