"""The sweeper: every minute, claims due buckets and hands their occurrences to the ready queue."""

from __future__ import annotations

from dataclasses import replace

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from punctual_cdk.lambda_function import Entry, FunctionBuild, SchedulerFunction
from punctual_cdk.queues import Queues
from punctual_cdk.storage import Storage, acknowledge_index_grants, grant_table
from scheduler.schema import FUNCTION_MEMORY_MB

HANDLER = "scheduler.handlers.sweeper.lambda_handler"
#: A tick's work must fit before the next tick; the handler stops starting buckets
#: `sweep_safety_seconds` before this deadline, and an unfinished bucket is re-claimed after its lease.
TIMEOUT = Duration.seconds(60)
MEMORY_MB = FUNCTION_MEMORY_MB["sweeper"]
SWEEPER = Entry("Sweeper", HANDLER, "dispatches due occurrences to the ready queue", TIMEOUT, MEMORY_MB)
#: The sweep period. Timing precision does not depend on it: the sweeper looks ahead and sets per-message
#: DelaySeconds. It bounds how late a crashed sweep is noticed and re-run.
SCHEDULE = events.Schedule.rate(Duration.minutes(1))
#: A tick older than this is superseded by the next one; dropping it beats a backlog of stale ticks
#: piling up behind the reserved concurrency. (60 s is the smallest value Lambda and EventBridge accept.)
TICK_MAX_AGE = Duration.seconds(60)


class Sweeper(Construct):
    """The sweeper function on an EventBridge schedule, with bounded (reserved) concurrency.

    Grants: read/write the jobs table (timers, buckets, watermark, job advance), send to the ready queue.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, build: FunctionBuild, tables: Storage, queues: Queues
    ) -> None:
        super().__init__(scope, construct_id)
        self.handler = SchedulerFunction(
            self,
            replace(SWEEPER, memory_mb=build.config.sweeper_memory_mb),
            build,
            # Several sweepers may run at once (claims keep them disjoint), but not unboundedly many:
            # a slow DynamoDB minute must not fan out into a thundering herd of sweeps.
            reserved_concurrent_executions=build.config.sweeper_reserved_concurrency or None,
            # A failed tick is not retried: the next tick, a minute later, re-runs every unfinished bucket.
            retry_attempts=0,
            max_event_age=TICK_MAX_AGE,
        )
        self.function = self.handler.function
        self.schedule = _build_schedule(self, self.function)
        grant_table(self.function, tables.jobs_table, write=True)
        for queue in queues.lanes.values():
            queue.grant_send_messages(self.function)
        acknowledge_index_grants(self.handler.role, tables.jobs_table)


def _build_schedule(scope: Construct, function: lambda_.IFunction) -> events.Rule:
    return events.Rule(
        scope,
        "Schedule",
        description="punctual sweeper tick",
        schedule=SCHEDULE,
        targets=[targets.LambdaFunction(function, retry_attempts=2, max_event_age=TICK_MAX_AGE)],
    )
