"""The meter's transaction accounting on DynamoDB Local, which misreports a transaction of several items: the
units the meter counts for the create transactions are the items' own (2 a table item, 1 an index entry)."""

from __future__ import annotations

import uuid
from typing import Any

import boto3

from scheduler_bench.metering import Meter


def transact_update(table: str, key: str, expression: str, values: dict[str, Any]) -> dict[str, Any]:
    """An Update of the item `key` as one of a transaction's items."""
    return {
        "Update": {
            "TableName": table,
            "Key": {"PK": {"S": key}},
            "UpdateExpression": expression,
            "ExpressionAttributeValues": values,
        }
    }


def test_a_transaction_of_many_items_is_charged_per_item_and_per_index_entry(dynamodb_client: Any) -> None:
    # Given a table with a keys-only index, and a metered client
    table = f"m{uuid.uuid4().hex[:10]}"
    dynamodb_client.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "PK", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "PK", "AttributeType": "S"},
            {"AttributeName": "g", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_g",
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
    )
    try:
        dynamodb_client.put_item(TableName=table, Item={"PK": {"S": "counter"}, "n": {"N": "0"}})
        meter = Meter()
        client = meter.attach(boto3.client("dynamodb", config=dynamodb_client.meta.config))

        # When one transaction puts five items into the index and updates one that is not in it
        puts = [{"Put": {"TableName": table, "Item": {"PK": {"S": f"k{i}"}, "g": {"S": "x"}}}} for i in range(5)]
        update = transact_update(table, "counter", "ADD n :one", {":one": {"N": "5"}})
        with meter.phase("api"):
            client.transact_write_items(TransactItems=[*puts, update])
        # and then moves one item's index key in a transaction of its own
        move = transact_update(table, "k0", "SET g = :y", {":y": {"S": "y"}})
        with meter.phase("edit"):
            client.transact_write_items(TransactItems=[move])

        # Then the first is 2 units for each of its six items and 1 for each of the five new index entries (the
        # endpoint reports 2 and 2)
        first = meter.totals({"api"})
        assert first.transactional_write_units == 12.0 and first.index_write_units == 5.0
        assert first.write_units == 17.0
        # And the move is 2 for the item and 2 for the index (its entry out and in again)
        second = meter.totals({"edit"})
        assert second.transactional_write_units == 2.0 and second.index_write_units == 2.0
    finally:
        dynamodb_client.delete_table(TableName=table)
