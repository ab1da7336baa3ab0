"""The punctual stack: composes one construct per concern and exports what tests and scripts look up."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Aws, CfnOutput, Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.aws_secretsmanager import ISecret
from constructs import Construct

from infra.api import API_VERSION_PATH, HEALTH_PATH, SchedulerApi
from infra.bundling import function_code
from infra.config import PunctualConfig
from infra.environment import (
    MESSAGE_SECRET_ARN_VARIABLE,
    SIGNING_KEYS_ARN_VARIABLE,
    SIGNING_SECRET_ARN_VARIABLE,
    scheduler_environment,
)
from infra.events import CompletionEvents
from infra.lambda_function import FunctionBuild
from infra.monitoring import Monitoring
from infra.prescale import grant_prescaling
from infra.queues import Queues
from infra.sealing import HeaderSealingKey
from infra.secrets import SigningSecret
from infra.storage import Storage
from infra.sweeper import Sweeper
from infra.worker import TARGET_ROLE_VARIABLE, Worker


class PunctualStack(Stack):
    """Tables, queues, the signing secret, the three functions, the API, and monitoring."""

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
        code = code or function_code()
        storage = Storage(self, "Storage", config=config)
        queues = Queues(self, "Queues")
        signing = SigningSecret(self, "Signing", config=config)
        completion = CompletionEvents(self, "CompletionEvents", config=config)
        sealing = HeaderSealingKey(self, "HeaderSealing", config=config)
        environment = scheduler_environment(
            config,
            jobs_table_name=storage.jobs_table.table_name,
            executions_table_name=storage.executions_table.table_name,
            ready_queue_url=queues.ready_queue.queue_url,
            dlq_url=queues.dead_letter_queue.queue_url,
            event_bus_name=completion.bus.event_bus_name,
            ready_queue_high_url=queues.lanes["high"].queue_url,
            ready_queue_low_url=queues.lanes["low"].queue_url,
        )
        # Each function gets the ARNs of (and read access to) only the secrets it uses (infra/secrets.py).
        messages = {MESSAGE_SECRET_ARN_VARIABLE: signing.messages}
        keys = {SIGNING_KEYS_ARN_VARIABLE: signing.keys}
        # Signature v1's master secret: granted to the worker (and its ARN passed) only while v1 is on.
        v1 = {SIGNING_SECRET_ARN_VARIABLE: signing.secret} if config.signature_v1 else {}

        def build(secrets: Mapping[str, ISecret]) -> FunctionBuild:
            return FunctionBuild(config, code, environment, secrets)

        sweeper = Sweeper(self, "Sweeper", build=build(messages), tables=storage, queues=queues)
        worker = Worker(self, "Worker", build=build({**messages, **keys, **v1}), tables=storage, queues=queues)
        grant_prescaling(sweeper.function, worker.event_sources, config)
        if config.completion_events:
            # The worker publishes right after recording an outcome; the sweeper drains what is left.
            completion.grant_publish(worker.function)
            completion.grant_publish(sweeper.function)
            completion.grant_drain(sweeper.function, storage.executions_table)
        api = SchedulerApi(self, "Api", build=build({**messages, **keys}), tables=storage, queues=queues)
        # The api refuses AWS targets at submit when there is no target role to call them with.
        api.function.add_environment(TARGET_ROLE_VARIABLE, worker.target_role.role_arn)
        # Secret header values: the api seals them, the worker opens them to send them (infra/sealing.py).
        sealing.grant_seal(api.function)
        sealing.grant_open(worker.function)
        if config.completion_events:
            # The api publishes the outcome an operator records (resolving a RECONCILING run) at once.
            completion.grant_publish(api.function)
        monitoring = Monitoring(
            self,
            "Monitoring",
            config=config,
            ready_queue=queues.ready_queue,
            lanes=queues.lanes,
            dead_letter_queue=queues.dead_letter_queue,
            functions={"api": api.function, "sweeper": sweeper.function, "worker": worker.function},
            rest_api=api.rest_api,
        )

        self.storage, self.queues, self.signing, self.completion = storage, queues, signing, completion
        self.sealing = sealing
        self.sweeper, self.worker, self.api, self.monitoring = sweeper, worker, api, monitoring

        outputs = {
            "ApiUrl": (api.rest_api.url, "Base URL of the API stage (ends with /); sign requests for execute-api"),
            "HealthUrl": (
                f"{api.rest_api.url}{API_VERSION_PATH}/{HEALTH_PATH}",
                "Unauthenticated liveness endpoint",
            ),
            "Region": (Aws.REGION, "Region to sign API requests for"),
            "JobsTableName": (storage.jobs_table.table_name, "DynamoDB table: jobs, timers, buckets"),
            "ExecutionsTableName": (storage.executions_table.table_name, "DynamoDB table: execution ledger"),
            "ReadyQueueUrl": (queues.ready_queue.queue_url, "SQS ready queue (the normal priority lane)"),
            "ReadyQueueHighUrl": (queues.lanes["high"].queue_url, "SQS ready queue of the high priority lane"),
            "ReadyQueueLowUrl": (queues.lanes["low"].queue_url, "SQS ready queue of the low priority lane"),
            "DeadLetterQueueUrl": (queues.dead_letter_queue.queue_url, "SQS dead-letter queue"),
            "AlarmTopicArn": (monitoring.topic.topic_arn, "SNS topic the alarms notify"),
            "SigningKeysSecretArn": (signing.keys.secret_arn, "Secrets Manager secret: signature v2 root keys"),
            "MessageSecretArn": (signing.messages.secret_arn, "Secrets Manager secret: dispatch message HMAC key"),
            "DashboardName": (monitoring.dashboard.dashboard_name, "CloudWatch dashboard"),
            "EventBusName": (completion.bus.event_bus_name, "EventBridge bus of the completion events"),
            "EventBusArn": (completion.bus.event_bus_arn, "EventBridge bus of the completion events (ARN)"),
            "ApiFunctionName": (api.function.function_name, "Lambda: api"),
            "SweeperFunctionName": (sweeper.function.function_name, "Lambda: sweeper"),
            "WorkerFunctionName": (worker.function.function_name, "Lambda: worker"),
        }
        if config.signature_v1:
            outputs["SigningSecretArn"] = (signing.secret.secret_arn, "Secrets Manager secret: signature v1 master key")
        for key, (value, description) in outputs.items():
            CfnOutput(self, key, value=value, description=description)
