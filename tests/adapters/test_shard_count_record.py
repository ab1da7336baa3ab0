"""The record of a process's shard count on DynamoDB Local (docs/design.md §3.3): the job store and the timer store of
one process share it, so it is made once, and a count the item already holds costs one write, not two."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.adapters.dynamodb import WATERMARK_KEY, DynamoJobStore, DynamoTimerStore, ShardCountRecord

pytestmark = pytest.mark.emulator


class WatermarkWrites:
    """A DynamoDB client that counts the writes of the watermark item (where the count is recorded)."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.writes = 0

    def update_item(self, **request: Any) -> Any:
        if request["Key"] == WATERMARK_KEY:
            self.writes += 1
        return self._client.update_item(**request)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def recorded(client: Any, table: str) -> tuple[set[int], int]:
    item = client.get_item(TableName=table, Key=WATERMARK_KEY, ConsistentRead=True)["Item"]
    return {int(count) for count in item["counts"]["NS"]}, int(item["shards"]["N"])


def process(client: Any, table: str, shards: int) -> tuple[WatermarkWrites, DynamoJobStore, DynamoTimerStore]:
    """The stores of one process as `wiring` makes them: one record of the count, shared."""
    counting = WatermarkWrites(client)
    record = ShardCountRecord(counting, table, shards)
    return (
        counting,
        DynamoJobStore(table, shards, counting, record),
        DynamoTimerStore(table, shards, counting, shard_record=record),
    )


def test_the_stores_of_a_process_record_its_count_once_between_them(resources, dynamodb_client, make) -> None:
    # Given the job store and the timer store of a process with 4 shards, on a table nothing wrote yet
    counting, jobs, timers = process(dynamodb_client, resources.jobs_table, 4)

    # When both write timers, several times (a create with its late copy, a timer, a late one)
    for _ in range(2):
        job = make.job()
        jobs.create(job, make.timer(job), None, True, 5)
    other = make.job()
    timers.put_timer(make.timer(other))
    timers.put_late(make.timer(other))

    # Then the count was recorded once: its set and the maximum, the two writes of a first record
    assert counting.writes == 2
    assert recorded(dynamodb_client, resources.jobs_table) == ({4}, 4)
    assert timers.recorded_shards() == 4


def test_a_count_already_recorded_costs_one_write_and_a_lower_one_never_lowers_the_maximum(
    resources, dynamodb_client, make
) -> None:
    table = resources.jobs_table
    # Given a table where a process with 4 shards recorded its count
    first, _, timers = process(dynamodb_client, table, 4)
    timers.put_timer(make.timer(make.job()))
    assert first.writes == 2

    # When another process with the same count writes: one write (the set), the maximum already holds it
    same, _, timers = process(dynamodb_client, table, 4)
    timers.put_timer(make.timer(make.job()))
    assert same.writes == 1 and recorded(dynamodb_client, table) == ({4}, 4)

    # When a deploy raises the count: the set and the raised maximum
    raised, _, timers = process(dynamodb_client, table, 16)
    timers.put_timer(make.timer(make.job()))
    assert raised.writes == 2 and recorded(dynamodb_client, table) == ({4, 16}, 16)

    # When one lowers it again: the set only; the sweeps keep sweeping the 16
    lowered, jobs, _ = process(dynamodb_client, table, 2)
    job = make.job()
    jobs.create(job, make.timer(job), None, False, 5)
    assert lowered.writes == 1 and recorded(dynamodb_client, table) == ({2, 4, 16}, 16)


def test_a_record_that_failed_is_made_again_before_the_next_write(resources, dynamodb_client, make) -> None:
    # Given a process whose first record of its count fails (DynamoDB refused it)
    counting, _, timers = process(dynamodb_client, resources.jobs_table, 4)

    class Refused(Exception):
        pass

    def refuse(**request: Any) -> Any:
        raise Refused

    original = counting.update_item
    counting.update_item = refuse  # type: ignore[method-assign]
    unwritten = make.timer(make.job())
    with pytest.raises(Refused):
        timers.put_timer(unwritten)
    # and nothing was written without the record
    assert list(timers.timers(timers.bucket_of(unwritten), None)) == []
    counting.update_item = original  # type: ignore[method-assign]

    # When it writes again, the record is made first
    timers.put_timer(make.timer(make.job()))
    assert recorded(dynamodb_client, resources.jobs_table) == ({4}, 4)
