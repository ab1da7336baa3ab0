"""The application metrics: what the handlers emit as CloudWatch EMF metrics (Powertools) in namespace `Punctual`
with the dimension `service=punctual`, as the alarms and the dashboard read them."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch

from scheduler.schema import METRICS_NAMESPACE, SERVICE_NAME

#: The application metrics (EMF, emitted by the handlers).
DISPATCH_LAG = "DispatchLagSeconds"
OCCURRENCES_DISPATCHED = "OccurrencesDispatched"
START_LATENESS = "StartLatenessSeconds"
RETRIES = "Retries"
DEAD_LETTERS = "DeadLetters"
FENCED_WRITES = "FencedWrites"
LEASE_LOST = "LeaseLost"
#: A worker paused past a heartbeat's interval between its claim and the target call renewed its lease first.
LEASE_RENEWED_BEFORE_CALL = "LeaseRenewedBeforeCall"
BATCH_HOLD_FAILURES = "BatchHoldFailures"
OCCURRENCES_SKIPPED = "OccurrencesSkipped"
MISFIRE_SKIPPED = "MisfireSkipped"
TARGET_FAILURES = "TargetFailures"
OUTBOX_BACKLOG = "OutboxBacklog"
COMPLETION_EVENTS_PUBLISHED = "CompletionEventsPublished"
COMPLETION_EVENT_FAILURES = "CompletionEventFailures"
TENANT_THROTTLED = "TenantThrottledSeconds"
TENANT_DEFERRED = "TenantDeferred"
TENANT_CONCURRENCY_THROTTLED = "TenantConcurrencyThrottled"
TENANT_CONCURRENCY_DELAY = "TenantConcurrencyDelaySeconds"
BACKFILL_DISPATCHED = "BackfillDispatched"
#: Pre-scaling (docs/capacity.md): the busiest minute the sweeper's forecast sees ahead, the pollers it asks for,
#: and its changes.
FORECAST_DUE = "ForecastDueOccurrences"
PRESCALE_POLLERS = "PrescaleMinimumPollers"
PRESCALE_CHANGES = "PrescalePollerChanges"
#: Landing on time (docs/cost.md): what the sweeper waited so its messages land just before their fire time, and
#: the messages it could not send inside their window (a page bigger than a second of requests).
SEND_ALIGNMENT = "SendAlignmentSeconds"
SENDS_OFF_WINDOW = "SendsOffWindow"
#: Keep-alive to http targets (docs/targets.md): calls that opened a connection, and pooled connections the server
#: had closed while idle (replaced, the call made again).
TARGET_CONNECTIONS_OPENED = "TargetConnectionsOpened"
TARGET_CONNECTIONS_STALE = "TargetConnectionsStale"
#: The fan-out (scheduler.core.capacity.fan_out): the sweeps a tick runs, and the ones it could not start.
SWEEP_FAN_OUT = "SweepFanOut"
SWEEP_FAN_OUT_FAILURES = "SweepFanOutFailures"
APPLICATION_METRICS = (
    DISPATCH_LAG,
    SWEEP_FAN_OUT,
    SWEEP_FAN_OUT_FAILURES,
    OCCURRENCES_DISPATCHED,
    START_LATENESS,
    RETRIES,
    DEAD_LETTERS,
    FENCED_WRITES,
    LEASE_LOST,
    LEASE_RENEWED_BEFORE_CALL,
    BATCH_HOLD_FAILURES,
    OCCURRENCES_SKIPPED,
    MISFIRE_SKIPPED,
    TARGET_FAILURES,
    OUTBOX_BACKLOG,
    COMPLETION_EVENTS_PUBLISHED,
    COMPLETION_EVENT_FAILURES,
    TENANT_THROTTLED,
    TENANT_DEFERRED,
    TENANT_CONCURRENCY_THROTTLED,
    TENANT_CONCURRENCY_DELAY,
    BACKFILL_DISPATCHED,
    FORECAST_DUE,
    PRESCALE_POLLERS,
    PRESCALE_CHANGES,
    SEND_ALIGNMENT,
    SENDS_OFF_WINDOW,
    TARGET_CONNECTIONS_OPENED,
    TARGET_CONNECTIONS_STALE,
)

PERIOD = Duration.minutes(1)


def application_metric(name: str, statistic: str, period: Duration = PERIOD) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE_NAME},
        statistic=statistic,
        period=period,
    )
