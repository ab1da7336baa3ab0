"""The worker: consumes the ready queue, runs each occurrence against its target through the ledger."""

from __future__ import annotations

from dataclasses import replace

from aws_cdk import Duration
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from punctual_cdk.config import ALLOW_LIST_GRANTS, PunctualConfig
from punctual_cdk.lambda_function import Entry, FunctionBuild, SchedulerFunction
from punctual_cdk.prescale import provisioned_pollers
from punctual_cdk.queues import Queues
from punctual_cdk.storage import Storage, acknowledge_index_grants, grant_table
from scheduler.schema import FUNCTION_MEMORY_MB, READY_QUEUE
from scheduler.settings import TenantTargets
from scheduler.targets.resources import TENANT_TAG, tenant_tag

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
    and assume the target role with a tenant's session tag (the role holds exactly the targets listed in the
    configuration, each for the tenants allowed it, and nothing of the scheduler's own).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, build: FunctionBuild, tables: Storage, queues: Queues
    ) -> None:
        super().__init__(scope, construct_id)
        config = build.config
        self.handler = SchedulerFunction(
            self,
            replace(WORKER, memory_mb=config.worker_memory_mb),
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
        self.function.add_environment(TARGET_ROLE_VARIABLE, self.target_role.role_arn)
        acknowledge_index_grants(self.handler.role, tables.jobs_table, tables.executions_table)


def _grant_tenant_slots(function: lambda_.Function, jobs_table: dynamodb.Table) -> None:
    """Per-tenant execution slots (scheduler.core.tenancy.concurrency) are items of the jobs table under `TENANT#...`:
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


def _build_target_role(scope: Construct, config: PunctualConfig, worker_role: iam.IRole) -> iam.Role:
    """The role AWS targets are called with, always created: only the worker's role may assume it, and only with
    the tenant's session tag (`scheduler.targets.resources.TENANT_TAG`). Each tenant's grants are conditioned on its
    own tag, so a session of one tenant cannot reach another tenant's targets; when the operator opens the grants
    to every tenant (`default_targets_open`), they are granted without that condition."""
    tag_key = f"aws:PrincipalTag/{TENANT_TAG}"
    role = iam.Role(
        scope,
        "TargetRole",
        assumed_by=iam.ArnPrincipal(worker_role.role_arn)
        .with_conditions({"Null": {f"aws:RequestTag/{TENANT_TAG}": "false"}})
        .with_session_tags(),
        description=f"punctual {config.stage}: calls tenants' AWS targets (each tenant's grants under its session tag)",
        max_session_duration=Duration.hours(1),
    )
    if config.default_targets_open:
        for field, actions in TARGET_ACTIONS.items():
            if arns := list(getattr(config, field)):
                role.add_to_policy(iam.PolicyStatement(actions=list(actions), resources=arns))
    else:
        if kms := list(config.target_kms_key_arns):
            role.add_to_policy(iam.PolicyStatement(actions=list(TARGET_ACTIONS["target_kms_key_arns"]), resources=kms))
        for tenant, allow in sorted(config.tenant_targets.items()):
            for statement in _tenant_grants(config, tenant, allow, tag_key):
                role.add_to_policy(statement)
    role.grant_assume_role(worker_role)
    worker_role.add_to_principal_policy(
        iam.PolicyStatement(
            actions=["sts:TagSession"],
            resources=[role.role_arn],
            conditions={"ForAllValues:StringEquals": {"aws:TagKeys": [TENANT_TAG]}},
        )
    )
    return role


def _tenant_grants(
    config: PunctualConfig, tenant: str, allow: TenantTargets, tag_key: str
) -> list[iam.PolicyStatement]:
    """One tenant's grants: what its allow-list names (`"*"`: every granted resource of that kind), for sessions
    carrying its tag only; its event buses only under its own event sources."""
    condition = {"StringEquals": {tag_key: tenant_tag(tenant)}}
    statements = []
    for kind, field in ALLOW_LIST_GRANTS.items():
        listed = list(getattr(allow, "lambda_" if kind == "lambda" else kind))
        arns = list(getattr(config, field)) if "*" in listed else listed
        if not arns:
            continue
        conditions: dict[str, dict[str, object]] = {"StringEquals": dict(condition["StringEquals"])}
        if kind == "eventbridge":
            conditions["StringLike"] = {"events:source": list(allow.eventbridge_sources)}
        statements.append(
            iam.PolicyStatement(actions=list(TARGET_ACTIONS[field]), resources=arns, conditions=conditions)
        )
    return statements
