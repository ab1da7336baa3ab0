"""Completion events: the EventBridge bus every terminal outcome of an occurrence is published to, and the grants
that let the worker publish (right after recording an outcome) and the sweeper drain the outbox."""

from __future__ import annotations

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from punctual_cdk.config import PunctualConfig
from scheduler.schema import EXECUTIONS_TABLE

#: The sparse index of the executions table holding items with unpublished outcomes (scheduler.schema).
OUTBOX_INDEX = next(index.name for index in EXECUTIONS_TABLE.indexes if index.partition_key[0] == "event_pending")
#: The attributes the sweeper's drain may touch on a ledger item: the key and the outbox (never the outcome).
OUTBOX_ATTRIBUTES = ("PK", "outbox", "event_pending", "event_ms")


class CompletionEvents(Construct):
    """The bus: created by the stack (`punctual-<stage>-events`), or an existing one named by `event_bus_name`
    (e.g. `default`)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig) -> None:
        super().__init__(scope, construct_id)
        self.bus = _build_bus(self, config)

    def grant_publish(self, function: lambda_.IFunction) -> None:
        """events:PutEvents on this bus only."""
        self.bus.grant_put_events_to(function)

    def grant_drain(self, function: lambda_.IFunction, executions_table: dynamodb.ITable) -> None:
        """Read the outbox index and clear outbox entries: Query on that one index, and UpdateItem limited to the
        outbox attributes (the drain can never change an outcome)."""
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:Query"],
                resources=[f"{executions_table.table_arn}/index/{OUTBOX_INDEX}"],
            )
        )
        function.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem"],
                resources=[executions_table.table_arn],
                conditions={"ForAllValues:StringEquals": {"dynamodb:Attributes": list(OUTBOX_ATTRIBUTES)}},
            )
        )


def _build_bus(scope: Construct, config: PunctualConfig) -> events.IEventBus:
    if config.event_bus_name is not None:
        return events.EventBus.from_event_bus_name(scope, "Bus", config.event_bus_name)
    return events.EventBus(
        scope,
        "Bus",
        event_bus_name=f"punctual-{config.stage}-events",
        description=f"punctual {config.stage}: completion events (one per terminal outcome of an occurrence)",
    )
