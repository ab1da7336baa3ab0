"""Alarms (to an SNS topic, optionally e-mailed) and a CloudWatch dashboard (`punctual_cdk.dashboard`).

The handlers emit CloudWatch EMF metrics (Powertools, `punctual_cdk.metrics`) in namespace `Punctual` with the dimension
`service=punctual`; the queue, Lambda and API Gateway metrics come from AWS.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from punctual_cdk.config import PunctualConfig
from punctual_cdk.dashboard import build_dashboard
from punctual_cdk.metrics import (
    DISPATCH_LAG,
    FENCED_WRITES,
    OUTBOX_BACKLOG,
    PERIOD,
    SWEEP_FAN_OUT_FAILURES,
    application_metric,
)

#: The sweep watermark may trail by a minute or two in normal operation; three minutes running above
#: this means buckets are not being finished.
DISPATCH_LAG_THRESHOLD_SECONDS = 120
DISPATCH_LAG_PERIODS = 3
#: The longest legitimate wait in the ready queue is SQS's maximum DelaySeconds (900 s); beyond that plus
#: slack, messages are waiting for a worker (or sitting out a long retry backoff).
OLDEST_MESSAGE_THRESHOLD_SECONDS = 900 + 300
OLDEST_MESSAGE_PERIODS = 3
#: Workers publish each outcome right after recording it, so the sweeper's drain normally finds nothing; finding
#: some sweep after sweep for this long means completion events are not getting out.
OUTBOX_BACKLOG_PERIODS = 5
ERROR_RATE_PERIOD = Duration.minutes(5)
ERROR_RATE_THRESHOLD_PERCENT = 1
ERROR_RATE_PERIODS = 3
ERROR_RATE_DATAPOINTS = 2


class Monitoring(Construct):
    """The alarm topic (KMS-encrypted, TLS-only), the alarms, and the dashboard."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: PunctualConfig,
        ready_queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        functions: Mapping[str, lambda_.IFunction],
        rest_api: apigw.RestApi,
        lanes: Mapping[str, sqs.IQueue] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.topic = _build_alarm_topic(self, config)
        self.alarms = _build_alarms(self, config, ready_queue, dead_letter_queue, functions)
        for priority, queue in (lanes or {}).items():
            if queue is not ready_queue:
                self.alarms.append(_lane_backlog_alarm(self, config, priority, queue))
        action = cloudwatch_actions.SnsAction(self.topic)
        for alarm in self.alarms:
            alarm.add_alarm_action(action)
            alarm.add_ok_action(action)
        self.dashboard = build_dashboard(
            self, config, self.alarms, ready_queue, dead_letter_queue, functions, rest_api, lanes or {}
        )


def _build_alarm_topic(scope: Construct, config: PunctualConfig) -> sns.Topic:
    # CloudWatch cannot publish to a topic encrypted with the AWS-managed SNS key (its key policy cannot
    # name cloudwatch.amazonaws.com), so the topic gets a key of its own that CloudWatch may use.
    key = kms.Key(
        scope,
        "AlarmTopicKey",
        description=f"punctual {config.stage}: encrypts the alarm topic",
        enable_key_rotation=True,
        # Holds no data at rest beyond messages in flight: nothing to keep after the stack is gone.
        removal_policy=RemovalPolicy.DESTROY,
        pending_window=Duration.days(7),
    )
    cloudwatch_principal = iam.ServicePrincipal("cloudwatch.amazonaws.com")
    key.grant(cloudwatch_principal, "kms:Decrypt", "kms:GenerateDataKey*")
    topic = sns.Topic(
        scope,
        "AlarmTopic",
        display_name=f"punctual {config.stage} alarms",
        master_key=key,
        enforce_ssl=True,
    )
    # enforce_ssl gives the topic a policy of its own, which replaces SNS's default policy: allow this
    # account's alarms to publish, explicitly and only them.
    topic.add_to_resource_policy(
        iam.PolicyStatement(
            sid="AllowThisAccountsAlarms",
            principals=[cloudwatch_principal],
            actions=["sns:Publish"],
            resources=[topic.topic_arn],
            conditions={
                "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                "ArnLike": {"aws:SourceArn": f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:*"},
            },
        )
    )
    if config.alarm_email:
        topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))
    return topic


