"""DynamoDB cancels a transaction on an item another transaction holds (TransactionConflict): nothing is written,
and the adapters try the same transaction again after a short pause. A refused condition is never retried."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from scheduler.adapters.dynamodb.common import CONFLICT_ATTEMPTS, transact


def cancelled(*codes: str) -> ClientError:
    return ClientError(
        {
            "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
            "CancellationReasons": [{"Code": code} for code in codes],
        },
        "TransactWriteItems",
    )


class Client:
    def __init__(self, *failures: ClientError) -> None:
        self.failures = list(failures)
        self.calls = 0

    def transact_write_items(self, TransactItems: list[Any]) -> dict[str, Any]:  # noqa: N803 - boto3's name
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return {}


def test_a_transaction_cancelled_for_a_conflict_is_tried_again_after_a_pause() -> None:
    client, pauses = Client(cancelled("None", "TransactionConflict"), cancelled("TransactionConflict")), []
    transact(client, [{"Put": {}}], sleep=pauses.append)
    assert client.calls == 3 and len(pauses) == 2 and all(0 <= p <= 1 for p in pauses)


def test_a_refused_condition_is_not_retried() -> None:
    client = Client(cancelled("ConditionalCheckFailed", "TransactionConflict"))
    with pytest.raises(ClientError):
        transact(client, [{"Put": {}}], sleep=lambda _: None)
    assert client.calls == 1


def test_a_conflict_that_persists_raises_after_the_last_attempt() -> None:
    client = Client(*(cancelled("TransactionConflict") for _ in range(CONFLICT_ATTEMPTS)))
    with pytest.raises(ClientError):
        transact(client, [{"Put": {}}], sleep=lambda _: None)
    assert client.calls == CONFLICT_ATTEMPTS
