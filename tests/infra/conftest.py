"""Fixtures for the CDK app tests: each configuration is synthesized once per session (synthesis costs
seconds), offline, and without bundling (`"aws:cdk:bundling-stacks": []`, so no pip download runs)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# jsii prints a banner on every start under Node 20 (end of life); it is noise in test output.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import App
from aws_cdk.assertions import Template

from infra import REPO_ROOT
from infra.app import build_app
from infra.stack import PunctualStack
from punctual_cdk import Punctual

#: The context the CLI passes from cdk.json (feature flags and the `punctual` defaults), so the tests
#: check the template that `scripts/deploy` would deploy.
CDK_JSON_CONTEXT: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
NO_BUNDLING: dict[str, Any] = {"aws:cdk:bundling-stacks": []}

ACCOUNT = "123456789012"
REGION = "eu-central-1"
#: One ARN per kind of target, for the configured stack.
TARGETS = {
    "target_sqs_queue_arns": [f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"],
    "target_sns_topic_arns": [f"arn:aws:sns:{REGION}:{ACCOUNT}:billing.fifo"],
    "target_lambda_function_arns": [f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:report:live"],
    "target_state_machine_arns": [f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:nightly"],
    "target_event_bus_arns": [f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/partners"],
    "target_kms_key_arns": [f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"],
}
CONFIGURED = {
    "stage": "prod",
    "shard_count": 16,
    "lookahead_seconds": 600,
    "lease_seconds": 90,
    "bucket_lease_seconds": 180,
    "worker_batch_size": 2,
    "worker_max_concurrency": 200,
    "sweeper_reserved_concurrency": 0,
    "sweeper_memory_mb": 1769,
    "worker_memory_mb": 1769,
    "api_throttle_rate_limit": 250,
    "api_throttle_burst_limit": 500,
    "api_cloudwatch_role": False,
    "alarm_email": "oncall@example.com",
    "retain_data": False,
    "log_retention_days": 90,
    "default_targets_open": True,
    **TARGETS,
}
#: Two tenants, as the API keys them, each allowed its own targets only.
TENANT_A = f"arn:aws:iam::{ACCOUNT}:role/app-a#AROAAAAAAAAAAAAAAAAAA"
TENANT_B = f"arn:aws:iam::{ACCOUNT}:role/app-b#AROABBBBBBBBBBBBBBBBB"
ISOLATED = {
    **TARGETS,
    "target_sqs_queue_arns": [f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders", f"arn:aws:sqs:{REGION}:{ACCOUNT}:invoices"],
    "tenant_targets": {
        TENANT_A: {
            "sqs": [f"arn:aws:sqs:{REGION}:{ACCOUNT}:orders"],
            "eventbridge": TARGETS["target_event_bus_arns"],
            "eventbridge_sources": ["com.a.*"],
        },
        TENANT_B: {"sqs": [f"arn:aws:sqs:{REGION}:{ACCOUNT}:invoices"], "lambda": ["*"]},
    },
}


@dataclass
class Synthesized:
    """A synthesized stack and its template, with lookups the assertions share."""

    app: App
    stack: PunctualStack
    template: Template
    template_path: Path
    #: The template as parsed JSON (read once: `Template.to_json` is a round trip to the jsii runtime).
    json: dict[str, Any]

    @property
    def punctual(self) -> Punctual:
        """The scheduler construct the stack is made of."""
        return self.stack.punctual

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.json["Resources"].items()
            if resource["Type"] == resource_type
        }

    def logical_id(self, construct: Any) -> str:
        """The logical ID of an L2 construct's CloudFormation resource."""
        return str(self.stack.resolve(self.stack.get_logical_id(construct.node.default_child)))

    def table(self, schema: Any) -> dict[str, Any]:
        """Properties of the table built from `schema` (a scheduler.schema.TableSchema)."""
        construct = self.punctual.storage.node.find_child(schema.logical_name)
        properties: dict[str, Any] = self.json["Resources"][self.logical_id(construct)]["Properties"]
        return properties

    def function(self, handler_module: str) -> tuple[str, dict[str, Any]]:
        """(logical id, Properties) of the function whose handler is `scheduler.handlers.<module>`."""
        matches = [
            (logical_id, resource["Properties"])
            for logical_id, resource in self.resources("AWS::Lambda::Function").items()
            if resource["Properties"]["Handler"] == f"scheduler.handlers.{handler_module}.lambda_handler"
        ]
        assert len(matches) == 1, f"expected one {handler_module} function, found {len(matches)}"
        return matches[0]

    def statements(self, handler_module: str) -> list[dict[str, Any]]:
        """Every IAM statement in the policies attached to that function's role."""
        _, props = self.function(handler_module)
        role_id = props["Role"]["Fn::GetAtt"][0]
        found = []
        for policy in self.resources("AWS::IAM::Policy").values():
            if {"Ref": role_id} in policy["Properties"]["Roles"]:
                found += policy["Properties"]["PolicyDocument"]["Statement"]
        return found

    def actions_on(self, handler_module: str, construct: Any) -> set[str]:
        """The actions that function may perform on resources of `construct` (by logical id)."""
        logical_id = self.logical_id(construct)
        actions: set[str] = set()
        for statement in self.statements(handler_module):
            if logical_id in json.dumps(statement["Resource"]):
                actions |= set(_as_list(statement["Action"]))
        return actions


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


SynthFactory = Callable[[Mapping[str, Any]], Synthesized]


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SynthFactory]:
    """Synthesize the app with `punctual` settings merged over cdk.json's; cached per settings."""
    cache: dict[str, Synthesized] = {}

    def _synth(settings: Mapping[str, Any]) -> Synthesized:
        key = json.dumps(settings, sort_keys=True)
        if key not in cache:
            outdir = tmp_path_factory.mktemp("cdk.out")
            context = {**CDK_JSON_CONTEXT, **NO_BUNDLING}
            context["punctual"] = {**CDK_JSON_CONTEXT["punctual"], **settings}
            app, stack = build_app(context, outdir=str(outdir))
            assembly = app.synth()
            template_path = Path(assembly.get_stack_by_name(stack.stack_name).template_full_path)
            parsed = json.loads(template_path.read_text())
            cache[key] = Synthesized(
                app=app,
                stack=stack,
                template=Template.from_json(parsed),
                template_path=template_path,
                json=parsed,
            )
        return cache[key]

    yield _synth


@pytest.fixture(scope="session")
def default(synth: SynthFactory) -> Synthesized:
    """The stack as cdk.json configures it."""
    return synth({})


@pytest.fixture(scope="session")
def configured(synth: SynthFactory) -> Synthesized:
    """A stack with every option moved off its default, targets and alarm e-mail included."""
    return synth(CONFIGURED)


@pytest.fixture(scope="session")
def isolated(synth: SynthFactory) -> Synthesized:
    """A stack with targets granted per tenant (the default: closed grants, two allow-lists)."""
    return synth(ISOLATED)


@pytest.fixture(scope="session")
def targets() -> dict[str, list[str]]:
    """The target ARNs the configured stack lists, by configuration key."""
    return TARGETS
