"""The three functions: pinned runtime, handlers, environment, the worker's event source, the sweeper's
schedule and concurrency."""

from __future__ import annotations

import json

import pytest

from punctual_cdk.environment import MESSAGE_SECRET_ARN_VARIABLE, SIGNING_KEYS_ARN_VARIABLE, SIGNING_SECRET_ARN_VARIABLE
from scheduler.schema import FUNCTION_MEMORY_MB, READY_QUEUE
from scheduler.settings import Settings

HANDLERS = ("api", "sweeper", "worker")
COMMON_VARIABLES = {
    "SCHEDULER_JOBS_TABLE",
    "SCHEDULER_EXECUTIONS_TABLE",
    "SCHEDULER_READY_QUEUE_URL",
    "SCHEDULER_DLQ_URL",
    "SCHEDULER_ALLOW_PRIVATE_TARGETS",
    "SCHEDULER_SERVICE_NAME",
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "POWERTOOLS_LOG_LEVEL",
}


def _variables(synthesized, handler: str) -> dict:
    _, props = synthesized.function(handler)
    return props["Environment"]["Variables"]


def test_there_are_exactly_the_three_functions(default) -> None:
    handlers = {props["Properties"]["Handler"] for props in default.resources("AWS::Lambda::Function").values()}
    assert handlers == {f"scheduler.handlers.{name}.lambda_handler" for name in HANDLERS}


@pytest.mark.parametrize("handler", HANDLERS)
def test_runtime_and_architecture_are_pinned(default, handler: str) -> None:
    _, props = default.function(handler)
    assert props["Runtime"] == "python3.12"
    assert props["Architectures"] == ["arm64"]


@pytest.mark.parametrize("handler", HANDLERS)
def test_every_function_gets_the_scheduler_environment(default, handler: str) -> None:
    variables = _variables(default, handler)

    assert set(variables) >= COMMON_VARIABLES
    assert variables["SCHEDULER_JOBS_TABLE"] == {"Ref": default.logical_id(default.punctual.storage.jobs_table)}
    assert variables["SCHEDULER_EXECUTIONS_TABLE"] == {
        "Ref": default.logical_id(default.punctual.storage.executions_table)
    }
    assert variables["SCHEDULER_READY_QUEUE_URL"] == {"Ref": default.logical_id(default.punctual.queues.ready_queue)}
    assert variables["SCHEDULER_DLQ_URL"] == {"Ref": default.logical_id(default.punctual.queues.dead_letter_queue)}
    # Unset tuning settings are left to the functions' own defaults (declared once, in Settings).
    assert not {"SCHEDULER_SHARD_COUNT", "SCHEDULER_LOOKAHEAD_SECONDS", "SCHEDULER_LEASE_SECONDS"} & set(variables)
    assert variables["SCHEDULER_ALLOW_PRIVATE_TARGETS"] == "false"
    assert variables["POWERTOOLS_SERVICE_NAME"] == "punctual"
    assert variables["POWERTOOLS_METRICS_NAMESPACE"] == "Punctual"


@pytest.mark.parametrize("handler", HANDLERS)
def test_scheduler_variables_are_ones_the_handlers_read(default, handler: str) -> None:
    # A misspelt variable would be ignored by Settings (extra="ignore") and the default would apply.
    known = {f"SCHEDULER_{field.upper()}" for field in Settings.model_fields}
    scheduler_variables = {name for name in _variables(default, handler) if name.startswith("SCHEDULER_")}
    assert scheduler_variables <= known


@pytest.mark.parametrize("handler", HANDLERS)
def test_configuration_reaches_the_environment(configured, handler: str) -> None:
    variables = _variables(configured, handler)

    assert variables["SCHEDULER_SHARD_COUNT"] == "16"
    assert variables["SCHEDULER_LOOKAHEAD_SECONDS"] == "600"
    assert variables["SCHEDULER_LEASE_SECONDS"] == "90"
    assert variables["SCHEDULER_BUCKET_LEASE_SECONDS"] == "180"


