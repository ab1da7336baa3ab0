"""The tables are built from scheduler.schema and carry the durability settings the design relies on."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from scheduler.schema import EXECUTIONS_TABLE, JOBS_TABLE, TableSchema, attribute_definitions


@pytest.mark.parametrize("schema", [JOBS_TABLE, EXECUTIONS_TABLE], ids=lambda s: s.logical_name)
def test_table_matches_the_shared_schema(default, schema: TableSchema) -> None:
    # Given the stack as cdk.json configures it
    # When we look at the table built from this schema
    props = default.table(schema)

    # Then its keys, attributes and indexes are exactly the schema's (what local provisioning creates)
    expected_keys = [{"AttributeName": schema.partition_key[0], "KeyType": "HASH"}]
    if schema.sort_key:
        expected_keys.append({"AttributeName": schema.sort_key[0], "KeyType": "RANGE"})
    assert props["KeySchema"] == expected_keys
    assert sorted(props["AttributeDefinitions"], key=lambda a: a["AttributeName"]) == sorted(
        attribute_definitions(schema), key=lambda a: a["AttributeName"]
    )
    indexes = {index["IndexName"]: index for index in props.get("GlobalSecondaryIndexes", [])}
    assert set(indexes) == {index.name for index in schema.indexes}
    for index in schema.indexes:
        keys = [{"AttributeName": index.partition_key[0], "KeyType": "HASH"}]
        if index.sort_key:
            keys.append({"AttributeName": index.sort_key[0], "KeyType": "RANGE"})
        assert indexes[index.name]["KeySchema"] == keys
        assert indexes[index.name]["Projection"] == {"ProjectionType": index.projection}


@pytest.mark.parametrize("schema", [JOBS_TABLE, EXECUTIONS_TABLE], ids=lambda s: s.logical_name)
def test_table_is_on_demand_recoverable_encrypted_and_expires_items(default, schema: TableSchema) -> None:
    props = default.table(schema)

    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}  # KMS with the AWS-managed key
    assert props["TimeToLiveSpecification"] == {"AttributeName": schema.ttl_attribute, "Enabled": True}


def test_tables_are_retained_and_deletion_protected_by_default(default) -> None:
    tables = default.resources("AWS::DynamoDB::Table")

    assert len(tables) == 2
    for table in tables.values():
        assert table["DeletionPolicy"] == "Retain"
        assert table["UpdateReplacePolicy"] == "Retain"
        assert table["Properties"]["DeletionProtectionEnabled"] is True


def test_throwaway_stage_lets_tables_go(configured) -> None:
    # Given retain_data: false
    for table in configured.resources("AWS::DynamoDB::Table").values():
        # Then the tables are deleted with the stack and not protected
        assert table["DeletionPolicy"] == "Delete"
        assert table["Properties"]["DeletionProtectionEnabled"] is False


def test_table_names_are_generated_not_fixed(default) -> None:
    # Fixed names would block replacement and collide between stages deployed to one account.
    default.template.all_resources_properties("AWS::DynamoDB::Table", {"TableName": Match.absent()})
