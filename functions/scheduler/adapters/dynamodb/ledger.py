"""The ledger in the executions table: one item per occurrence (claims, leases, outcomes, history) and its
outbox of unpublished outcomes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from scheduler.adapters.codec import (
    Item,
    execution_from_item,
    history_entry,
    hold_to_attributes,
    n,
    outbox_entry_to_attribute,
    s,
)
from scheduler.adapters.dynamodb.common import (
    PAGE_SIZE,
    condition_failed,
    conditionally,
    decode_cursor,
    encode_cursor,
    epoch_seconds,
    get_many,
    old_item,
    query_page,
    query_pages,
)
from scheduler.core.errors import ClaimRefused, Fenced, LeaseLost
from scheduler.core.execution.events import OUTBOX_SHARDS, outbox_entry, outbox_shard
from scheduler.core.model.job import RunState
from scheduler.core.model.timefmt import rfc3339, to_ms
from scheduler.core.ports import ALL_RUNS, Attempt, AttemptEnd, Between, Dispatch, Execution, Hold, OutboxEntry

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

#: Executions are kept this long after they finish: longer than any message can live (SQS keeps a DLQ
#: message 14 days), so a late duplicate or a redrive always finds its ledger item.
EXECUTION_RETENTION = timedelta(days=90)
#: Set on an occurrence's item by `void_copies` (when): a claim made on a message's copy of the job is refused.
COPIES_VOID = "copies_void_ms"
#: Set on an occurrence's item by a pause skip (`AttemptEnd.paused_version`): the version of the paused job that skipped
#: it. A claim from a dispatch at a later version reopens the SKIPPED item (the resumed chain sends it again).
PAUSED_VERSION = "paused_v"
#: The sparse index of the executions table that holds items with unpublished outcomes (scheduler.schema).
OUTBOX_INDEX = "outbox"
#: What a terminal write adds to its SET clause: the outbox entry, and the keys that put the item in the index.
OUTBOX_SET = "outbox = list_append(if_not_exists(outbox, :empty), :ob), event_pending = :eshard, event_ms = :now"


def _outbox_values(entry: OutboxEntry, key: str) -> dict[str, Any]:
    """The values OUTBOX_SET refers to (besides `:empty` and `:now`, which every terminal write has)."""
    return {":ob": {"L": [outbox_entry_to_attribute(entry)]}, ":eshard": s(str(outbox_shard(key)))}


def _hold_clauses(hold: Hold | None, values: dict[str, Any]) -> tuple[str, str]:
    """The SET and ADD clauses (each ending in ", ", or empty) that merge `hold` into an item: its first key and
    start kept, its reasons added to the item's; their values go into `values`."""
    if hold is None:
        return "", ""
    attributes = hold_to_attributes(hold)
    values[":held_by"], values[":held_since"] = attributes["held_by"], attributes["held_since_ms"]
    sets = "held_by = if_not_exists(held_by, :held_by), held_since_ms = if_not_exists(held_since_ms, :held_since), "
    if "held_reasons" not in attributes:
        return sets, ""
    values[":held_reasons"] = attributes["held_reasons"]
    return sets, "held_reasons :held_reasons, "


