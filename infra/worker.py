"""The worker: consumes the ready queue, runs each occurrence against its target through the ledger."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import PunctualConfig
from infra.lambda_function import Entry, FunctionBuild, SchedulerFunction
from infra.prescale import provisioned_pollers
from infra.queues import Queues
from infra.storage import Storage, acknowledge_index_grants, grant_table
from scheduler.schema import FUNCTION_MEMORY_MB, READY_QUEUE

HANDLER = "scheduler.handlers.worker.lambda_handler"
#: The worker reads the target role's ARN from here (scheduler.settings.Settings.target_role_arn).
TARGET_ROLE_VARIABLE = "SCHEDULER_TARGET_ROLE_ARN"
#: The ready queue's visibility timeout is 6x this (scheduler.schema), so the two cannot disagree.
TIMEOUT = Duration.seconds(READY_QUEUE.worker_timeout_seconds)
MEMORY_MB = FUNCTION_MEMORY_MB["worker"]
WORKER = Entry("Worker", HANDLER, "runs occurrences from the ready queue", TIMEOUT, MEMORY_MB)

#: Actions per kind of target, granted only on the ARNs listed in the configuration.
TARGET_ACTIONS: dict[str, tuple[str, ...]] = {
    "target_sqs_queue_arns": ("sqs:SendMessage",),
    "target_sns_topic_arns": ("sns:Publish",),
    "target_lambda_function_arns": ("lambda:InvokeFunction",),
    # The occurrence key is the execution name: a duplicate start is rejected by Step Functions itself.
    "target_state_machine_arns": ("states:StartExecution",),
    "target_event_bus_arns": ("events:PutEvents",),
    # What SQS and SNS require of a sender to a queue/topic encrypted with a customer-managed key.
    "target_kms_key_arns": ("kms:GenerateDataKey", "kms:Decrypt"),
}


class Worker(Construct):
    """The worker function behind an SQS event source mapping with partial batch responses.

    Grants: read/write the executions table (the ledger), read the jobs table and write only its tenants' items
    (`TENANT#...`: the execution slots), consume the ready queues (receive, delete, change visibility) and send
    to them (a throttled occurrence goes back as a new message), send to the DLQ, read its three secrets, and
    and assume the target role (which holds exactly the
    targets listed in the configuration, and nothing of the scheduler's own).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, build: FunctionBuild, tables: Storage, queues: Queues
    ) -> None:
        super().__init__(scope, construct_id)
        config = build.config
        self.handler = SchedulerFunction(
            self,
            WORKER,
            build,
            # No reserved concurrency: below the mapping's maximum concurrency it would throttle batches,
            # and every throttled receive counts towards the DLQ's maxReceiveCount.
        )
        self.function = self.handler.function
        # One event source mapping per priority lane, each with its own maximum concurrency: the capacity
        # reserved for `high` is there however long the `low` lane's backlog is.
        self.event_sources = {
            priority: _build_event_source(queue, config, config.lane_max_concurrency(priority))
            for priority, queue in queues.lanes.items()
        }
        self.event_source = self.event_sources["normal"]
        for source in self.event_sources.values():
            self.function.add_event_source(source)

        grant_table(self.function, tables.executions_table, write=True)
        grant_table(self.function, tables.jobs_table, write=False)
        _grant_tenant_slots(self.function, tables.jobs_table)
        for queue in queues.lanes.values():
            queue.grant_consume_messages(self.function)
            queue.grant_send_messages(self.function)
        queues.dead_letter_queue.grant_send_messages(self.function)
        #: The role non-http targets are called with: only the target grants, assumed by the worker. The worker's
        #: own role (which may write the scheduler's queues, tables and bus) is never lent to a tenant's target.
        self.target_role = _build_target_role(self, config, self.handler.role)
        if self.target_role is not None:
            self.function.add_environment(TARGET_ROLE_VARIABLE, self.target_role.role_arn)
        acknowledge_index_grants(self.handler.role, tables.jobs_table, tables.executions_table)


def _grant_tenant_slots(function: lambda_.Function, jobs_table: dynamodb.Table) -> None:
    """Per-tenant execution slots (scheduler.core.concurrency) are items of the jobs table under `TENANT#...`:
    the worker may write those and nothing else there (not a job, not a timer)."""
    function.add_to_role_policy(
        iam.PolicyStatement(
            actions=["dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"],
            resources=[jobs_table.table_arn],
            conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["TENANT#*"]}},
        )
    )


def _build_event_source(
    ready_queue: sqs.IQueue, config: PunctualConfig, max_concurrency: int
) -> event_sources.SqsEventSource:
    return event_sources.SqsEventSource(
        ready_queue,
        batch_size=config.worker_batch_size,
        # One failed occurrence must not send its whole batch back: the handler reports failures per item.
        report_batch_item_failures=True,
        # Provisioned mode (pre-scaling) and a maximum concurrency are mutually exclusive on AWS.
        max_concurrency=None if config.prescale else max_concurrency,
        provisioned_poller_config=provisioned_pollers(config),
        # No batching window: it would hold messages back and cost start precision.
    )


def _build_target_role(scope: Construct, config: PunctualConfig, worker_role: iam.IRole) -> iam.Role | None:
    """A role holding exactly the configured target grants, which only the worker's role may assume; None when no
    target is configured (the worker then has no target grant at all)."""
    grants = [(list(actions), list(getattr(config, field))) for field, actions in TARGET_ACTIONS.items()]
    if not any(arns for _, arns in grants):
        return None
    role = iam.Role(
        scope,
        "TargetRole",
        assumed_by=iam.ArnPrincipal(worker_role.role_arn),
        description=f"punctual {config.stage}: calls tenants' non-http targets (the target grants only)",
        max_session_duration=Duration.hours(1),
    )
    for actions, arns in grants:
        if arns:
            role.add_to_policy(iam.PolicyStatement(actions=actions, resources=arns))
    role.grant_assume_role(worker_role)
    return role
