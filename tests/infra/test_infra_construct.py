"""The `Punctual` construct in an app's own stack: what it exposes, what its grants open, and that this repository's
stack is nothing but the construct and its outputs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks
from pydantic import ValidationError

from punctual_cdk import Punctual, PunctualConfig
from punctual_cdk.punctual import READ_ROUTES, SUBMIT_ROUTES

NO_BUNDLING = {"aws:cdk:bundling-stacks": []}


@dataclass
class UserApp:
    app: App
    stack: Stack
    scheduler: Punctual
    submitter: iam.Role
    reader: lambda_.Function
    template: dict[str, Any]

    def logical_id(self, construct: Any) -> str:
        return str(self.stack.resolve(self.stack.get_logical_id(construct.node.default_child)))

    def invoke_statements(self, role_logical_id: str) -> list[dict[str, Any]]:
        """The execute-api statements of the policies attached to that role."""
        found = []
        for resource in self.template["Resources"].values():
            if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role_logical_id} in resource["Properties"]["Roles"]:
                statements = resource["Properties"]["PolicyDocument"]["Statement"]
                found += [s for s in statements if "execute-api" in json.dumps(s["Action"])]
        return found


@pytest.fixture(scope="module")
def user_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UserApp]:
    """An app's own stack with the scheduler in it, a role allowed to submit and a function allowed to read."""
    app = App(context=NO_BUNDLING, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = Stack(app, "orders")
    scheduler = Punctual(stack, "Scheduler", config=PunctualConfig(stage="test", alarm_email="ops@example.com"))
    submitter = iam.Role(stack, "Submitter", assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"))
    reader = lambda_.Function(
        stack,
        "Reader",
        runtime=lambda_.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=lambda_.Code.from_inline("def handler(event, context): ..."),
        environment={"PUNCTUAL_API_URL": scheduler.api_url},
    )
    scheduler.grant_submit(submitter)
    scheduler.grant_read(reader)
    template = Template.from_stack(stack).to_json()
    yield UserApp(app, stack, scheduler, submitter, reader, template)


def _route_arn(app: UserApp, method: str, path: str) -> dict[str, Any]:
    api = app.logical_id(app.scheduler.rest_api)
    return {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                ":execute-api:",
                {"Ref": "AWS::Region"},
                ":",
                {"Ref": "AWS::AccountId"},
                ":",
                {"Ref": api},
                f"/test/{method}{path}",
            ],
        ]
    }


def test_the_scheduler_lives_in_the_apps_stack_under_its_own_id(user_app: UserApp) -> None:
    resources = user_app.template["Resources"]
    tables = [key for key, r in resources.items() if r["Type"] == "AWS::DynamoDB::Table"]
    assert sorted(tables) == sorted(
        [user_app.logical_id(user_app.scheduler.jobs_table), user_app.logical_id(user_app.scheduler.executions_table)]
    )
    assert all(key.startswith("SchedulerStorage") for key in tables)
    functions = [r for r in resources.values() if r["Type"] == "AWS::Lambda::Function"]
    assert {f["Properties"]["Handler"] for f in functions} == {
        "scheduler.handlers.api.lambda_handler",
        "scheduler.handlers.sweeper.lambda_handler",
        "scheduler.handlers.worker.lambda_handler",
        "index.handler",  # the app's own
    }


def test_the_api_url_and_the_resources_it_exposes_are_the_stacks(user_app: UserApp) -> None:
    scheduler = user_app.scheduler
    variables = next(
        r["Properties"]["Environment"]["Variables"]
        for r in user_app.template["Resources"].values()
        if r["Type"] == "AWS::Lambda::Function" and r["Properties"]["Handler"] == "index.handler"
    )
    url = json.dumps(variables["PUNCTUAL_API_URL"])
    assert user_app.logical_id(scheduler.rest_api) in url and ".execute-api." in url
    assert set(scheduler.ready_queues) == {"high", "normal", "low"}
    assert scheduler.ready_queues["normal"] is scheduler.ready_queue
    assert user_app.logical_id(scheduler.dead_letter_queue) in user_app.template["Resources"]
    assert user_app.logical_id(scheduler.event_bus) in user_app.template["Resources"]
    assert set(scheduler.functions) == {"api", "sweeper", "worker"}
    assert scheduler.config.stage == "test"


def test_grant_submit_opens_the_job_changing_routes_of_the_stage_and_nothing_else(user_app: UserApp) -> None:
    statements = user_app.invoke_statements(user_app.logical_id(user_app.submitter))
    assert [s["Action"] for s in statements] == ["execute-api:Invoke"]
    resources = statements[0]["Resource"]
    assert resources == [_route_arn(user_app, method, path) for method, path in SUBMIT_ROUTES]
    assert {method for method, _ in SUBMIT_ROUTES} == {"POST", "PATCH", "DELETE"}
    assert all(path.startswith("/v1/jobs") for _, path in SUBMIT_ROUTES)


def test_grant_read_opens_the_get_routes_only(user_app: UserApp) -> None:
    role = user_app.logical_id(user_app.reader.role)
    statements = user_app.invoke_statements(role)
    assert [s["Resource"] for s in statements] == [_route_arn(user_app, "GET", "/v1/*")]
    assert READ_ROUTES == (("GET", "/v1/*"),)


def test_the_app_with_the_scheduler_and_its_grants_has_no_unacknowledged_cdk_nag_finding(user_app: UserApp) -> None:
    report = AwsSolutionsChecks(verbose=True).validate_scope(user_app.stack)
    # The app's own function is not ours (its managed policy is the app's to answer for); what the scheduler builds,
    # and the wildcards of the routes it grants the app's roles, are held to the rules.
    ours = [
        f"{v.rule_name} at {[r.construct_path for r in v.violating_resources]}"
        for v in report.violations
        if v.rule_name.startswith("AwsSolutions-IAM5")
        or not all(r.construct_path.startswith("orders/Reader/") for r in v.violating_resources)
    ]
    assert ours == []


def test_settings_are_checked_when_they_are_made() -> None:
    with pytest.raises(ValidationError, match="shard_count"):
        PunctualConfig(shard_count=0)
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        PunctualConfig(stagee="prod")  # type: ignore[call-arg]


def test_this_repositorys_stack_is_the_construct_and_its_outputs(default) -> None:
    stack = default.stack
    ours = [child for child in stack.node.children if isinstance(child, Punctual)]
    assert ours == [default.punctual]
    # Besides the construct: the outputs, and what CDK adds to every stack
    others = {type(child).__name__ for child in stack.node.children if child is not default.punctual}
    assert others <= {"CfnOutput", "CfnParameter", "CfnRule"}, others
