"""Least privilege: each function may do what it needs, on its own resources, and nothing on `*`."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.targets.resources import TENANT_TAG, tenant_tag
from tests.infra.conftest import TARGETS, TENANT_A, TENANT_B

HANDLERS = ("api", "sweeper", "worker")
WRITE = {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
#: What no function uses, so none may do (least privilege).
UNUSED = {
    "dynamodb:Scan",
    "dynamodb:BatchWriteItem",
    "dynamodb:GetRecords",
    "dynamodb:GetShardIterator",
    "dynamodb:DescribeStream",
    "dynamodb:ListStreams",
    "dynamodb:*",
}
READ = {"dynamodb:GetItem", "dynamodb:Query"}
TARGET_ACTIONS = {
    "sqs:SendMessage",
    "sns:Publish",
    "lambda:InvokeFunction",
    "states:StartExecution",
    "events:PutEvents",
}


def _as_list(value):
    return value if isinstance(value, list) else [value]


#: Actions that take no resource but `*` (IAM has no resource-level permissions for them): each alone in its
#: statement, and only these may be granted on `*`.
ON_EVERY_RESOURCE = {"cloudwatch:GetMetricData"}


def test_no_policy_statement_grants_on_every_resource(default, configured) -> None:
    for synthesized in (default, configured):
        for logical_id, policy in synthesized.resources("AWS::IAM::Policy").items():
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                if "*" in _as_list(statement["Resource"]):
                    assert set(_as_list(statement["Action"])) <= ON_EVERY_RESOURCE, (logical_id, statement)
                assert not any(action.endswith("*") for action in _as_list(statement["Action"])), statement


def test_function_roles_carry_no_managed_policies(default) -> None:
    for handler in HANDLERS:
        _, props = default.function(handler)
        role = default.json["Resources"][props["Role"]["Fn::GetAtt"][0]]
        assert "ManagedPolicyArns" not in role["Properties"], handler


def test_the_api_reads_the_lanes_depths_and_the_metrics_for_the_operator_view(default) -> None:
    scheduler = default.punctual

    # Every lane's ready queue and the dead-letter queue: their depths, nothing else besides the sends
    for queue in (*scheduler.queues.lanes.values(), scheduler.queues.dead_letter_queue):
        assert "sqs:GetQueueAttributes" in default.actions_on("api", queue), queue.node.id
    assert default.actions_on("api", scheduler.queues.dead_letter_queue) == {"sqs:GetQueueAttributes"}
    # ... and the metrics, which IAM grants only on `*`; no other function reads them
    on_everything = [s for s in default.statements("api") if "*" in _as_list(s["Resource"])]
    assert [_as_list(s["Action"]) for s in on_everything] == [["cloudwatch:GetMetricData"]]
    for handler in ("sweeper", "worker"):
        assert not any("*" in _as_list(s["Resource"]) for s in default.statements(handler)), handler


def test_api_reads_and_writes_jobs_and_executions_and_sends_to_the_ready_queue(default) -> None:
    scheduler = default.punctual

    assert default.actions_on("api", scheduler.storage.jobs_table) >= READ | WRITE
    # The api settles RECONCILING runs (POST .../runs/{key}/resolve): a conditional write to the ledger.
    assert default.actions_on("api", scheduler.storage.executions_table) >= READ | WRITE
    assert "sqs:SendMessage" in default.actions_on("api", scheduler.queues.ready_queue)
    assert not default.actions_on("api", scheduler.queues.ready_queue) & {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
    assert default.actions_on("api", scheduler.queues.dead_letter_queue) == {"sqs:GetQueueAttributes"}  # its depth


def test_sweeper_reads_and_writes_jobs_and_sends_to_the_ready_queue_only(default) -> None:
    scheduler = default.punctual

    assert default.actions_on("sweeper", scheduler.storage.jobs_table) >= READ | WRITE
    # On the ledger, only the completion-event outbox: read its index, clear its entries (see test_infra_events)
    assert default.actions_on("sweeper", scheduler.storage.executions_table) == {
        "dynamodb:Query",
        "dynamodb:UpdateItem",
    }
    assert "sqs:SendMessage" in default.actions_on("sweeper", scheduler.queues.ready_queue)
    assert "sqs:ReceiveMessage" not in default.actions_on("sweeper", scheduler.queues.ready_queue)
    assert default.actions_on("sweeper", scheduler.queues.dead_letter_queue) == set()
    assert default.actions_on("sweeper", scheduler.signing.secret) == set()
    assert default.actions_on("sweeper", scheduler.signing.keys) == set()


def test_worker_owns_the_ledger_reads_jobs_consumes_and_dead_letters(default) -> None:
    scheduler = default.punctual

    assert default.actions_on("worker", scheduler.storage.executions_table) >= READ | WRITE
    assert default.actions_on("worker", scheduler.storage.jobs_table) >= READ
    assert default.actions_on("worker", scheduler.queues.ready_queue) >= {
        "sqs:ReceiveMessage",
        "sqs:DeleteMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:SendMessage",  # a throttled occurrence goes back as a new message
    }
    assert "sqs:SendMessage" in default.actions_on("worker", scheduler.queues.dead_letter_queue)


def test_the_worker_writes_only_tenant_items_of_the_jobs_table(default) -> None:
    # Its tenants' execution slots (`TENANT#...`), never a job or a timer.
    jobs = default.logical_id(default.punctual.storage.jobs_table)
    writes = [
        statement
        for statement in default.statements("worker")
        if jobs in json.dumps(statement["Resource"]) and set(_as_list(statement["Action"])) & WRITE
    ]
    assert len(writes) == 1
    [statement] = writes
    assert set(_as_list(statement["Action"])) == {"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"}
    assert statement["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["TENANT#*"]}}
    assert "/index/" not in json.dumps(statement["Resource"])


@pytest.mark.parametrize(
    "v1, secret, readers",
    [
        (False, "secret", set()),  # signature v1 is off by default: nobody reads its master secret
        (True, "secret", {"worker"}),
        (False, "keys", {"worker", "api"}),
        (False, "messages", {"worker", "api", "sweeper"}),
    ],
)
def test_each_secret_is_readable_by_its_readers_only(synth, v1: bool, secret: str, readers: set[str]) -> None:
    stack = synth({"signature_v1": v1})
    for handler in HANDLERS:
        actions = stack.actions_on(handler, getattr(stack.punctual.signing, secret))
        assert ("secretsmanager:GetSecretValue" in actions) == (handler in readers), handler


def test_with_signature_v1_off_nothing_refers_to_its_secret(synth) -> None:
    stack = synth({"signature_v1": False})
    secret = stack.logical_id(stack.punctual.signing.secret)

    # The secret stays (turning v1 on again keeps the tenants' v1 keys), but no grant, variable or output names it
    assert stack.json["Resources"][secret]["Type"] == "AWS::SecretsManager::Secret"
    others = {key: value for key, value in stack.json["Resources"].items() if key != secret}
    assert secret not in json.dumps(others)
    assert secret not in json.dumps(stack.json.get("Outputs", {}))
    for handler in HANDLERS:
        variables = stack.function(handler)[1]["Environment"]["Variables"]
        assert variables["SCHEDULER_SIGNATURE_V1"] == "false"
        assert "SCHEDULER_SIGNING_SECRET_ARN" not in variables


def test_with_signature_v1_on_the_worker_signs_with_it(synth) -> None:
    stack = synth({"signature_v1": True})
    variables = stack.function("worker")[1]["Environment"]["Variables"]
    assert variables["SCHEDULER_SIGNATURE_V1"] == "true"
    assert variables["SCHEDULER_SIGNING_SECRET_ARN"] == {"Ref": stack.logical_id(stack.punctual.signing.secret)}


@pytest.mark.parametrize("handler", HANDLERS)
def test_no_function_holds_table_actions_it_does_not_use(default, handler: str) -> None:
    for statement in default.statements(handler):
        assert not set(_as_list(statement["Action"])) & UNUSED, statement


def test_the_worker_cannot_write_the_jobs_definitions(default) -> None:
    actions = default.actions_on("worker", default.punctual.storage.jobs_table)
    granted_without_condition = {
        action
        for statement in default.statements("worker")
        if default.logical_id(default.punctual.storage.jobs_table) in json.dumps(statement["Resource"])
        and "Condition" not in statement
        for action in _as_list(statement["Action"])
    }
    assert actions >= READ and not granted_without_condition & WRITE


def test_no_target_grants_without_configuration(default) -> None:
    own_bus = default.logical_id(default.punctual.completion.bus)
    own_key = default.logical_id(default.punctual.sealing.key)
    for handler in HANDLERS:
        for statement in default.statements(handler):
            actions = set(_as_list(statement["Action"]))
            if actions == {"events:PutEvents"} and statement["Resource"] == {"Fn::GetAtt": [own_bus, "Arn"]}:
                continue  # the stack's own completion-event bus (test_infra_events), not a target
            if statement["Resource"] == {"Fn::GetAtt": [own_key, "Arn"]}:
                continue  # the stack's own header sealing key (test_infra_sealing), not a target's
            own_function = {"Fn::GetAtt": [default.function(handler)[0], "Arn"]}
            if handler == "sweeper" and actions == {"lambda:InvokeFunction"} and statement["Resource"] == own_function:
                continue  # the sweeper's fan-out: it invokes itself (test_infra_functions), not a target
            # sqs:SendMessage is granted on the stack's own queues; anything else is a target grant.
            if actions & TARGET_ACTIONS - {"sqs:SendMessage"} or actions & {"kms:GenerateDataKey", "kms:Decrypt"}:
                pytest.fail(f"{handler} has a target grant without configuration: {statement}")
            if "sqs:SendMessage" in actions:
                assert "Fn::GetAtt" in json.dumps(statement["Resource"]), statement


def test_open_grants_are_granted_to_the_target_role_exactly(configured, targets) -> None:
    role = configured.punctual.worker.target_role
    assert role is not None
    role_id = configured.logical_id(role)
    granted: dict[str, set[str]] = {}
    for policy in configured.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                for resource in _as_list(statement["Resource"]):
                    granted.setdefault(resource, set()).update(_as_list(statement["Action"]))

    assert granted == {
        targets["target_sqs_queue_arns"][0]: {"sqs:SendMessage"},
        targets["target_sns_topic_arns"][0]: {"sns:Publish"},
        targets["target_lambda_function_arns"][0]: {"lambda:InvokeFunction"},
        targets["target_state_machine_arns"][0]: {"states:StartExecution"},
        targets["target_event_bus_arns"][0]: {"events:PutEvents"},
        targets["target_kms_key_arns"][0]: {"kms:GenerateDataKey", "kms:Decrypt"},
    }
    # Only the worker's role may assume it, only with a tenant's session tag, and the worker reads its ARN.
    trust = configured.resources("AWS::IAM::Role")[role_id]["Properties"]["AssumeRolePolicyDocument"]["Statement"]
    worker_role = configured.function("worker")[1]["Role"]["Fn::GetAtt"][0]
    assert [s["Principal"] for s in trust] == [{"AWS": {"Fn::GetAtt": [worker_role, "Arn"]}}]
    assert set(_as_list(trust[0]["Action"])) == {"sts:AssumeRole", "sts:TagSession"}
    assert trust[0]["Condition"] == {"Null": {f"aws:RequestTag/{TENANT_TAG}": "false"}}
    assert configured.function("worker")[1]["Environment"]["Variables"]["SCHEDULER_TARGET_ROLE_ARN"] == {
        "Fn::GetAtt": [role_id, "Arn"]
    }


def test_the_worker_itself_holds_no_target_grant_only_the_assume_role(configured, targets) -> None:
    # The confused deputy: the role that can write the scheduler's queues is never the one calling targets.
    literal = {
        resource
        for statement in configured.statements("worker")
        for resource in _as_list(statement["Resource"])
        if isinstance(resource, str)
    }
    assert literal == set()
    assume = [s for s in configured.statements("worker") if "sts:AssumeRole" in _as_list(s["Action"])]
    assert [s["Resource"] for s in assume] == [
        {"Fn::GetAtt": [configured.logical_id(configured.punctual.worker.target_role), "Arn"]}
    ]


def test_the_target_role_exists_without_targets_and_grants_nothing(default) -> None:
    # Without a role the worker would call AWS targets with its own credentials; with it, there is nothing to lend.
    role = default.punctual.worker.target_role
    role_id = default.logical_id(role)
    for handler in ("worker", "api"):
        assert default.function(handler)[1]["Environment"]["Variables"]["SCHEDULER_TARGET_ROLE_ARN"] == {
            "Fn::GetAtt": [role_id, "Arn"]
        }
    assert _role_grants(default, role) == []


def _role_grants(synthesized: Any, role: Any) -> list[dict[str, Any]]:
    role_id = synthesized.logical_id(role)
    return [
        statement
        for policy in synthesized.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_closed_grants_name_the_tenant_each_is_for(isolated) -> None:
    grants = _role_grants(isolated, isolated.punctual.worker.target_role)
    by_tenant: dict[str, set[str]] = {}
    for statement in grants:
        resources = set(_as_list(statement["Resource"]))
        if set(_as_list(statement["Action"])) == {"kms:GenerateDataKey", "kms:Decrypt"}:
            continue  # a key grants nothing on its own
        tag = statement["Condition"]["StringEquals"][f"aws:PrincipalTag/{TENANT_TAG}"]
        by_tenant.setdefault(tag, set()).update(resources)
    queue = "arn:aws:sqs:eu-central-1:123456789012:{}"
    assert by_tenant == {
        tenant_tag(TENANT_A): {queue.format("orders"), TARGETS["target_event_bus_arns"][0]},
        tenant_tag(TENANT_B): {queue.format("invoices"), *TARGETS["target_lambda_function_arns"]},
    }
    bus = next(s for s in grants if "events:PutEvents" in _as_list(s["Action"]))
    assert bus["Condition"]["StringLike"] == {"events:source": ["com.a.*"]}
    # The worker may tag its sessions with the tenant tag and nothing else.
    tag_session = [s for s in isolated.statements("worker") if "sts:TagSession" in _as_list(s["Action"])]
    assert [s["Condition"] for s in tag_session] == [{"ForAllValues:StringEquals": {"aws:TagKeys": [TENANT_TAG]}}]


@pytest.mark.parametrize("handler", ["api", "sweeper"])
def test_targets_are_never_granted_to_api_or_sweeper(configured, handler: str) -> None:
    literal = {
        resource
        for statement in configured.statements(handler)
        for resource in _as_list(statement["Resource"])
        if isinstance(resource, str) and not set(_as_list(statement["Action"])) <= ON_EVERY_RESOURCE
    }
    assert literal == set()
