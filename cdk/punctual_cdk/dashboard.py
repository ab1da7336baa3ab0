"""The CloudWatch dashboard of a stage: one page with the alarms, the application metrics (`punctual_cdk.metrics`), the
queues, the functions and the API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Aws, Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from punctual_cdk.config import PunctualConfig
from punctual_cdk.metrics import (
    BACKFILL_DISPATCHED,
    BATCH_HOLD_FAILURES,
    COMPLETION_EVENT_FAILURES,
    COMPLETION_EVENTS_PUBLISHED,
    DEAD_LETTERS,
    DISPATCH_LAG,
    FENCED_WRITES,
    FORECAST_DUE,
    LEASE_LOST,
    LEASE_RENEWED_BEFORE_CALL,
    MISFIRE_SKIPPED,
    OCCURRENCES_DISPATCHED,
    OCCURRENCES_SKIPPED,
    OUTBOX_BACKLOG,
    PERIOD,
    PRESCALE_CHANGES,
    PRESCALE_POLLERS,
    RETRIES,
    SEND_ALIGNMENT,
    SENDS_OFF_WINDOW,
    START_LATENESS,
    SWEEP_FAN_OUT,
    SWEEP_FAN_OUT_FAILURES,
    TARGET_CONNECTIONS_OPENED,
    TARGET_CONNECTIONS_STALE,
    TARGET_FAILURES,
    TENANT_CONCURRENCY_DELAY,
    TENANT_CONCURRENCY_THROTTLED,
    TENANT_DEFERRED,
    TENANT_THROTTLED,
    application_metric,
)


def build_dashboard(
    scope: Construct,
    config: PunctualConfig,
    alarms: Sequence[cloudwatch.IAlarm],
    ready_queue: sqs.IQueue,
    dead_letter_queue: sqs.IQueue,
    functions: Mapping[str, lambda_.IFunction],
    rest_api: apigw.RestApi,
    lanes: Mapping[str, sqs.IQueue],
) -> cloudwatch.Dashboard:
    """The stage's dashboard: the alarms' states, the application metrics, the queues (and each priority lane's),
    the functions and the API."""

    def graph(title: str, metrics: Sequence[cloudwatch.IMetric], width: int = 8) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(title=title, left=list(metrics), width=width, height=6)

    def app_sum(name: str) -> cloudwatch.Metric:
        return application_metric(name, "Sum")

    dashboard = cloudwatch.Dashboard(
        scope,
        "Dashboard",
        # Dashboards are global to the account: the region keeps two regions' stages apart.
        dashboard_name=f"punctual-{config.stage}-{Aws.REGION}",
        default_interval=Duration.hours(3),
    )
    dashboard.add_widgets(cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(alarms), width=24, height=3))
    dashboard.add_widgets(
        graph("Dispatch lag (s, max)", [application_metric(DISPATCH_LAG, "Maximum")]),
        graph("Occurrences dispatched", [app_sum(OCCURRENCES_DISPATCHED)]),
        graph(
            "Start lateness (s)",
            [application_metric(START_LATENESS, stat) for stat in ("p50", "p99", "Maximum")],
        ),
    )
    dashboard.add_widgets(
        graph(
            "Retries, target failures, dead letters",
            [app_sum(RETRIES), app_sum(TARGET_FAILURES), app_sum(DEAD_LETTERS)],
        ),
        graph(
            "Fencing: fenced writes, leases lost, renewed before the call, batch holds failed",
            [
                app_sum(FENCED_WRITES),
                app_sum(LEASE_LOST),
                app_sum(LEASE_RENEWED_BEFORE_CALL),
                app_sum(BATCH_HOLD_FAILURES),
            ],
        ),
        graph("Skipped: by policy, misfires", [app_sum(OCCURRENCES_SKIPPED), app_sum(MISFIRE_SKIPPED)]),
    )
    dashboard.add_widgets(
        graph(
            "Completion events: published, failed, outbox backlog",
            [
                app_sum(COMPLETION_EVENTS_PUBLISHED),
                app_sum(COMPLETION_EVENT_FAILURES),
                application_metric(OUTBOX_BACKLOG, "Maximum"),
            ],
        ),
        graph(
            "Fairness: tenant delay by budget (s, max), deferred",
            [
                application_metric(TENANT_THROTTLED, "Maximum"),
                app_sum(TENANT_DEFERRED),
            ],
        ),
        graph(
            "Fairness: tenants at their concurrency (throttled, delay s max)",
            [app_sum(TENANT_CONCURRENCY_THROTTLED), application_metric(TENANT_CONCURRENCY_DELAY, "Maximum")],
        ),
        graph("Backfill: occurrences dispatched", [app_sum(BACKFILL_DISPATCHED)]),
        graph(
            "Landing on time: sweeper wait (s), sends off their window",
            [app_sum(SEND_ALIGNMENT), app_sum(SENDS_OFF_WINDOW)],
        ),
        graph(
            "HTTP targets: connections opened, stale ones replaced (against OccurrencesDispatched)",
            [app_sum(TARGET_CONNECTIONS_OPENED), app_sum(TARGET_CONNECTIONS_STALE)],
        ),
    )
    dashboard.add_widgets(
        graph("Forecast: due in the busiest minute ahead (max)", [application_metric(FORECAST_DUE, "Maximum")], 8),
        graph(
            "Pre-scaling: minimum pollers asked for (max), changes",
            [application_metric(PRESCALE_POLLERS, "Maximum"), app_sum(PRESCALE_CHANGES)],
            8,
        ),
        graph(
            "Fan-out: sweeps a tick ran (max), sweeps it could not start",
            [application_metric(SWEEP_FAN_OUT, "Maximum"), app_sum(SWEEP_FAN_OUT_FAILURES)],
            8,
        ),
    )
    dashboard.add_widgets(
        graph(
            "Ready queue depth",
            [
                ready_queue.metric_approximate_number_of_messages_visible(period=PERIOD),
                ready_queue.metric_approximate_number_of_messages_not_visible(period=PERIOD),
                ready_queue.metric("ApproximateNumberOfMessagesDelayed", period=PERIOD, statistic="Maximum"),
            ],
        ),
        graph(
            "Ready queue oldest message (s)",
            [ready_queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum")],
        ),
        graph("DLQ messages", [dead_letter_queue.metric_approximate_number_of_messages_visible(period=PERIOD)]),
    )
    dashboard.add_widgets(
        # SQS fair queues (the tenant is each message's group): how many tenants SQS treats as noisy neighbours,
        # and how long the others' oldest message has waited.
        graph(
            "Fair queue: noisy tenants, oldest quiet message (s)",
            [
                ready_queue.metric("ApproximateNumberOfNoisyGroups", period=PERIOD, statistic="Maximum"),
                ready_queue.metric("ApproximateAgeOfOldestMessageInQuietGroups", period=PERIOD, statistic="Maximum"),
            ],
            24,
        ),
    )
    dashboard.add_widgets(
        graph("Lambda invocations", [fn.metric_invocations(label=name) for name, fn in functions.items()]),
        graph(
            "Lambda errors and throttles",
            [fn.metric_errors(label=f"{name} errors") for name, fn in functions.items()]
            + [fn.metric_throttles(label=f"{name} throttles") for name, fn in functions.items()],
        ),
        graph(
            "Lambda duration p99 (ms)",
            [fn.metric_duration(label=name, statistic="p99") for name, fn in functions.items()],
        ),
    )
    dashboard.add_widgets(
        graph(
            "API requests",
            [rest_api.metric_count(), rest_api.metric_client_error(), rest_api.metric_server_error()],
            12,
        ),
        graph("API latency (ms)", [rest_api.metric_latency(statistic=stat) for stat in ("p50", "p99")], 12),
    )
    if lanes:
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Priority lanes: oldest message (s)",
                left=[
                    queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum", label=priority)
                    for priority, queue in lanes.items()
                ],
                width=12,
                height=6,
            ),
            cloudwatch.GraphWidget(
                title="Priority lanes: visible messages",
                left=[
                    queue.metric_approximate_number_of_messages_visible(period=PERIOD, label=priority)
                    for priority, queue in lanes.items()
                ],
                width=12,
                height=6,
            ),
        )
    return dashboard
