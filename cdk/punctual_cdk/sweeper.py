"""The sweeper: every minute, claims due buckets and hands their occurrences to the ready queue; a tick that sees more
due than one sweep dispatches starts more sweeps of the same function beside itself (the fan-out)."""

from __future__ import annotations

from dataclasses import replace

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
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
            # Several sweepers run at once (a tick's fan-out; claims keep them disjoint), but not unboundedly many:
            # the config checks it holds two ticks' fan-out (PunctualConfig.sweeper_reserved_concurrency).
            reserved_concurrent_executions=build.config.sweeper_reserved_concurrency or None,
            # A failed tick or fan-out sweep is not retried: the next tick, a minute later, re-runs every
            # unfinished bucket. A fan-out sweep Lambda could not start within a minute is dropped
            # (AsyncEventsDropped, alarmed in punctual_cdk.monitoring).
            retry_attempts=0,
            max_event_age=TICK_MAX_AGE,
        )
        self.function = self.handler.function
        self.schedule = _build_schedule(self, self.function)
        self.fan_out_policy = _grant_fan_out(self, self.function)
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


def _grant_fan_out(scope: Construct, function: lambda_.Function) -> iam.Policy:
    """The sweeper may invoke itself (a tick's fan-out sweeps). A policy of its own rather than the role's default
    one, which the function depends on: the default policy naming the function would be a dependency cycle."""
    assert function.role is not None
    return iam.Policy(
        scope,
        "FanOutPolicy",
        statements=[iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[function.function_arn])],
        roles=[function.role],
    )
