"""The Jobs and Executions tables, built from `scheduler.schema` (the module the local stack provisions
from), so the deployed key schema and indexes cannot drift from the local ones."""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnElement, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from punctual_cdk.config import PunctualConfig
from punctual_cdk.lambda_function import data_removal_policy
from scheduler.schema import EXECUTIONS_TABLE, JOBS_TABLE, TableSchema

_ATTRIBUTE_TYPES = {
    "S": dynamodb.AttributeType.STRING,
    "N": dynamodb.AttributeType.NUMBER,
    "B": dynamodb.AttributeType.BINARY,
}

#: On-demand: the load is spiky (everyone's job at :00) and idle most of the minute; provisioned
#: capacity would either throttle the herd or pay for idle.
BILLING_MODE = dynamodb.BillingMode.PAY_PER_REQUEST
#: AWS-managed KMS key (aws/dynamodb): key use shows in CloudTrail and needs no key policy of ours. A
#: customer-managed key would add a key policy to maintain and a per-request KMS cost for no control we
#: need (no cross-account access, no crypto-shredding requirement).
ENCRYPTION = dynamodb.TableEncryption.AWS_MANAGED


class Storage(Construct):
    """Both tables: on-demand, point-in-time recovery, encrypted, TTL on the schema's ttl attribute, every GSI
    of the schema with its projection (ALL or KEYS_ONLY), retained and deletion-protected unless configured off."""

    def __init__(self, scope: Construct, construct_id: str, *, config: PunctualConfig) -> None:
        super().__init__(scope, construct_id)
        self.jobs_table = _build_table(self, JOBS_TABLE, config)
        self.executions_table = _build_table(self, EXECUTIONS_TABLE, config)


def _attribute(key: tuple[str, str]) -> dynamodb.Attribute:
    name, kind = key
    return dynamodb.Attribute(name=name, type=_ATTRIBUTE_TYPES[kind])


def _build_table(scope: Construct, schema: TableSchema, config: PunctualConfig) -> dynamodb.Table:
    table = dynamodb.Table(
        scope,
        schema.logical_name,
        partition_key=_attribute(schema.partition_key),
        sort_key=_attribute(schema.sort_key) if schema.sort_key else None,
        billing_mode=BILLING_MODE,
        encryption=ENCRYPTION,
        point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
            point_in_time_recovery_enabled=True
        ),
        time_to_live_attribute=schema.ttl_attribute,
        removal_policy=data_removal_policy(config),
        # Guards against a console or API delete too, which RETAIN (a CloudFormation policy) does not.
        deletion_protection=config.retain_data,
    )
    for index in schema.indexes:
        table.add_global_secondary_index(
            index_name=index.name,
            partition_key=_attribute(index.partition_key),
            sort_key=_attribute(index.sort_key) if index.sort_key else None,
            projection_type=dynamodb.ProjectionType[index.projection],
        )
    return table


#: What the functions do with a table: the DynamoDB calls in scheduler.adapters (GetItem, BatchGetItem, Query,
#: and inside TransactWriteItems: ConditionCheck). No Scan, no BatchWriteItem, no stream reads: nothing uses them.
READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:BatchGetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem")
WRITE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem")


def grant_table(grantee: iam.IGrantable, table: dynamodb.Table, *, write: bool) -> None:
    """Least privilege on one table (and its indexes): the reads the adapters make, and their writes if `write`."""
    table.grant(grantee, *READ_ACTIONS, *(WRITE_ACTIONS if write else ()))


def acknowledge_index_grants(grantee: IConstruct, *tables: dynamodb.Table) -> None:
    """Acknowledge cdk-nag's IAM5 finding for `<table ARN>/index/*`, which CDK's table grants add so
    that queries on the table's own GSIs are allowed. The wildcard ranges over that one table's indexes
    (named in scheduler.schema), never over other tables, so it is acknowledged per table, by name."""
    for table in tables:
        cfn_table = table.node.default_child
        if not isinstance(cfn_table, CfnElement):
            raise TypeError(f"{table.node.path} has no CloudFormation resource")
        stack = Stack.of(table)
        logical_id = stack.resolve(stack.get_logical_id(cfn_table))
        Validations.of(grantee).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions-IAM5[Resource::<{logical_id}.Arn>/index/*]",
                reason=(
                    f"Grants on the {table.node.id} table include its own global secondary indexes "
                    "(<table ARN>/index/*, the indexes declared in scheduler.schema); no other table is "
                    "covered."
                ),
            )
        )