def _build_alarms(
    scope: Construct,
    config: PunctualConfig,
    ready_queue: sqs.IQueue,
    dead_letter_queue: sqs.IQueue,
    functions: Mapping[str, lambda_.IFunction],
) -> list[cloudwatch.Alarm]:
    prefix = f"punctual-{config.stage}"
    alarms = [
        _alarm(
            scope,
            "DeadLetterQueueNotEmpty",
            f"{prefix}-dlq-not-empty",
            "Occurrences were dead-lettered (retries exhausted, permanent failure, or too many "
            "receives). Inspect the DLQ; each message carries its attempt history.",
            dead_letter_queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
        ),
        _alarm(
            scope,
            "DispatchLag",
            f"{prefix}-dispatch-lag",
            f"The sweep watermark trails the clock by more than {DISPATCH_LAG_THRESHOLD_SECONDS} s: "
            "due occurrences are not being dispatched. Also fires when the sweeper reports nothing.",
            application_metric(DISPATCH_LAG, "Maximum"),
            threshold=DISPATCH_LAG_THRESHOLD_SECONDS,
            periods=DISPATCH_LAG_PERIODS,
            # Silence is the worst case (the sweeper is not running at all), not the good one.
            missing=cloudwatch.TreatMissingData.BREACHING,
        ),
        _alarm(
            scope,
            "ReadyQueueOldestMessage",
            f"{prefix}-ready-queue-backlog",
            f"A ready message is older than {OLDEST_MESSAGE_THRESHOLD_SECONDS} s (SQS's 900 s delay cap "
            "plus slack): workers are not keeping up, or an occurrence sits in a long retry backoff.",
            ready_queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
            threshold=OLDEST_MESSAGE_THRESHOLD_SECONDS,
            periods=OLDEST_MESSAGE_PERIODS,
        ),
        _alarm(
            scope,
            "OutboxBacklog",
            f"{prefix}-outbox-backlog",
            f"Completion events have waited in the outbox for {OUTBOX_BACKLOG_PERIODS} minutes: the event bus "
            "refuses them (permissions, throttling) or the sweeper cannot publish. Outcomes are recorded; "
            "their events go out once the bus accepts them.",
            application_metric(OUTBOX_BACKLOG, "Minimum"),
            periods=OUTBOX_BACKLOG_PERIODS,
        ),
        _alarm(
            scope,
            "FencedWrites",
            f"{prefix}-fenced-writes",
            "Informational: a stale worker's write was rejected by its fencing token. The ledger did "
            "its job; frequent occurrences mean leases are too short for the targets' run times.",
            application_metric(FENCED_WRITES, "Sum", Duration.minutes(5)),
        ),
    ]
    for name, function in functions.items():
        alarms.append(_error_rate_alarm(scope, prefix, name, function))
    alarms += _fan_out_alarms(scope, prefix, functions.get("sweeper"))
    return alarms


def _fan_out_alarms(scope: Construct, prefix: str, sweeper: lambda_.IFunction | None) -> list[cloudwatch.Alarm]:
    """A tick that could not start its fan-out sweeps, and started ones Lambda dropped: either leaves a herd's
    minute to fewer sweeps than it needs (the dispatch-lag alarm says when that made it late)."""
    alarms = [
        _alarm(
            scope,
            "SweepFanOutFailures",
            f"{prefix}-sweep-fan-out-failures",
            "A sweeper tick could not start the sweeps it needed beside itself (Lambda refused the asynchronous "
            "invoke: throttled, or the sweeper's role lacks lambda:InvokeFunction on itself), or could not read or "
            "write the fan-out record in the jobs table. The sweeps that ran and the next tick take the work; a "
            "herd may start late.",
            application_metric(SWEEP_FAN_OUT_FAILURES, "Sum", Duration.minutes(5)),
        )
    ]
    if sweeper is not None:
        alarms.append(
            _alarm(
                scope,
                "SweepFanOutDropped",
                f"{prefix}-sweep-fan-out-dropped",
                "Lambda dropped sweeper invocations it could not start within a minute (AsyncEventsDropped): the "
                "sweeper's reserved concurrency is below what its ticks and their fan-out take.",
                sweeper.metric("AsyncEventsDropped", period=Duration.minutes(5), statistic="Sum"),
            )
        )
    return alarms


def _lane_backlog_alarm(scope: Construct, config: PunctualConfig, priority: str, queue: sqs.IQueue) -> cloudwatch.Alarm:
    return _alarm(
        scope,
        f"Ready{priority.capitalize()}OldestMessage",
        f"punctual-{config.stage}-ready-{priority}-backlog",
        f"A message of the {priority} priority lane is older than {OLDEST_MESSAGE_THRESHOLD_SECONDS} s: its "
        "workers do not keep up (raise that lane's worker_max_concurrency_*) or an occurrence sits in a long "
        "retry backoff.",
        queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
        threshold=OLDEST_MESSAGE_THRESHOLD_SECONDS,
        periods=OLDEST_MESSAGE_PERIODS,
    )


def _alarm(
    scope: Construct,
    construct_id: str,
    name: str,
    description: str,
    metric: cloudwatch.IMetric,
    *,
    threshold: float = 0,
    periods: int = 1,
    missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
) -> cloudwatch.Alarm:
    """An alarm when `metric` is above `threshold` for `periods` periods in a row."""
    return cloudwatch.Alarm(
        scope,
        construct_id,
        alarm_name=name,
        alarm_description=description,
        metric=metric,
        threshold=threshold,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=periods,
        datapoints_to_alarm=periods if periods > 1 else None,
        treat_missing_data=missing,
    )


def _error_rate_alarm(scope: Construct, prefix: str, name: str, function: lambda_.IFunction) -> cloudwatch.Alarm:
    # A rate, not a count: the API's volume varies by orders of magnitude, the sweeper's does not.
    # Unhandled errors only: the worker's per-item failures are partial batch responses, not errors.
    error_rate = cloudwatch.MathExpression(
        expression="IF(invocations > 0, 100 * errors / invocations, 0)",
        using_metrics={
            "errors": function.metric_errors(period=ERROR_RATE_PERIOD, statistic="Sum"),
            "invocations": function.metric_invocations(period=ERROR_RATE_PERIOD, statistic="Sum"),
        },
        label=f"{name} error rate (%)",
        period=ERROR_RATE_PERIOD,
    )
    return cloudwatch.Alarm(
        scope,
        f"{name.capitalize()}ErrorRate",
        alarm_name=f"{prefix}-{name}-errors",
        alarm_description=(
            f"The {name} function fails (unhandled errors) in more than {ERROR_RATE_THRESHOLD_PERCENT}% of "
            "invocations. See its log group."
        ),
        metric=error_rate,
        threshold=ERROR_RATE_THRESHOLD_PERCENT,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=ERROR_RATE_PERIODS,
        datapoints_to_alarm=ERROR_RATE_DATAPOINTS,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
