"""A tenant's job list in the jobs table: its `by_tenant` entries, a batch's entry expanded into its jobs, and the
label index (`LABEL#...`) a selector reads."""

from __future__ import annotations

import builtins
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import boto3

from scheduler.adapters.codec import (
    Item,
    get_s,
    job_from_item,
    job_pk,
    label_pk,
    listed_job_ids,
    s,
)
from scheduler.adapters.dynamodb.common import (
    decode_cursor,
    encode_cursor,
    get_many,
    query_from,
)
from scheduler.core.model.job import ALL_JOBS, Job, JobQuery, JobState
from scheduler.core.model.labels import LabelSelector

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


class DynamoJobList:
    """Reads a tenant's jobs a page at a time (DynamoJobStore.list)."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    def list(
        self, tenant: str, state: JobState | None, limit: int, cursor: str | None, query: JobQuery = ALL_JOBS
    ) -> tuple[builtins.list[Job], str | None]:
        """Oldest first from the keys-only by_tenant index, each page's jobs then read by key (eventually
        consistent: a job created a moment ago may be missing from a list for a moment; GET by id is always
        consistent). The jobs of one batch transaction share an entry (`job_list_item`) and are listed together,
        in order, where the first of them is. Reads one matching job ahead, so a page that ends at the tenant's
        last job carries no cursor; a cursor is an index key, and a position in its entry's jobs for a batch's."""
        driving = query.driving()
        if driving is not None:
            return self._list_labelled(tenant, driving, state, query, limit, cursor)
        partition = s(f"TENANT#{tenant}")
        start = decode_cursor(cursor)
        at = None
        if start is not None:
            at = start.pop("at", None)
            if (
                set(start) != {"PK", "SK", "tenant_pk", "tenant_sk"}
                or start["tenant_pk"] != partition
                or not (at is None or (isinstance(at, int) and at >= 0))
            ):
                raise ValueError("cursor is not one this API returned for this caller")
        # A filtered list reads more a query: most jobs may not match.
        reads = limit + 1 if state is None and query.empty else max(limit + 1, 25)
        found: builtins.list[tuple[Item, int | None, Job]] = []
        for entry, position, job in self._listed(partition, start, at, reads):
            if query.matches(job, state):
                found.append((entry, position, job))
                if len(found) > limit:
                    break
        page = found[:limit]
        next_cursor = None
        if len(found) > limit and page:
            entry, position, _ = page[-1]
            last: dict[str, Any] = {f: entry[f] for f in ("PK", "SK", "tenant_pk", "tenant_sk")}
            next_cursor = encode_cursor(last if position is None else {**last, "at": position})
        return [job for _, _, job in page], next_cursor

    def _list_labelled(
        self,
        tenant: str,
        driving: LabelSelector,
        state: JobState | None,
        query: JobQuery,
        limit: int,
        cursor: str | None,
    ) -> tuple[builtins.list[Job], str | None]:
        """The jobs with the driving selector's label, from its partition of the label index (by value, then job
        id; an exact value is a prefix of the sort key), each read by key and kept if it matches all of `query`.
        A query reads `limit + 1` entries when the selector is the whole filter (one ahead: no cursor after the
        last), more when other filters may drop some; a cursor is the last entry's key, in this partition."""
        partition = s(label_pk(tenant, driving.key))
        start = decode_cursor(cursor)
        if start is not None and (set(start) != {"PK", "SK"} or start["PK"] != partition):
            raise ValueError("cursor is not one this API returned for this caller")
        condition, values = "PK = :p", {":p": partition}
        if driving.value is not None:
            condition, values[":v"] = "PK = :p AND begins_with(SK, :v)", s(f"{driving.value}#")
        alone = state is None and query == JobQuery(labels=(driving,))
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ProjectionExpression": "PK, SK, job_id",
            "Limit": limit + 1 if alone else max(limit + 1, 25),
        }
        found: builtins.list[tuple[Item, Job]] = []
        while len(found) <= limit:
            response = query_from(self.client, request, start)
            entries = response.get("Items", [])
            keys = [{"PK": s(job_pk(e["job_id"]["S"])), "SK": s("DEF")} for e in entries]
            items = get_many(self.client, self.table, keys, consistent=False)
            for entry in entries:
                item = items.get(job_pk(entry["job_id"]["S"]))
                if item is None or get_s(item, "tenant") != tenant:
                    continue
                job = job_from_item(item)
                if query.matches(job, state):
                    found.append(({"PK": entry["PK"], "SK": entry["SK"]}, job))
                    if len(found) > limit:
                        break
            start = response.get("LastEvaluatedKey")
            if not start:
                break
        page = found[:limit]
        next_cursor = encode_cursor(page[-1][0]) if len(found) > limit and page else None
        return [job for _, job in page], next_cursor

    def _listed(
        self, partition: dict[str, str], start: dict[str, Any] | None, at: int | None, reads: int
    ) -> Iterator[tuple[Item, int | None, Job]]:
        """The tenant's jobs in list order after `start` (with `at`, after that position in its batch entry): each
        with its index entry and its position in the entry's jobs (None for a job's own entry), `reads` at most a
        query and a read."""
        if start is not None and at is not None:
            entry = self.client.get_item(TableName=self.table, Key={"PK": start["PK"], "SK": start["SK"]}).get("Item")
            named = listed_job_ids(entry) if entry and entry.get("tenant_pk") == partition else None
            if named is None:  # not a batch's entry, or another tenant's
                raise ValueError("cursor is not one this API returned for this caller")
            yield from self._members(start, named, at + 1, reads)
        request: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_tenant",
            "KeyConditionExpression": "tenant_pk = :t",
            "ExpressionAttributeValues": {":t": partition},
            "Limit": reads,
        }
        while True:
            response = query_from(self.client, request, start)
            keys = response.get("Items", [])
            items = get_many(self.client, self.table, [{"PK": k["PK"], "SK": k["SK"]} for k in keys], consistent=False)
            for key in keys:
                item = items.get(key["PK"]["S"])
                if item is None:  # deleted since the index listed it
                    continue
                named = listed_job_ids(item)
                if named is None:
                    yield key, None, job_from_item(item)
                else:
                    yield from self._members(key, named, 0, reads)
            start = response.get("LastEvaluatedKey")
            if not start:
                return

    def _members(
        self, entry: Item, named: builtins.list[str], first: int, reads: int
    ) -> Iterator[tuple[Item, int | None, Job]]:
        """The jobs a batch entry names from position `first` on, read `reads` at a time as they are taken."""
        for begin in range(first, len(named), reads):
            ids = named[begin : begin + reads]
            items = get_many(
                self.client, self.table, [{"PK": s(job_pk(i)), "SK": s("DEF")} for i in ids], consistent=False
            )
            for position, job_id in enumerate(ids, start=begin):
                item = items.get(job_pk(job_id))
                if item is not None:
                    yield entry, position, job_from_item(item)
