"""The public API: REST API Gateway, IAM (SigV4) auth, proxy integration to the api function."""

from __future__ import annotations

import json

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from punctual_cdk.config import PunctualConfig
from punctual_cdk.lambda_function import Entry, FunctionBuild, SchedulerFunction, data_removal_policy, log_retention
from punctual_cdk.queues import Queues
from punctual_cdk.storage import Storage, acknowledge_index_grants, grant_table
from scheduler.schema import FUNCTION_MEMORY_MB

HANDLER = "scheduler.handlers.api.lambda_handler"
#: Below API Gateway's 29 s integration timeout, so a stuck request ends in the function (and its logs)
#: rather than as an anonymous 504 while the function runs on.
TIMEOUT = Duration.seconds(25)
MEMORY_MB = FUNCTION_MEMORY_MB["api"]
API = Entry("Api", HANDLER, "the v1 REST API", TIMEOUT, MEMORY_MB)
API_VERSION_PATH = "v1"
HEALTH_PATH = "health"
#: The web console's files, beside /v1 (scheduler.handlers.console_files).
CONSOLE_PATH = "console"
#: The execution log level: errors only. Request/response bodies are never logged (data tracing off):
#: job payloads belong to tenants.
EXECUTION_LOG_LEVEL = apigw.MethodLoggingLevel.ERROR
#: Access log line: who called (the IAM principal is the tenant), what, and how it ended. Only
#: context variables that cannot contain a quote, so each line stays valid JSON.
ACCESS_LOG_FIELDS = {
    "requestId": "$context.requestId",
    "extendedRequestId": "$context.extendedRequestId",
    "requestTime": "$context.requestTime",
    "sourceIp": "$context.identity.sourceIp",
    "caller": "$context.identity.caller",
    "userArn": "$context.identity.userArn",
    "httpMethod": "$context.httpMethod",
    "resourcePath": "$context.resourcePath",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationStatus": "$context.integration.status",
    "integrationLatency": "$context.integration.latency",
    "errorType": "$context.error.responseType",
}


class SchedulerApi(Construct):
    """`GET /v1/health` and the console's files (`GET /console/...`) without auth; everything else under `/v1/`
    (`ANY /v1/{proxy+}`) with IAM auth.
    The api function routes (Powertools resolver); API Gateway only authenticates, throttles and logs.

    Grants: read/write the jobs table, read/write the executions table (run history, and settling a RECONCILING
    run through the API), send to the ready queue
    (the late lane for occurrences whose bucket is already sealed), read its secrets (the message key, to sign
    the dispatches it sends; the v2 root keys, to hand tenants their jobs' keys) - never the v1 master secret; for
    the operator's view, the queues' attributes and CloudWatch's GetMetricData.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, build: FunctionBuild, tables: Storage, queues: Queues
    ) -> None:
        super().__init__(scope, construct_id)
        config = build.config
        self.handler = SchedulerFunction(
            self, API, build, reserved_concurrent_executions=config.api_reserved_concurrency or None
        )
        self.function = self.handler.function
        self.access_logs = logs.LogGroup(
            self, "AccessLogs", retention=log_retention(config), removal_policy=data_removal_policy(config)
        )
        self.rest_api = _build_rest_api(self, config, self.access_logs)
        _add_routes(self.rest_api, self.function)

        grant_table(self.function, tables.jobs_table, write=True)
        grant_table(self.function, tables.executions_table, write=True)
        # Triggers and near-term occurrences go out from the API, to their job's lane.
        for queue in queues.lanes.values():
            queue.grant_send_messages(self.function)
        acknowledge_index_grants(self.handler.role, tables.jobs_table, tables.executions_table)
        _grant_operator_view(self.handler, queues)


#: The one action the api function may perform on every resource: CloudWatch's GetMetricData has no resource-level
#: permissions (it takes only `*`).
GET_METRIC_DATA = "cloudwatch:GetMetricData"


def _grant_operator_view(handler: SchedulerFunction, queues: Queues) -> None:
    """What `GET /v1/operator/status` reads (scheduler.handlers.api_operator): the depths of the lanes' ready
    queues and of the dead-letter queue, and the metrics (the jobs table's watermark is among the table grants)."""
    for queue in (*queues.lanes.values(), queues.dead_letter_queue):
        queue.grant(handler.function, "sqs:GetQueueAttributes")
    handler.function.add_to_role_policy(iam.PolicyStatement(actions=[GET_METRIC_DATA], resources=["*"]))
    Validations.of(handler.role).acknowledge(
        Acknowledgment(
            id="AwsSolutions-IAM5[Resource::*]",
            reason=(
                "cloudwatch:GetMetricData supports no resource-level permissions, so it is granted on `*`, alone in "
                "its statement: the operator's view (GET /v1/operator/status, operators only) reads the "
                "application metrics and the ready queues' oldest-message ages with it; it reads no data of a tenant."
            ),
        )
    )


def _build_rest_api(scope: Construct, config: PunctualConfig, access_logs: logs.ILogGroup) -> apigw.RestApi:
    rest_api = apigw.RestApi(
        scope,
        "RestApi",
        rest_api_name=f"punctual-{config.stage}",
        description=f"punctual {config.stage}: job scheduler API (v1)",
        # Regional: clients sign for the region, and there is no CloudFront hop in the latency budget.
        endpoint_types=[apigw.EndpointType.REGIONAL],
        fail_on_warnings=True,
        # API Gateway writes logs through one role per account and region. Keep it on stack deletion:
        # other APIs in the account may be logging through the same setting.
        cloud_watch_role=config.api_cloudwatch_role,
        cloud_watch_role_removal_policy=RemovalPolicy.RETAIN if config.api_cloudwatch_role else None,
        deploy_options=apigw.StageOptions(
            stage_name=config.stage,
            throttling_rate_limit=config.api_throttle_rate_limit,
            throttling_burst_limit=config.api_throttle_burst_limit,
            access_log_destination=apigw.LogGroupLogDestination(access_logs),
            access_log_format=apigw.AccessLogFormat.custom(json.dumps(ACCESS_LOG_FIELDS)),
            logging_level=EXECUTION_LOG_LEVEL,
            data_trace_enabled=False,
            metrics_enabled=True,
            method_options=_console_throttle(config),
        ),
    )
    # RestApi exports its URL under a generated output name; the stack exports it as `ApiUrl` instead.
    rest_api.node.try_remove_child("Endpoint")
    Validations.of(rest_api).acknowledge(
        Acknowledgment(
            id="AwsSolutions-APIG2",
            reason=(
                "Requests are validated by the api function (pydantic), which answers RFC 9457 problem "
                "details naming the offending fields (400/413/422); an API Gateway model validator would "
                "answer a different error shape first and duplicate the schema."
            ),
        ),
        Acknowledgment(
            id="AwsSolutions-APIG3",
            reason=(
                "No WAF web ACL: every route but the health check and the console's static files (GET /console/...) "
                "requires SigV4, so other anonymous traffic is rejected by API Gateway before any integration runs. "
                "Anonymous GETs of the health check and the console do reach the api function; the console's methods "
                "have a throttle of their own, well within the stage's (console_throttle_*), so they cannot take the "
                "function from signed callers, and the stage is throttled. Attach a web ACL per deployment if the "
                "account's policy requires one."
            ),
        ),
    )
    if config.api_cloudwatch_role:
        Validations.of(rest_api).acknowledge(
            Acknowledgment(
                id=(
                    "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                    "AmazonAPIGatewayPushToCloudWatchLogs]"
                ),
                reason=(
                    "The account-level API Gateway logging role uses the AWS managed policy made for it; "
                    "API Gateway writes to log groups it names at run time, so no narrower resource exists."
                ),
            )
        )
    return rest_api


