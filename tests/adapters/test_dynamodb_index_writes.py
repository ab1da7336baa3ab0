"""What a fire writes to the executions table's indexes, as DynamoDB Local reports it (ReturnConsumedCapacity
INDEXES): the run-history index is keys-only, so an execution's entry is written when its claim creates the item
and never again - its finish (an update of attributes the index does not hold) writes the table alone."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoLedger
from scheduler.core.model.job import RunState
from scheduler.core.records import Attempt, AttemptEnd

pytestmark = pytest.mark.emulator

LEASE = timedelta(seconds=60)


@contextmanager
def consumed(client: Any) -> Iterator[list[dict[str, Any]]]:
    """The ConsumedCapacity of each UpdateItem the client makes meanwhile, indexes included."""
    seen: list[dict[str, Any]] = []

    def ask(params: dict[str, Any], **_: Any) -> None:
        params["ReturnConsumedCapacity"] = "INDEXES"

    def note(parsed: dict[str, Any], **_: Any) -> None:
        seen.append(parsed.get("ConsumedCapacity") or {})

    client.meta.events.register("provide-client-params.dynamodb.UpdateItem", ask)
    client.meta.events.register("after-call.dynamodb.UpdateItem", note)
    try:
        yield seen
    finally:
        client.meta.events.unregister("provide-client-params.dynamodb.UpdateItem", ask)
        client.meta.events.unregister("after-call.dynamodb.UpdateItem", note)


def index_units(capacity: dict[str, Any], index: str) -> float:
    return float((capacity.get("GlobalSecondaryIndexes") or {}).get(index, {}).get("CapacityUnits", 0.0))


def test_a_recurring_occurrence_writes_its_run_history_entry_once(resources, dynamodb_client, make) -> None:
    ledger = DynamoLedger(resources.executions_table, dynamodb_client)
    d = make.dispatch(make.new_id(), make.t0)

    with consumed(dynamodb_client) as calls:
        held = ledger.claim(d, Attempt("w1", make.t0, make.t0 + LEASE, True))
        ledger.heartbeat(d.key, "w1", held.epoch, make.t0 + 2 * LEASE)
        ledger.finish(d.key, "w1", held.epoch, make.t0 + timedelta(seconds=1), AttemptEnd(RunState.SUCCEEDED))

    claimed, beat, finished = calls
    assert index_units(claimed, "by_job") > 0  # the claim puts the item in the index
    assert index_units(beat, "by_job") == 0 and index_units(finished, "by_job") == 0
    # and the history still reads the finished run
    [run], _ = ledger.runs(d.job_id, 5, None)
    assert run.state == RunState.SUCCEEDED