class DynamoLedger:
    """`renewals`: the client the lease's heartbeat writes through (default: `client`); the functions give it one that
    gives up within the lease's margin (`scheduler.handlers.wiring`), so a hung connection costs a beat, not the
    lease."""

    def __init__(
        self, table_name: str, client: DynamoDBClient | None = None, renewals: DynamoDBClient | None = None
    ) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")
        self.renewals: Any = renewals or self.client

    def claim(self, dispatch: Dispatch, attempt: Attempt) -> Execution:
        owner, now, lease_until = attempt.owner, attempt.now, attempt.lease_until
        take_over_expired, indexed = attempt.take_over_expired, attempt.indexed
        # New: no state yet (an item may exist with only the mark of `void_copies`). A pause skip is reopened by a
        # dispatch from a later version (a missing attribute compares false: no other SKIPPED item is reopened).
        condition = (
            "attribute_not_exists(#state) OR (#state = :retry AND (attribute_not_exists(next_ms) OR next_ms <= :now))"
            f" OR (#state = :skipped AND {PAUSED_VERSION} < :version)"
        )
        if take_over_expired:
            condition += " OR (#state = :running AND lease_ms < :now)"
        if attempt.on_copy:
            condition = f"({condition}) AND attribute_not_exists({COPIES_VOID})"
        values: dict[str, Any] = {
            ":running": s(RunState.RUNNING.value),
            ":retry": s(RunState.RETRY_WAIT.value),
            ":skipped": s(RunState.SKIPPED.value),
            ":version": n(dispatch.version),
            ":now": n(to_ms(now)),
            ":owner": s(owner),
            ":lease": n(to_ms(lease_until)),
            ":one": n(1),
            ":tenant": s(dispatch.tenant),
            ":sfor": s(rfc3339(dispatch.scheduled_for)),
            ":exp": epoch_seconds(now + EXECUTION_RETENTION),
        }
        # The run-history index is keyed on job_id and scheduled_ms: an item without them stays out of it (both are
        # in the occurrence key, which is where the codec reads them from then).
        index_keys = ""
        if indexed:
            index_keys = "job_id = :job, scheduled_ms = :sched, "
            values[":job"] = s(dispatch.job_id)
            values[":sched"] = n(to_ms(dispatch.scheduled_for))
        held_sets, held_adds = _hold_clauses(attempt.held, values)
        try:
            response = self.client.update_item(
                TableName=self.table,
                Key={"PK": s(dispatch.key)},
                UpdateExpression=(
                    "SET #state = :running, #owner = :owner, lease_ms = :lease, updated_ms = :now, "
                    f"{index_keys}{held_sets}tenant = :tenant, scheduled_for = :sfor, "
                    "created_ms = if_not_exists(created_ms, :now), "
                    "expires_at = :exp "
                    f"ADD {held_adds}epoch :one, attempts :one "
                    # finished_ms and paused_v: only a reopened pause skip has them (no other claimable item does).
                    f"REMOVE next_ms, overlapped, finished_ms, {PAUSED_VERSION}"
                ),
                ConditionExpression=condition,
                ExpressionAttributeNames={"#state": "state", "#owner": "owner"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            old = old_item(exc)
            current = execution_from_item(old) if old and "state" in old else None
            raise ClaimRefused(current, void_copy=attempt.on_copy and COPIES_VOID in (old or {})) from exc
        return execution_from_item(response["Attributes"])

    def void_copies(self, key: str, now: datetime) -> None:
        self.client.update_item(
            TableName=self.table,
            Key={"PK": s(key)},
            UpdateExpression=f"SET {COPIES_VOID} = :now, expires_at = if_not_exists(expires_at, :exp)",
            ExpressionAttributeValues={":now": n(to_ms(now)), ":exp": epoch_seconds(now + EXECUTION_RETENTION)},
        )

    def mark_held(self, dispatch: Dispatch, hold: Hold) -> None:
        values: dict[str, Any] = {":exp": epoch_seconds(hold.since + EXECUTION_RETENTION)}
        held_sets, held_adds = _hold_clauses(hold, values)
        conditionally(  # once claimed, the claim keeps what held it: nothing to do
            self.client.update_item,
            TableName=self.table,
            Key={"PK": s(dispatch.key)},
            UpdateExpression=f"SET {held_sets}expires_at = if_not_exists(expires_at, :exp)"
            + (f" ADD {held_adds.rstrip(', ')}" if held_adds else ""),
            ConditionExpression="attribute_not_exists(#state)",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues=values,
        )

    def get(self, key: str) -> Execution | None:
        response = self.client.get_item(TableName=self.table, Key={"PK": s(key)}, ConsistentRead=True)
        item = response.get("Item")
        return execution_from_item(item) if item and "state" in item else None

    def heartbeat(self, key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        try:
            self.renewals.update_item(
                TableName=self.table,
                Key={"PK": s(key)},
                UpdateExpression="SET lease_ms = :lease",
                ConditionExpression="epoch = :e AND #owner = :o AND #state = :running",
                ExpressionAttributeNames={"#owner": "owner", "#state": "state"},
                ExpressionAttributeValues={
                    ":lease": n(to_ms(lease_until)),
                    ":e": n(epoch),
                    ":o": s(owner),
                    ":running": s(RunState.RUNNING.value),
                },
            )
        except ClientError as exc:
            if condition_failed(exc):
                raise LeaseLost(key) from exc
            raise

    def finish(self, key: str, owner: str, epoch: int, now: datetime, end: AttemptEnd) -> Execution:
        state, result, error = end.state, end.result, end.error
        sets = [
            "#state = :state",
            "updated_ms = :now",
            "history = list_append(if_not_exists(history, :empty), :entry)",
        ]
        removes = ["lease_ms"]
        values: dict[str, Any] = {
            ":state": s(state.value),
            ":now": n(to_ms(now)),
            ":empty": {"L": []},
            ":entry": {"L": [history_entry(epoch, state, now, error)]},
            ":e": n(epoch),
            ":o": s(owner),
            ":running": s(RunState.RUNNING.value),
        }
        if result is not None:
            sets.append("#result = :result")
            values[":result"] = s(result[:1000])
        if error is not None:
            sets.append("last_error = :error")
            values[":error"] = s(error[:1000])
        if end.next_attempt_at is not None:
            sets.append("next_ms = :next")
            values[":next"] = n(to_ms(end.next_attempt_at))
        else:
            removes.append("next_ms")
        if end.overlapped is not None:
            sets.append("overlapped = :overlapped")
            values[":overlapped"] = s(end.overlapped)
        if end.paused_version is not None:
            sets.append(f"{PAUSED_VERSION} = :paused_v")
            values[":paused_v"] = n(end.paused_version)
        if state.terminal:
            sets.append("finished_ms = :now")
        if state.terminal and end.announce:
            sets.append(OUTBOX_SET)
            values.update(_outbox_values(outbox_entry(key, epoch, state, now, error=error, result=result), key))
        adds = ""
        if end.refund_attempt:
            adds = " ADD attempts :refund"
            values[":refund"] = n(-1)
        try:
            response = self.client.update_item(
                TableName=self.table,
                Key={"PK": s(key)},
                UpdateExpression=f"SET {', '.join(sets)} REMOVE {', '.join(removes)}{adds}",
                ConditionExpression="epoch = :e AND #owner = :o AND #state = :running",
                ExpressionAttributeNames={"#state": "state", "#owner": "owner", "#result": "result"}
                if result is not None
                else {"#state": "state", "#owner": "owner"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
            )
        except ClientError as exc:
            if condition_failed(exc):
                raise Fenced(key) from exc
            raise
        return execution_from_item(response["Attributes"])

    def record_unclaimed(self, dispatch: Dispatch, state: RunState, now: datetime, reason: str) -> bool:
        return conditionally(
            self.client.put_item,
            TableName=self.table,
            Item={
                "PK": s(dispatch.key),
                "job_id": s(dispatch.job_id),
                "tenant": s(dispatch.tenant),
                "scheduled_ms": n(to_ms(dispatch.scheduled_for)),
                "scheduled_for": s(rfc3339(dispatch.scheduled_for)),
                "state": s(state.value),
                "epoch": n(0),
                "attempts": n(0),
                "last_error": s(reason),
                "created_ms": n(to_ms(now)),
                "updated_ms": n(to_ms(now)),
                "finished_ms": n(to_ms(now)),
                "history": {"L": [history_entry(0, state, now, reason)]},
                "expires_at": epoch_seconds(now + EXECUTION_RETENTION),
                "outbox": {"L": [outbox_entry_to_attribute(outbox_entry(dispatch.key, 0, state, now, error=reason))]},
                "event_pending": s(str(outbox_shard(dispatch.key))),
                "event_ms": n(to_ms(now)),
            },
            ConditionExpression="attribute_not_exists(#state)",
            ExpressionAttributeNames={"#state": "state"},
        )

    def expire_to(
        self, key: str, epoch: int, state: RunState, now: datetime, reason: str, *, announce: bool = True
    ) -> bool:
        outbox = _outbox_values(outbox_entry(key, epoch, state, now, error=reason), key) if announce else {}
        return self._update_if(
            key,
            UpdateExpression=(
                "SET #state = :state, last_error = :reason, updated_ms = :now, finished_ms = :now, "
                "history = list_append(if_not_exists(history, :empty), :entry)"
                + (f", {OUTBOX_SET}" if announce else "")
                + " REMOVE lease_ms"
            ),
            ConditionExpression="epoch = :e AND #state = :running AND lease_ms < :now",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={
                ":state": s(state.value),
                ":reason": s(reason),
                ":now": n(to_ms(now)),
                ":empty": {"L": []},
                ":entry": {"L": [history_entry(epoch, state, now, reason)]},
                ":e": n(epoch),
                ":running": s(RunState.RUNNING.value),
                **outbox,
            },
        )

    def mark_dead_lettered(self, key: str) -> None:
        self._update_if(  # an unknown key has nothing to mark
            key,
            UpdateExpression="SET dead_lettered = :t",
            ConditionExpression="attribute_exists(PK)",
            ExpressionAttributeValues={":t": {"BOOL": True}},
        )

    def revive(self, key: str, now: datetime, note: str) -> bool:
        current = self.get(key)
        epoch = current.epoch if current else 0
        return self._update_if(
            key,
            UpdateExpression=(
                "SET #state = :retry, attempts = :zero, next_ms = :now, updated_ms = :now, dead_lettered = :f, "
                "history = list_append(if_not_exists(history, :empty), :entry) REMOVE finished_ms"
            ),
            ConditionExpression="#state = :dead",
            ExpressionAttributeNames={"#state": "state"},
            ExpressionAttributeValues={
                ":retry": s(RunState.RETRY_WAIT.value),
                ":dead": s(RunState.DEAD.value),
                ":zero": n(0),
                ":now": n(to_ms(now)),
                ":f": {"BOOL": False},
                ":empty": {"L": []},
                ":entry": {"L": [history_entry(epoch, RunState.RETRY_WAIT, now, note)]},
            },
        )

    def runs(
        self, job_id: str, limit: int, cursor: str | None, unindexed: str | None = None, within: Between = ALL_RUNS
    ) -> tuple[list[Execution], str | None]:
        # The index is keys-only (scheduler.schema): it lists the page's keys, newest first, and the items are read by
        # key, eventually consistent as the index itself is.
        condition, values = "job_id = :j", {":j": s(job_id)}
        after, before = within.after, within.before
        if before is not None and after is not None:
            if to_ms(before) - to_ms(after) <= 1:
                return [], None  # nothing lies strictly between them
            condition += " AND scheduled_ms BETWEEN :after AND :before"
            values[":after"], values[":before"] = n(to_ms(after) + 1), n(to_ms(before) - 1)
        elif before is not None:
            condition += " AND scheduled_ms < :before"
            values[":before"] = n(to_ms(before))
        elif after is not None:
            condition += " AND scheduled_ms > :after"
            values[":after"] = n(to_ms(after))
        request: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_job",
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": False,
            "Limit": limit + 1,  # one ahead, so a page that ends at the last run carries no cursor
        }
        start = decode_cursor(cursor)
        if start and start.get("job_id") != s(job_id):
            raise ValueError("cursor is not one this API returned for this job")
        keys, next_cursor = query_page(self.client, request, start, limit, ("PK", "job_id", "scheduled_ms"))
        items = get_many(self.client, self.table, [{"PK": k["PK"]} for k in keys], consistent=False)
        # A key whose item is gone (expired since the index listed it) is left out.
        runs = [execution_from_item(items[k["PK"]["S"]]) for k in keys if k["PK"]["S"] in items]
        extra = self.get(unindexed) if unindexed else None
        if extra is None or extra.job_id != job_id or any(r.key == extra.key for r in runs):
            return runs, next_cursor
        # The occurrence outside the index belongs on this page if it sorts between the cursor and the page's end.
        above = int(start["scheduled_ms"]["N"]) if start and "scheduled_ms" in start else None
        below = to_ms(runs[-1].scheduled_for) if next_cursor and runs else None
        at = to_ms(extra.scheduled_for)
        if (above is not None and at >= above) or (below is not None and at < below):
            return runs, next_cursor
        runs = sorted([*runs, extra], key=lambda r: r.scheduled_for, reverse=True)
        if len(runs) > limit:
            runs = runs[:limit]
            last = runs[-1]
            key = {"PK": s(last.key), "job_id": s(job_id), "scheduled_ms": n(to_ms(last.scheduled_for))}
            next_cursor = encode_cursor(key)
        return runs, next_cursor

    def resolve(self, key: str, state: RunState, now: datetime, note: str) -> Execution:
        current = self.get(key)
        epoch = current.epoch if current else 0
        values: dict[str, Any] = {
            ":state": s(state.value),
            ":now": n(to_ms(now)),
            ":reconciling": s(RunState.RECONCILING.value),
            ":empty": {"L": []},
            ":entry": {"L": [history_entry(epoch, state, now, note)]},
        }
        if state.terminal:
            values.update(_outbox_values(outbox_entry(key, epoch, state, now, error=note), key))
        try:
            response = self.client.update_item(
                TableName=self.table,
                Key={"PK": s(key)},
                UpdateExpression=(
                    "SET #state = :state, updated_ms = :now, "
                    "history = list_append(if_not_exists(history, :empty), :entry)"
                    + (
                        f", finished_ms = :now, {OUTBOX_SET} REMOVE next_ms"
                        if state.terminal
                        else ", next_ms = :now REMOVE finished_ms"
                    )
                ),
                # No claim moves a RECONCILING item, so the epoch read above is still its epoch.
                ConditionExpression="#state = :reconciling",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if condition_failed(exc):
                old = old_item(exc)
                raise ClaimRefused(execution_from_item(old) if old else None) from exc
            raise
        return execution_from_item(response["Attributes"])

    def pending_outbox(self, limit: int) -> list[Execution]:
        found: list[Item] = []
        for shard in range(OUTBOX_SHARDS):
            request: dict[str, Any] = {
                "TableName": self.table,
                "IndexName": OUTBOX_INDEX,
                "KeyConditionExpression": "event_pending = :p",
                "ExpressionAttributeValues": {":p": s(str(shard))},
                "Limit": min(PAGE_SIZE, limit),
            }
            in_shard = 0
            for items in query_pages(self.client, request):
                found += items
                in_shard += len(items)
                if in_shard >= limit:
                    break
        executions = [execution_from_item(i) for i in found]
        # The index is eventually consistent: an item cleared a moment ago may still show, with its outbox.
        pending = sorted((e for e in executions if e.outbox), key=lambda e: e.outbox[-1].at)
        return pending[:limit]

    def clear_outbox(self, key: str, published: Sequence[OutboxEntry]) -> bool:
        if not published:
            return False
        last = len(published) - 1
        return self._update_if(
            key,
            UpdateExpression="REMOVE #ob, event_pending, event_ms",
            ConditionExpression=f"size(#ob) = :n AND #ob[{last}].#eid = :eid",
            ExpressionAttributeNames={"#ob": "outbox", "#eid": "eid"},
            ExpressionAttributeValues={":n": n(len(published)), ":eid": s(published[-1].event_id)},
        )

    def _update_if(self, key: str, **request: Any) -> bool:
        """A conditional update of the item of `key`: whether it took effect (its condition held)."""
        return conditionally(self.client.update_item, TableName=self.table, Key={"PK": s(key)}, **request)
