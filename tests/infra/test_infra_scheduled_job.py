"""`ScheduledJob`: jobs declared in the app, as the template carries them to their provider function."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from aws_cdk import App, Stack
from aws_cdk.assertions import Template
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from punctual_cdk import Punctual, PunctualConfig, ScheduledJob
from punctual_cdk.punctual import READ_ROUTES, SUBMIT_ROUTES
from scheduler.core.model.labels import MANAGED_BY_LABEL
from scheduler.ops.scheduled_jobs import RESOURCE_TYPE, Declaration

NO_BUNDLING = {"aws:cdk:bundling-stacks": []}
PROVIDER_HANDLER = "scheduler.handlers.scheduled_job.lambda_handler"

NIGHTLY = {
    "name": "nightly report",
    "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
    "target": {"type": "http", "url": "https://example.com/hooks/nightly"},
    "payload": {"report": "daily"},
    "labels": {"team": "orders"},
    "retry": None,  # left out: the API's default
}


@dataclass
class Declared:
    app: App
    stack: Stack
    scheduler: Punctual
    nightly: ScheduledJob
    hourly: ScheduledJob
    nested: ScheduledJob
    template: dict[str, Any]

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: r for k, r in self.template["Resources"].items() if r["Type"] == resource_type}

    def logical_id(self, construct: Any) -> str:
        return str(self.stack.resolve(self.stack.get_logical_id(construct.node.default_child)))

    def provider(self) -> tuple[str, dict[str, Any]]:
        """(logical id, Properties) of the provider function."""
        (found,) = [
            (key, r["Properties"])
            for key, r in self.resources("AWS::Lambda::Function").items()
            if r["Properties"]["Handler"] == PROVIDER_HANDLER
        ]
        return found


def _app(tmp_path_factory: pytest.TempPathFactory, stack_name: str = "orders") -> tuple[App, Stack, Punctual]:
    app = App(context=NO_BUNDLING, outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = Stack(app, stack_name)
    return app, stack, Punctual(stack, "Scheduler", config=PunctualConfig(stage="test"))


@pytest.fixture(scope="module")
def declared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Declared]:
    """Three jobs: one at the stack's top, one whose target is a token (the dead-letter queue's URL), one nested."""
    app, stack, scheduler = _app(tmp_path_factory)
    nightly = ScheduledJob(stack, "Nightly", scheduler=scheduler, definition=NIGHTLY)
    hourly = ScheduledJob(
        stack,
        "Hourly",
        scheduler=scheduler,
        definition={
            "schedule": {"type": "rate", "every_seconds": 3600},
            "target": {"type": "sqs", "queue_url": scheduler.dead_letter_queue.queue_url},
        },
    )
    nested = ScheduledJob(
        Construct(stack, "Billing"),
        "Monthly",
        scheduler=scheduler,
        definition={"schedule": {"type": "cron", "expression": "0 0 1 * *"}, "target": NIGHTLY["target"]},
    )
    template = Template.from_stack(stack).to_json()
    yield Declared(app, stack, scheduler, nightly, hourly, nested, template)


def test_each_job_is_a_custom_resource_of_the_one_provider(declared: Declared) -> None:
    provider_id, _ = declared.provider()
    jobs = declared.resources(RESOURCE_TYPE)
    assert set(jobs) == {"Nightly", "Hourly", declared.logical_id(declared.nested.resource)}
    for job in jobs.values():
        assert job["Properties"]["ServiceToken"] == {"Fn::GetAtt": [provider_id, "Arn"]}
        assert job["Properties"]["ManagedBy"] == "cdk.orders"
    assert declared.nightly.job_id  # the resource's Ref, for the app to pass on


def test_the_declaration_is_the_definition_without_nulls_and_its_ownership(declared: Declared) -> None:
    properties = declared.resources(RESOURCE_TYPE)["Nightly"]["Properties"]
    # What the provider reads back (scheduler.ops.scheduled_jobs.Declaration), from the template as written
    declaration = Declaration.of(properties)
    assert declaration.definition == {key: value for key, value in NIGHTLY.items() if value is not None}
    assert declaration.external_id == "cdk.orders:Nightly" == declared.nightly.external_id
    assert declaration.spec()["labels"] == {"team": "orders", MANAGED_BY_LABEL: "cdk.orders"}
    assert declaration.spec()["external_id"] == "cdk.orders:Nightly"


def test_a_nested_job_is_owned_by_its_unique_logical_id(declared: Declared) -> None:
    logical_id = declared.logical_id(declared.nested.resource)
    assert logical_id.startswith("BillingMonthly") and logical_id != "BillingMonthly"
    assert declared.nested.external_id == f"cdk.orders:{logical_id}"


def test_a_definition_with_tokens_resolves_in_the_template(declared: Declared) -> None:
    definition = declared.resources(RESOURCE_TYPE)["Hourly"]["Properties"]["Definition"]
    queue = declared.logical_id(declared.scheduler.dead_letter_queue)
    assert "Fn::Join" in definition and {"Ref": queue} in definition["Fn::Join"][1]


def test_the_definition_reads_the_same_whatever_the_order_it_was_written_in(
    tmp_path_factory: pytest.TempPathFactory, declared: Declared
) -> None:
    # (Its properties unchanged, CloudFormation does not call the provider: a redeploy changes nothing.)
    _, stack, scheduler = _app(tmp_path_factory)
    reordered = dict(reversed(list(NIGHTLY.items())))
    reordered["schedule"] = dict(reversed(list(NIGHTLY["schedule"].items())))  # type: ignore[call-overload]
    ScheduledJob(stack, "Nightly", scheduler=scheduler, definition=reordered)
    again = Template.from_stack(stack).to_json()["Resources"]["Nightly"]["Properties"]
    assert again == declared.resources(RESOURCE_TYPE)["Nightly"]["Properties"]


def test_the_provider_may_submit_and_read_and_nothing_else(declared: Declared) -> None:
    _, provider = declared.provider()
    role = provider["Role"]["Fn::GetAtt"][0]
    statements = [
        statement
        for policy in declared.resources("AWS::IAM::Policy").values()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = {json.dumps(s["Action"]) for s in statements}
    assert actions == {'"execute-api:Invoke"', '["logs:CreateLogStream", "logs:PutLogEvents"]'}
    invoked = [arn for s in statements if s["Action"] == "execute-api:Invoke" for arn in _as_list(s["Resource"])]
    routes = [arn["Fn::Join"][1][-1] for arn in invoked]
    assert routes == [f"/test/{method}{path}" for method, path in (*SUBMIT_ROUTES, *READ_ROUTES)]
    # And it calls this scheduler's API: the stage's URL
    url = json.dumps(provider["Environment"]["Variables"]["PUNCTUAL_API_URL"])
    assert declared.logical_id(declared.scheduler.rest_api) in url and ".execute-api." in url


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_provider_is_deployed_after_the_scheduler_and_deleted_before_it(declared: Declared) -> None:
    provider_id, _ = declared.provider()
    depends = set(declared.template["Resources"][provider_id]["DependsOn"])
    scheduler = declared.scheduler
    needed = [
        scheduler.jobs_table,
        scheduler.executions_table,
        scheduler.rest_api,
        scheduler.rest_api.deployment_stage,
        scheduler.functions["api"],
        scheduler.functions["worker"],
        scheduler.ready_queue,
    ]
    assert {declared.logical_id(c) for c in needed} <= depends
    # and each job waits for the provider (its ServiceToken), so for all of these
    job = declared.resources(RESOURCE_TYPE)["Nightly"]
    assert job["Properties"]["ServiceToken"]["Fn::GetAtt"][0] == provider_id


def test_a_stack_without_scheduled_jobs_has_no_provider(default) -> None:
    handlers = {f["Properties"]["Handler"] for f in default.resources("AWS::Lambda::Function").values()}
    assert PROVIDER_HANDLER not in handlers
    assert not default.resources(RESOURCE_TYPE)


def test_jobs_as_code_leave_no_unacknowledged_cdk_nag_finding(declared: Declared) -> None:
    report = AwsSolutionsChecks(verbose=True).validate_scope(declared.stack)
    assert [v.rule_name for v in report.violations] == []


@pytest.mark.parametrize(
    ("definition", "refusal"),
    [
        ({**NIGHTLY, "external_id": "mine"}, "external_id is the stack's to set"),
        ({**NIGHTLY, "labels": {MANAGED_BY_LABEL: "me"}}, f"the label {MANAGED_BY_LABEL} is the stack's to set"),
        ({**NIGHTLY, "schedule": {"type": "cron", "expression": "61 * * * *"}}, "schedule.expression: minute must be"),
        ({**NIGHTLY, "target": {"type": "http"}}, "target"),
        ({**NIGHTLY, "retry": {"max_attempts": "many"}}, "retry.max_attempts"),
    ],
)
def test_a_definition_the_api_would_refuse_fails_the_synth_naming_the_field(
    tmp_path_factory: pytest.TempPathFactory, definition: dict[str, Any], refusal: str
) -> None:
    _, stack, scheduler = _app(tmp_path_factory)
    with pytest.raises(ValueError, match="orders/Nightly: the job's definition is refused") as refused:
        ScheduledJob(stack, "Nightly", scheduler=scheduler, definition=definition)
    assert refusal in str(refused.value)


def test_an_external_id_longer_than_the_api_takes_fails_the_synth(tmp_path_factory: pytest.TempPathFactory) -> None:
    app, stack, scheduler = _app(tmp_path_factory, stack_name="orders-" + "x" * 52)  # the label's value: 63
    ScheduledJob(stack, "A" * 80, scheduler=scheduler, definition=NIGHTLY)
    with pytest.raises(Exception, match="external_id must be 1-128 printable ASCII"):
        app.synth()


def test_a_stack_name_too_long_for_the_label_is_refused(tmp_path_factory: pytest.TempPathFactory) -> None:
    _, stack, scheduler = _app(tmp_path_factory, stack_name="orders-" + "x" * 60)
    with pytest.raises(ValueError, match=r"is too long for its jobs' label punctual\.dev/managed-by") as refused:
        ScheduledJob(stack, "Nightly", scheduler=scheduler, definition=NIGHTLY)
    assert "at most 59 characters" in str(refused.value)
