"""This repository's stack: the `Punctual` construct alone, and the outputs that tests and scripts look up."""

from __future__ import annotations

from typing import Any

from aws_cdk import Aws, CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from punctual_cdk import Punctual, PunctualConfig

#: The construct's id in this stack. CDK leaves an id `Default` out of the logical ids of what it holds, so the
#: resources keep the logical ids they had when the stack composed them itself: an existing deployment updates in
#: place, and its tables are not replaced.
CONSTRUCT_ID = "Default"


class PunctualStack(Stack):
    """The scheduler (punctual_cdk.Punctual) in a stack of its own, `punctual-<stage>`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        code: lambda_.Code | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            scope,
            construct_id,
            description=f"punctual ({config.stage}): serverless job scheduler with exactly-once effects",
            **kwargs,
        )
        self.punctual = punctual = Punctual(self, CONSTRUCT_ID, config=config, code=code)
        outputs = {
            "ApiUrl": (punctual.api_url, "Base URL of the API stage (ends with /); sign requests for execute-api"),
            "HealthUrl": (punctual.health_url, "Unauthenticated liveness endpoint"),
            "Region": (Aws.REGION, "Region to sign API requests for"),
            "JobsTableName": (punctual.jobs_table.table_name, "DynamoDB table: jobs, timers, buckets"),
            "ExecutionsTableName": (punctual.executions_table.table_name, "DynamoDB table: execution ledger"),
            "ReadyQueueUrl": (punctual.ready_queue.queue_url, "SQS ready queue (the normal priority lane)"),
            "ReadyQueueHighUrl": (punctual.ready_queues["high"].queue_url, "SQS ready queue of the high priority lane"),
            "ReadyQueueLowUrl": (punctual.ready_queues["low"].queue_url, "SQS ready queue of the low priority lane"),
            "DeadLetterQueueUrl": (punctual.dead_letter_queue.queue_url, "SQS dead-letter queue"),
            "AlarmTopicArn": (punctual.monitoring.topic.topic_arn, "SNS topic the alarms notify"),
            "SigningKeysSecretArn": (
                punctual.signing.keys.secret_arn,
                "Secrets Manager secret: signature v2 root keys",
            ),
            "MessageSecretArn": (
                punctual.signing.messages.secret_arn,
                "Secrets Manager secret: dispatch message HMAC key",
            ),
            "DashboardName": (punctual.monitoring.dashboard.dashboard_name, "CloudWatch dashboard"),
            "EventBusName": (punctual.event_bus.event_bus_name, "EventBridge bus of the completion events"),
            "EventBusArn": (punctual.event_bus.event_bus_arn, "EventBridge bus of the completion events (ARN)"),
            "ApiFunctionName": (punctual.api.function.function_name, "Lambda: api"),
            "SweeperFunctionName": (punctual.sweeper.function.function_name, "Lambda: sweeper"),
            "WorkerFunctionName": (punctual.worker.function.function_name, "Lambda: worker"),
        }
        if config.signature_v1:
            outputs["SigningSecretArn"] = (
                punctual.signing.secret.secret_arn,
                "Secrets Manager secret: signature v1 master key",
            )
        for key, (value, description) in outputs.items():
            CfnOutput(self, key, value=value, description=description)