def test_unset_optional_tunables_leave_the_handler_defaults(default) -> None:
    assert "SCHEDULER_BUCKET_LEASE_SECONDS" not in _variables(default, "sweeper")


@pytest.mark.parametrize(
    "v1, variable, secret, readers",
    [
        (False, SIGNING_SECRET_ARN_VARIABLE, "secret", set()),  # v1 off (the default): nobody gets its ARN
        (True, SIGNING_SECRET_ARN_VARIABLE, "secret", {"worker"}),  # v1: the api never reads the master secret
        (False, SIGNING_KEYS_ARN_VARIABLE, "keys", {"worker", "api"}),
        (False, MESSAGE_SECRET_ARN_VARIABLE, "messages", {"worker", "api", "sweeper"}),
    ],
)
def test_each_secret_arn_goes_to_its_readers_only(
    synth, v1: bool, variable: str, secret: str, readers: set[str]
) -> None:
    stack = synth({"signature_v1": v1})
    ref = {"Ref": stack.logical_id(getattr(stack.punctual.signing, secret))}
    for handler in HANDLERS:
        variables = _variables(stack, handler)
        assert (variables.get(variable) == ref) == (handler in readers), handler
        for name in ("SCHEDULER_SIGNING_SECRET", "SCHEDULER_SIGNING_KEYS", "SCHEDULER_MESSAGE_SECRET"):
            assert name not in variables  # never the value itself


@pytest.mark.parametrize("handler", HANDLERS)
def test_functions_run_outside_local_mode_and_know_their_stack(default, handler: str) -> None:
    variables = _variables(default, handler)
    assert variables["SCHEDULER_LOCAL_MODE"] == "false"
    assert variables["SCHEDULER_STACK_NAME"] == {"Ref": "AWS::StackName"}


def test_worker_timeout_is_the_schema_worker_timeout(default) -> None:
    _, props = default.function("worker")
    assert props["Timeout"] == READY_QUEUE.worker_timeout_seconds


def _mappings_by_lane(synthesized) -> dict[str, dict]:
    """The worker's event source mappings, by the priority lane of the queue each consumes."""
    by_arn = {
        json.dumps({"Fn::GetAtt": [synthesized.logical_id(queue), "Arn"]}): priority
        for priority, queue in synthesized.punctual.queues.lanes.items()
    }
    return {
        by_arn[json.dumps(m["Properties"]["EventSourceArn"])]: m["Properties"]
        for m in synthesized.resources("AWS::Lambda::EventSourceMapping").values()
    }


def test_worker_consumes_every_lane_with_partial_batch_responses(default) -> None:
    worker_id, _ = default.function("worker")

    mappings = _mappings_by_lane(default)

    assert set(mappings) == {"high", "normal", "low"}
    for props in mappings.values():
        assert props["FunctionName"] == {"Ref": worker_id}
        assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert props["BatchSize"] == 10
        assert "MaximumBatchingWindowInSeconds" not in props  # a window would delay starts
    # Each lane has capacity of its own: a backlog in one never takes another's
    assert {lane: props["ScalingConfig"] for lane, props in mappings.items()} == {
        "high": {"MaximumConcurrency": 20},
        "normal": {"MaximumConcurrency": 50},
        "low": {"MaximumConcurrency": 5},
    }
    assert mappings["normal"]["EventSourceArn"] == {
        "Fn::GetAtt": [default.logical_id(default.punctual.queues.ready_queue), "Arn"]
    }


def test_worker_batch_size_and_concurrency_are_configurable(configured, synth) -> None:
    mappings = _mappings_by_lane(configured)
    assert {props["BatchSize"] for props in mappings.values()} == {2}
    assert mappings["normal"]["ScalingConfig"] == {"MaximumConcurrency": 200}
    lanes = _mappings_by_lane(synth({"worker_max_concurrency_high": 100, "worker_max_concurrency_low": 3}))
    assert lanes["high"]["ScalingConfig"] == {"MaximumConcurrency": 100}
    assert lanes["low"]["ScalingConfig"] == {"MaximumConcurrency": 3}


