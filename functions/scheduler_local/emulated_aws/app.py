"""The CDK app for a local emulator: the real app (`infra.app.build_app`) with the stack adjustments of
`scheduler_local.emulated_aws.adjustments` applied, nothing else.

`cdk deploy --app ".venv/bin/python -m scheduler_local.emulated_aws.app"` (scheduler_local.emulated_aws.deploy
runs it so).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Stack
from aws_cdk import aws_cloudwatch as cloudwatch

from infra.app import build_app
from infra.stack import PunctualStack
from punctual_cdk.bundling import function_code
from punctual_cdk.lambda_function import SchedulerFunction
from punctual_cdk.scheduled_job import JobsProvider
from scheduler_local.emulated_aws.adjustments import (
    ALLOW_PRIVATE_TARGETS,
    JOBS_API_URL_VARIABLE,
    LOCAL_JOBS_API,
    PLAIN_ALARMS,
    PRIVATE_TARGETS,
)


def host_pip_platform() -> str:
    return f"manylinux2014_{platform.machine()}"


def adjusted_app(context: Mapping[str, Any] | None = None) -> tuple[App, PunctualStack]:
    """The real app and stack with the stack adjustments applied."""
    app, stack = build_app(context, code=function_code(pip_platform=host_pip_platform()))
    adjust(stack)
    return app, stack


def adjust(stack: Stack) -> None:
    """The stack adjustments of ADJUSTMENTS, on any stack the `Punctual` construct is in; and, where the stack has
    `ScheduledJob`s, those of JOBS_ADJUSTMENTS."""
    plain_error_alarms(stack)
    allow_private_targets(stack)
    if any(isinstance(node, JobsProvider) for node in stack.node.find_all()):
        jobs_api_on_the_emulator(stack)


def jobs_api_on_the_emulator(stack: Stack) -> None:
    """The jobs-as-code provider calls the API where the emulator serves it, path-style on its own address (the
    synth runs with the emulator's AWS_ENDPOINT_URL)."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL", "").rstrip("/")
    if not endpoint.startswith("http://127.0.0.1:"):
        raise RuntimeError(f"{LOCAL_JOBS_API.name}: synthesize with the emulator's AWS_ENDPOINT_URL (got {endpoint!r})")
    for provider in [node for node in stack.node.find_all() if isinstance(node, JobsProvider)]:
        api = provider.scheduler.rest_api
        url = f"{endpoint}/_aws/execute-api/{api.rest_api_id}/{api.deployment_stage.stage_name}/"
        provider.function.add_environment(JOBS_API_URL_VARIABLE, url)


def metric_math_alarms(stack: Stack) -> list[cloudwatch.CfnAlarm]:
    return [
        node
        for node in stack.node.find_all()
        if isinstance(node, cloudwatch.CfnAlarm) and stack.resolve(node.metrics) is not None
    ]


def plain_error_alarms(stack: Stack) -> None:
    """Each metric-math alarm becomes one on the metric its expression calls `errors`."""
    alarms = metric_math_alarms(stack)
    if not alarms:
        raise RuntimeError(f"{PLAIN_ALARMS.name}: the stack has no metric-math alarm any more; drop the adjustment")
    for alarm in alarms:
        # (L1 properties resolve with jsii's camelCase names; overrides take CloudFormation's.)
        queries = stack.resolve(alarm.metrics)
        errors = next(query for query in queries if query["id"] == "errors")["metricStat"]
        alarm.add_property_deletion_override("Metrics")
        alarm.add_property_override("Namespace", errors["metric"]["namespace"])
        alarm.add_property_override("MetricName", errors["metric"]["metricName"])
        alarm.add_property_override(
            "Dimensions", [{"Name": d["name"], "Value": d["value"]} for d in errors["metric"]["dimensions"]]
        )
        alarm.add_property_override("Statistic", errors["stat"])
        alarm.add_property_override("Period", errors["period"])
        # Any error at all, instead of a rate of the invocations.
        alarm.add_property_override("Threshold", 0)


def allow_private_targets(stack: Stack) -> None:
    functions = [node.function for node in stack.node.find_all() if isinstance(node, SchedulerFunction)]
    if not functions:
        raise RuntimeError(f"{PRIVATE_TARGETS.name}: the stack has no scheduler function any more")
    for function in functions:
        # Replaces the stack's explicit "false".
        function.add_environment(ALLOW_PRIVATE_TARGETS, "true")


def main() -> None:
    app, _ = adjusted_app()
    app.synth()


if __name__ == "__main__":
    main()