def _console_throttle(config: PunctualConfig) -> dict[str, apigw.MethodDeploymentOptions]:
    """The console's methods (unauthenticated: anyone may call them) throttled on their own, within the stage's
    throttle; with the stage's other method settings, since an override replaces them for its method."""
    options = apigw.MethodDeploymentOptions(
        throttling_rate_limit=config.console_throttle_rate_limit,
        throttling_burst_limit=config.console_throttle_burst_limit,
        logging_level=EXECUTION_LOG_LEVEL,
        data_trace_enabled=False,
        metrics_enabled=True,
    )
    return {f"/{CONSOLE_PATH}/GET": options, f"/{CONSOLE_PATH}/{{proxy+}}/GET": options}


def _add_routes(rest_api: apigw.RestApi, function: lambda_.IFunction) -> None:
    # No test-invoke permission: the console's test button is not worth a second principal on the function.
    integration = apigw.LambdaIntegration(function, proxy=True, allow_test_invoke=False)
    version = rest_api.root.add_resource(API_VERSION_PATH)

    health = version.add_resource(HEALTH_PATH).add_method(
        "GET", integration, authorization_type=apigw.AuthorizationType.NONE
    )
    Validations.of(health).acknowledge(
        Acknowledgment(
            id="AwsSolutions-APIG4",
            reason="GET /v1/health is the liveness probe and is public by design (docs/design.md §4).",
        ),
        Acknowledgment(
            id="AwsSolutions-COG4",
            reason="GET /v1/health is the liveness probe and is public by design (docs/design.md §4).",
        ),
    )

    # The web console's static files (docs/console.md): public like the health check (they hold no data; every API
    # call the console makes is signed with the user's own credentials), GET only, served by the same function.
    console = rest_api.root.add_resource(CONSOLE_PATH)
    public = (
        "The web console's static files are public by design: they hold no data, and every API call the console "
        "makes is signed (SigV4) with the user's own credentials (docs/console.md)."
    )
    for resource in (console, console.add_resource("{proxy+}")):
        method = resource.add_method("GET", integration, authorization_type=apigw.AuthorizationType.NONE)
        acknowledged = [Acknowledgment(id=rule, reason=public) for rule in ("AwsSolutions-APIG4", "AwsSolutions-COG4")]
        Validations.of(method).acknowledge(*acknowledged)

    # A greedy resource keeps routing in one place (the function's resolver); API Gateway's job here
    # is to reject unsigned requests before they cost an invocation.
    everything = version.add_resource("{proxy+}").add_method(
        "ANY", integration, authorization_type=apigw.AuthorizationType.IAM
    )
    Validations.of(everything).acknowledge(
        Acknowledgment(
            id="AwsSolutions-COG4",
            reason=(
                "Authenticated with IAM (SigV4) instead of a Cognito user pool: the tenant is the calling "
                "IAM principal, as the design specifies; callers are services, not end users."
            ),
        )
    )