def test_sweeper_runs_every_minute(default) -> None:
    sweeper_id, _ = default.function("sweeper")
    rules = default.resources("AWS::Events::Rule")

    assert len(rules) == 1
    (rule,) = rules.values()
    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    assert [target["Arn"] for target in rule["Properties"]["Targets"]] == [{"Fn::GetAtt": [sweeper_id, "Arn"]}]
    default.template.has_resource_properties(
        "AWS::Lambda::Permission",
        {"FunctionName": {"Fn::GetAtt": [sweeper_id, "Arn"]}, "Principal": "events.amazonaws.com"},
    )


def test_sweeper_concurrency_is_bounded_and_stale_ticks_are_dropped(default) -> None:
    sweeper_id, props = default.function("sweeper")

    # two ticks' fan-out: a tick and its sweeps, and the next tick's while they finish (fan_out_max_sweeps 8)
    assert props["ReservedConcurrentExecutions"] == 16
    default.template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {"FunctionName": {"Ref": sweeper_id}, "MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": 60},
    )


def test_functions_deploy_at_the_schema_memory_and_the_sweepers_and_workers_can_be_raised(default, configured) -> None:
    # 512 MB each by default (what the benchmark prices); a deployment expecting large herds gives the sweeper
    # and the worker a whole vCPU (1,769 MB): one sweep's buckets share its CPU, and a worker's CPU is half its time
    for handler in HANDLERS:
        _, props = default.function(handler)
        assert props["MemorySize"] == FUNCTION_MEMORY_MB[handler] == 512
    for handler in ("sweeper", "worker"):
        assert configured.function(handler)[1]["MemorySize"] == 1769
    assert configured.function("api")[1]["MemorySize"] == 512


def test_sweeper_reservation_can_be_turned_off(configured) -> None:
    _, props = configured.function("sweeper")
    assert "ReservedConcurrentExecutions" not in props


def test_the_api_reserves_a_bounded_concurrency_and_the_worker_none(default, synth) -> None:
    # The api's is its ceiling too: however many requests (a bulk action holds one for about 20 s), the API cannot
    # take the account's concurrency from the workers
    _, api = default.function("api")
    assert api["ReservedConcurrentExecutions"] == 50
    _, unreserved = synth({"api_reserved_concurrency": 0}).function("api")
    assert "ReservedConcurrentExecutions" not in unreserved
    _, raised = synth({"api_reserved_concurrency": 120}).function("api")
    assert raised["ReservedConcurrentExecutions"] == 120
    # Reserved concurrency on the worker below the mapping's maximum would throttle batches into the DLQ.
    _, worker = default.function("worker")
    assert "ReservedConcurrentExecutions" not in worker


@pytest.mark.parametrize("handler", HANDLERS)
def test_each_function_logs_to_its_own_retained_log_group(default, configured, handler: str) -> None:
    _, props = default.function(handler)
    log_group_id = props["LoggingConfig"]["LogGroup"]["Ref"]
    log_group = default.json["Resources"][log_group_id]

    assert log_group["Properties"]["RetentionInDays"] == 30
    assert log_group["DeletionPolicy"] == "Retain"
    _, props = configured.function(handler)
    assert (
        configured.json["Resources"][props["LoggingConfig"]["LogGroup"]["Ref"]]["Properties"]["RetentionInDays"] == 90
    )


def test_the_sweeper_may_invoke_itself_and_nothing_else_in_a_policy_it_does_not_depend_on(default) -> None:
    sweeper_id, _ = default.function("sweeper")
    role = default.json["Resources"][sweeper_id]["Properties"]["Role"]["Fn::GetAtt"][0]
    invokes = [
        (policy_id, statement)
        for policy_id, policy in default.resources("AWS::IAM::Policy").items()
        if {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "lambda:InvokeFunction" in str(statement["Action"])
    ]
    [(policy_id, statement)] = invokes
    assert statement["Resource"] == {"Fn::GetAtt": [sweeper_id, "Arn"]}
    # the function does not wait for this policy (the default one it depends on would be a cycle)
    assert policy_id not in default.json["Resources"][sweeper_id].get("DependsOn", [])
