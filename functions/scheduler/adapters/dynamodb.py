"""DynamoDB adapters: the jobs table (jobs, idempotency records, quota counters, timers, buckets, the watermark
and the late lane - one table) and the executions table (the ledger).

Every race is decided by a conditional write; `ConditionalCheckFailedException` becomes a domain error.
Expressions name every attribute through placeholders: DynamoDB reserves words such as `state`, `owner`.
"""

from __future__ import annotations

import base64
import builtins
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError, ParamValidationError

from scheduler.adapters.codec import (
    BACKFILL_PK,
    Item,
    backfill_from_item,
    backfill_to_item,
    execution_from_item,
    history_entry,
    job_from_item,
    job_pk,
    job_to_item,
    n,
    outbox_entry_to_attribute,
    s,
    timer_attributes,
    timer_from_item,
    timer_sk,
)
from scheduler.core.chain import active_delta, already_advanced, completion_mark
from scheduler.core.errors import (
    ClaimLost,
    ClaimRefused,
    Fenced,
    IdempotencyConflict,
    IdempotentReplay,
    LeaseLost,
    QuotaExceeded,
    VersionConflict,
)
from scheduler.core.events import OUTBOX_SHARDS, outbox_entry, outbox_shard
from scheduler.core.keys import shard_of
from scheduler.core.model import BackfillState, Job, JobState, RunState
from scheduler.core.ports import (
    AdvanceResult,
    Backfill,
    BucketBusy,
    BucketClaim,
    BucketId,
    BudgetCalendar,
    Dispatch,
    Execution,
    IdempotencyRecord,
    OutboxEntry,
    Timer,
)
from scheduler.core.timefmt import from_ms, minute_key, minute_of, rfc3339, to_ms

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

PAGE_SIZE = 100
#: TransactWriteItems takes at most 100 items: a page checkpoint and the quota releases of up to 99 tenants, so a
#: page of timers holds at most 99.
MAX_TRANSACTION_ITEMS = 100
TIMER_PAGE_SIZE = MAX_TRANSACTION_ITEMS - 1
#: Executions are kept this long after they finish: longer than any message can live (SQS keeps a DLQ
#: message 14 days), so a late duplicate or a redrive always finds its ledger item.
EXECUTION_RETENTION = timedelta(days=90)
TIMER_RETENTION = timedelta(days=2)
#: A finished backfill stays readable (GET .../backfill/{id}) this long.
BACKFILL_RETENTION = timedelta(days=30)
WATERMARK_KEY = {"PK": s("WATERMARK"), "SK": s("WATERMARK")}
#: The sparse index of the executions table that holds items with unpublished outcomes (scheduler.schema).
OUTBOX_INDEX = "outbox"
#: What a terminal write adds to its SET clause: the outbox entry, and the keys that put the item in the index.
OUTBOX_SET = "outbox = list_append(if_not_exists(outbox, :empty), :ob), event_pending = :eshard, event_ms = :now"


def _condition_failed(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


def _old_item(exc: ClientError) -> Item | None:
    """The item as it stood when a condition failed (ReturnValuesOnConditionCheckFailure=ALL_OLD)."""
    response: dict[str, Any] = dict(exc.response)
    item = response.get("Item")
    return item if isinstance(item, dict) and item else None


def _cancellation_reasons(exc: ClientError) -> list[dict[str, Any]]:
    response: dict[str, Any] = dict(exc.response)
    return list(response.get("CancellationReasons") or [])


def _epoch_seconds(when: datetime) -> dict[str, str]:
    return n(int(when.timestamp()))


def _encode_cursor(key: dict[str, Any] | None) -> str | None:
    if not key:
        return None
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode()


def _decode_cursor(cursor: str | None) -> dict[str, Any] | None:
    if not cursor:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, TypeError) as exc:
        raise ValueError("cursor is not one this API returned") from exc
    if not isinstance(value, dict):
        raise ValueError("cursor is not one this API returned")
    return value


def _query_pages(client: Any, request: dict[str, Any]) -> Iterator[list[Item]]:
    """The items of a query, a page at a time, following LastEvaluatedKey; the caller stops when it has enough."""
    while True:
        response = client.query(**request)
        yield response.get("Items", [])
        if not response.get("LastEvaluatedKey"):
            return
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def _query_page(
    client: Any,
    request: dict[str, Any],
    start: dict[str, Any] | None,
    limit: int,
    cursor_fields: Sequence[str],
    per_query: Callable[[int], int] | None = None,
) -> tuple[list[Item], str | None]:
    """One page of a list: query on from `start` until one item more than `limit` is found (so a page that ends
    at the last item carries no cursor) or the results end. `per_query(found)` sets each query's Limit. Returns
    the page and the cursor of its last item; a start key the table refuses is a ValueError (a forged cursor)."""
    found: list[Item] = []
    while len(found) <= limit:
        if per_query is not None:
            request["Limit"] = per_query(len(found))
        if start:
            request["ExclusiveStartKey"] = start
        try:
            response = client.query(**request)
        except ParamValidationError as exc:  # a start key of the wrong shape, refused before it is sent
            if start:
                raise ValueError("cursor is not one this API returned") from exc
            raise
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "ValidationException" and start:
                raise ValueError("cursor is not one this API returned") from exc
            raise
        found += response.get("Items", [])
        start = response.get("LastEvaluatedKey")
        if not start:
            break
    page = found[:limit]
    key = {k: page[-1][k] for k in cursor_fields} if len(found) > limit and page else None
    return page, _encode_cursor(key)


def _outbox_values(entry: OutboxEntry, key: str) -> dict[str, Any]:
    """The values OUTBOX_SET refers to (besides `:empty` and `:now`, which every terminal write has)."""
    return {":ob": {"L": [outbox_entry_to_attribute(entry)]}, ":eshard": s(str(outbox_shard(key)))}


def _quota_key(tenant: str) -> dict[str, dict[str, str]]:
    return {"PK": s(f"TENANT#{tenant}"), "SK": s("QUOTA")}


def _quota_update(table: str, tenant: str, delta: int, limit: int | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {
        "TableName": table,
        "Key": _quota_key(tenant),
        "UpdateExpression": "ADD #active :d",
        "ExpressionAttributeNames": {"#active": "active"},
        "ExpressionAttributeValues": {":d": n(delta)},
    }
    if limit is not None:
        update["ConditionExpression"] = "attribute_not_exists(#active) OR #active < :limit"
        update["ExpressionAttributeValues"][":limit"] = n(limit)
    return {"Update": update}


class DynamoJobStore:
    def __init__(self, table_name: str, shard_count: int, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.shard_count = shard_count
        self.client: Any = client or boto3.client("dynamodb")

    def _timer_puts(self, timer: Timer | None, late: bool) -> list[dict[str, Any]]:
        if timer is None:
            return []
        puts = [{"Put": {"TableName": self.table, "Item": timer_item(timer, self.shard_count)}}]
        if late:
            puts.append({"Put": {"TableName": self.table, "Item": late_item(timer, self.shard_count)}})
        return puts

    def create(
        self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool, quota: int
    ) -> None:
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": job_to_item(job),
                    "ConditionExpression": "attribute_not_exists(PK)",
                }
            },
            _quota_update(self.table, job.tenant, 1, limit=quota),
            *self._timer_puts(timer, late),
        ]
        if idempotency is not None:
            items.append(
                {
                    "Put": {
                        "TableName": self.table,
                        "Item": {
                            "PK": s(f"IDEM#{idempotency.tenant}#{idempotency.key}"),
                            "SK": s("IDEM"),
                            "kind": s("idempotency"),
                            "request_hash": s(idempotency.request_hash),
                            "job_id": s(idempotency.job_id),
                            "expires_ms": n(to_ms(idempotency.expires_at)),
                            "expires_at": _epoch_seconds(idempotency.expires_at),
                        },
                        # TTL deletes lazily, so an expired record may still be there: it no longer counts.
                        "ConditionExpression": "attribute_not_exists(PK) OR expires_ms < :now",
                        "ExpressionAttributeValues": {":now": n(to_ms(job.created_at))},
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                }
            )
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = _cancellation_reasons(exc)
            if idempotency is not None and len(reasons) == len(items):
                reason = reasons[-1]
                if reason.get("Code") == "ConditionalCheckFailed":
                    old = reason.get("Item") or {}
                    if old.get("request_hash", {}).get("S") != idempotency.request_hash:
                        raise IdempotencyConflict(idempotency.key) from exc
                    raise IdempotentReplay(
                        IdempotencyRecord(
                            idempotency.tenant,
                            idempotency.key,
                            idempotency.request_hash,
                            old["job_id"]["S"],
                            from_ms(int(old["expires_ms"]["N"])),
                        )
                    ) from exc
            if len(reasons) > 1 and reasons[1].get("Code") == "ConditionalCheckFailed":
                raise QuotaExceeded(f"this tenant already has {quota} active or paused jobs") from exc
            raise

    def get(self, job_id: str) -> Job | None:
        response = self.client.get_item(
            TableName=self.table, Key={"PK": s(job_pk(job_id)), "SK": s("DEF")}, ConsistentRead=True
        )
        item = response.get("Item")
        return job_from_item(item) if item else None

    def list(
        self, tenant: str, state: JobState | None, limit: int, cursor: str | None
    ) -> tuple[builtins.list[Job], str | None]:
        """Oldest first from the keys-only by_tenant index, each page's jobs then read by key (eventually
        consistent: a job created a moment ago may be missing from a list for a moment; GET by id is always
        consistent). Reads one matching job ahead, so a page that ends at the tenant's last job carries no cursor."""
        partition = s(f"TENANT#{tenant}")
        start = _decode_cursor(cursor)
        if start is not None and start.get("tenant_pk") != partition:
            raise ValueError("cursor is not one this API returned for this caller")
        request: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_tenant",
            "KeyConditionExpression": "tenant_pk = :t",
            "ExpressionAttributeValues": {":t": partition},
        }
        found: builtins.list[tuple[Item, Job]] = []
        while len(found) <= limit:
            # A filtered list reads more per query: most jobs may not match.
            request["Limit"] = limit + 1 - len(found) if state is None else max(limit + 1, 25)
            if start:
                request["ExclusiveStartKey"] = start
            try:
                response = self.client.query(**request)
            except ParamValidationError as exc:
                if start:
                    raise ValueError("cursor is not one this API returned") from exc
                raise
            except ClientError as exc:
                if exc.response["Error"]["Code"] == "ValidationException" and start:
                    raise ValueError("cursor is not one this API returned") from exc
                raise
            keys = response.get("Items", [])
            items = self._get_many([{"PK": k["PK"], "SK": k["SK"]} for k in keys])
            for key in keys:
                item = items.get(key["PK"]["S"])
                if item is None:  # deleted since the index listed it
                    continue
                job = job_from_item(item)
                if state is None or job.state == state:
                    found.append((key, job))
            start = response.get("LastEvaluatedKey")
            if not start:
                break
        page = found[:limit]
        next_cursor = None
        if len(found) > limit and page:
            next_cursor = _encode_cursor({f: page[-1][0][f] for f in ("PK", "SK", "tenant_pk", "tenant_sk")})
        return [job for _, job in page], next_cursor

    def _get_many(self, keys: builtins.list[dict[str, Any]]) -> dict[str, Item]:
        """Items by key (BatchGetItem, 100 at a time, unprocessed keys retried), by PK."""
        out: dict[str, Item] = {}
        for begin in range(0, len(keys), 100):
            pending: dict[str, Any] = {self.table: {"Keys": keys[begin : begin + 100]}}
            for attempt in range(10):
                response = self.client.batch_get_item(RequestItems=pending)
                for item in response.get("Responses", {}).get(self.table, []):
                    out[item["PK"]["S"]] = item
                pending = response.get("UnprocessedKeys") or {}
                if not pending:
                    break
                time.sleep(min(1.0, 0.05 * 2**attempt))
            else:
                raise RuntimeError("BatchGetItem left keys unprocessed after 10 attempts")
        return out

    def replace(self, job: Job, previous: Job, timer: Timer | None, late: bool) -> None:
        # scheduler.core.chain.replace_allowed: same version, and the chain has not advanced since the read.
        condition, values = "#version = :v AND attribute_not_exists(adv_ms)", {":v": n(previous.version)}
        if previous.advanced_from is not None:
            condition, values[":adv"] = "#version = :v AND adv_ms = :adv", n(to_ms(previous.advanced_from))
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self.table,
                    "Item": job_to_item(job),
                    "ConditionExpression": condition,
                    "ExpressionAttributeNames": {"#version": "version"},
                    "ExpressionAttributeValues": values,
                }
            },
            *self._timer_puts(timer, late),
        ]
        delta = active_delta(previous, job)
        if delta:
            items.append(_quota_update(self.table, job.tenant, delta))
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "TransactionCanceledException":
                reasons = _cancellation_reasons(exc)
                if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                    raise VersionConflict(self.get(job.job_id)) from exc
            raise

    def advance(
        self,
        timer: Timer,
        next_run_at: datetime | None,
        dispatched_for: datetime,
        skipped: int,
        *,
        planned_at: datetime | None = None,
        planned_horizon: datetime | None = None,
        release_by: str | None = None,
    ) -> AdvanceResult:
        completing = next_run_at is None
        deferred_release = completing and release_by is not None
        names = {"#state": "state", "#version": "version", "#last": "last_ms", "#next": "next_ms"}
        values: dict[str, Any] = {
            ":v": n(timer.version),
            ":active": s(JobState.ACTIVE.value),
            ":sched": n(to_ms(timer.scheduled_for)),
            ":d": n(to_ms(dispatched_for)),
            ":new_state": s(JobState.COMPLETED.value if completing else JobState.ACTIVE.value),
            ":k": n(skipped),
        }
        sets = ["#last = :d", "#state = :new_state", "adv_ms = :sched", "plan_v = :v"]
        if next_run_at is not None:
            sets.append("#next = :n")
            values[":n"] = n(to_ms(next_run_at))
        if planned_at is not None and planned_horizon is not None:
            sets += ["plan_ms = :planned", "horizon_ms = :horizon"]
            values[":planned"] = n(to_ms(planned_at))
            values[":horizon"] = n(to_ms(planned_horizon))
        adds = ["misfire_skipped :k"]
        if deferred_release:
            adds.append("rel_done :mark")
            values[":mark"] = {"SS": [completion_mark(timer)]}
        expression = f"SET {', '.join(sets)} ADD {', '.join(adds)}" + (" REMOVE #next" if next_run_at is None else "")
        update: dict[str, Any] = {
            "TableName": self.table,
            "Key": {"PK": s(job_pk(timer.job_id)), "SK": s("DEF")},
            "UpdateExpression": expression,
            "ConditionExpression": (
                "#version = :v AND #state = :active AND (attribute_not_exists(#last) OR #last < :sched)"
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        try:
            if completing and not deferred_release:
                # The job stops counting against the tenant's quota in the same write that completes it.
                self.client.transact_write_items(
                    TransactItems=[{"Update": update}, _quota_update(self.table, timer.tenant, -1)]
                )
            else:
                self.client.update_item(**update)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "ConditionalCheckFailedException":
                old = _old_item(exc)
            elif code == "TransactionCanceledException":
                reasons = _cancellation_reasons(exc)
                if not reasons or reasons[0].get("Code") != "ConditionalCheckFailed":
                    raise
                old = reasons[0].get("Item")
            else:
                raise
            return already_advanced(job_from_item(old) if old else None, timer, dispatched_for, release_by)
        return AdvanceResult(True, True, JobState.ACTIVE, release=deferred_release)


def _bucket_pk(bucket: BucketId) -> str:
    return f"BUCKET#{minute_key(bucket.minute)}#{bucket.shard}"


def _due_pk(bucket: BucketId) -> str:
    return f"DUE#{minute_key(bucket.minute)}#{bucket.shard}"


def timer_item(timer: Timer, shard_count: int) -> Item:
    bucket = BucketId(minute_of(timer.due_at), shard_of(timer.job_id, shard_count))
    expires = max(timer.due_at, timer.scheduled_for) + TIMER_RETENTION
    return {
        "PK": s(_due_pk(bucket)),
        "SK": s(timer_sk(timer)),
        "expires_at": _epoch_seconds(expires),
        **timer_attributes(timer),
    }


def late_item(timer: Timer, shard_count: int) -> Item:
    return {
        "PK": s(f"LATE#{shard_of(timer.job_id, shard_count)}"),
        "SK": s(timer_sk(timer)),
        **timer_attributes(timer),
    }


class DynamoTimerStore:
    def __init__(self, table_name: str, shard_count: int, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.shard_count = shard_count
        self.client: Any = client or boto3.client("dynamodb")

    def bucket_of(self, timer: Timer) -> BucketId:
        return BucketId(minute_of(timer.due_at), shard_of(timer.job_id, self.shard_count))

    def put_timer(self, timer: Timer) -> None:
        self.client.put_item(TableName=self.table, Item=timer_item(timer, self.shard_count))

    def claim_bucket(
        self, bucket: BucketId, owner: str, now: datetime, lease_until: datetime
    ) -> BucketClaim | BucketBusy:
        try:
            response = self.client.update_item(
                TableName=self.table,
                Key={"PK": s(_bucket_pk(bucket)), "SK": s("BUCKET")},
                UpdateExpression=("SET sealed = :t, #owner = :o, lease_ms = :lease, expires_at = :exp ADD epoch :one"),
                ConditionExpression=(
                    "(attribute_not_exists(done) OR done = :f) AND (attribute_not_exists(#owner) OR lease_ms < :now)"
                ),
                ExpressionAttributeNames={"#owner": "owner"},
                ExpressionAttributeValues={
                    ":t": {"BOOL": True},
                    ":f": {"BOOL": False},
                    ":o": s(owner),
                    ":lease": n(to_ms(lease_until)),
                    ":now": n(to_ms(now)),
                    ":one": n(1),
                    ":exp": _epoch_seconds(bucket.minute + TIMER_RETENTION),
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not _condition_failed(exc):
                raise
            old = _old_item(exc) or {}
            return BucketBusy(done=bool(old.get("done", {}).get("BOOL", False)))
        item = response["Attributes"]
        return BucketClaim(bucket, owner, int(item["epoch"]["N"]), item.get("cursor", {}).get("S"))

    def has_timer(self, timer: Timer) -> bool:
        key = {k: v for k, v in timer_item(timer, self.shard_count).items() if k in ("PK", "SK")}
        response = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True, ProjectionExpression="PK")
        return "Item" in response

    def is_sealed(self, bucket: BucketId) -> bool:
        """The bucket's seal, read strongly consistent with the watermark: a minute behind the watermark counts
        as sealed even if no bucket item was ever written for it (it will never be swept again)."""
        bucket_key = {"PK": s(_bucket_pk(bucket)), "SK": s("BUCKET")}
        response = self.client.batch_get_item(
            RequestItems={self.table: {"Keys": [bucket_key, WATERMARK_KEY], "ConsistentRead": True}}
        )
        items = response["Responses"].get(self.table, [])
        for item in items:
            if item["PK"]["S"] == bucket_key["PK"]["S"]:
                return bool(item.get("sealed", {}).get("BOOL", False))
        for item in items:
            if item["PK"]["S"] == "WATERMARK":
                return to_ms(bucket.minute) < int(item["minute_ms"]["N"])
        # Unread (UnprocessedKeys) counts as sealed: dispatching directly is always safe, the ledger absorbs it.
        return bool(response.get("UnprocessedKeys"))

    def timers(self, bucket: BucketId, after: str | None) -> Iterator[tuple[list[Timer], str]]:
        start: dict[str, Any] | None = None
        while True:
            request: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "PK = :pk" + (" AND SK > :after" if after else ""),
                "ExpressionAttributeValues": {":pk": s(_due_pk(bucket))},
                "ConsistentRead": True,
                "Limit": TIMER_PAGE_SIZE,
            }
            if after:
                request["ExpressionAttributeValues"][":after"] = s(after)
            if start:
                request["ExclusiveStartKey"] = start
            response = self.client.query(**request)
            items = response.get("Items", [])
            if items:
                yield [timer_from_item(i) for i in items], items[-1]["SK"]["S"]
            start = response.get("LastEvaluatedKey")
            if not start:
                return

    def _held_request(self, claim: BucketClaim, expression: str, values: dict[str, Any]) -> dict[str, Any]:
        """An update of the bucket item conditional on the claim still being held."""
        return {
            "TableName": self.table,
            "Key": {"PK": s(_bucket_pk(claim.bucket)), "SK": s("BUCKET")},
            "UpdateExpression": expression,
            "ConditionExpression": "epoch = :e AND #owner = :o AND (attribute_not_exists(done) OR done = :f)",
            "ExpressionAttributeNames": {
                "#owner": "owner",
                **({"#cursor": "cursor"} if "#cursor" in expression else {}),
            },
            "ExpressionAttributeValues": {":e": n(claim.epoch), ":o": s(claim.owner), ":f": {"BOOL": False}, **values},
        }

    def upcoming(self, minute: datetime) -> list[Timer]:
        """One eventually consistent query per shard (half the read units of the sweep's strongly consistent ones)."""
        found: list[Timer] = []
        for shard in range(self.shard_count):
            request = {
                "TableName": self.table,
                "KeyConditionExpression": "PK = :pk",
                "ExpressionAttributeValues": {":pk": s(_due_pk(BucketId(minute, shard)))},
            }
            for items in _query_pages(self.client, request):
                found += [timer_from_item(item) for item in items]
        return found

    def _held_update(self, claim: BucketClaim, expression: str, values: dict[str, Any]) -> None:
        try:
            self.client.update_item(**self._held_request(claim, expression, values))
        except ClientError as exc:
            if _condition_failed(exc):
                raise ClaimLost(_bucket_pk(claim.bucket)) from exc
            raise

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        expression = "SET #cursor = :c, lease_ms = :lease"
        values = {":c": s(cursor), ":lease": n(to_ms(lease_until))}
        owed = {tenant: count for tenant, count in (releases or {}).items() if count}
        if not owed:
            self._held_update(claim, expression, values)
            return
        # The page's quota releases go with its checkpoint, in one transaction: the checkpoint's condition (the
        # claim still held) decides both, so a page re-run after a crash releases them exactly once.
        if len(owed) >= MAX_TRANSACTION_ITEMS:
            raise ValueError(f"a page released the quota of {len(owed)} tenants; at most {MAX_TRANSACTION_ITEMS - 1}")
        update = {"Update": self._held_request(claim, expression, values)}
        items = [update, *(_quota_update(self.table, tenant, -count) for tenant, count in sorted(owed.items()))]
        try:
            self.client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if exc.response["Error"]["Code"] == "TransactionCanceledException":
                reasons = _cancellation_reasons(exc)
                if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                    raise ClaimLost(_bucket_pk(claim.bucket)) from exc
            raise

    def release(self, claim: BucketClaim) -> None:
        self._held_update(claim, "REMOVE #owner, lease_ms", {})

    def complete_bucket(self, claim: BucketClaim, expire_after: datetime) -> None:
        self._held_update(
            claim,
            "SET done = :t, expires_at = :exp",
            {":t": {"BOOL": True}, ":exp": _epoch_seconds(expire_after)},
        )

    def watermark(self) -> datetime | None:
        response = self.client.get_item(TableName=self.table, Key=WATERMARK_KEY, ConsistentRead=True)
        item = response.get("Item")
        return from_ms(int(item["minute_ms"]["N"])) if item else None

    def init_watermark(self, minute: datetime) -> datetime:
        try:
            self.client.put_item(
                TableName=self.table,
                Item={**WATERMARK_KEY, "minute_ms": n(to_ms(minute)), "minute": s(rfc3339(minute))},
                ConditionExpression="attribute_not_exists(PK)",
            )
        except ClientError as exc:
            if not _condition_failed(exc):
                raise
        current = self.watermark()
        assert current is not None
        return current

    def advance_watermark(self, minute: datetime) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=WATERMARK_KEY,
                UpdateExpression="SET minute_ms = :m, #minute = :label",
                ConditionExpression="attribute_not_exists(minute_ms) OR minute_ms < :m",
                ExpressionAttributeNames={"#minute": "minute"},
                ExpressionAttributeValues={":m": n(to_ms(minute)), ":label": s(rfc3339(minute))},
            )
        except ClientError as exc:
            if not _condition_failed(exc):
                raise

    def put_late(self, timer: Timer) -> None:
        self.client.put_item(TableName=self.table, Item=late_item(timer, self.shard_count))

    def late_timers(self, limit: int) -> list[Timer]:
        # Each shard is ordered by fire_at; the oldest `limit` overall are among the oldest `limit` of each shard.
        found: list[Timer] = []
        for shard in range(self.shard_count):
            request: dict[str, Any] = {
                "TableName": self.table,
                "KeyConditionExpression": "PK = :pk",
                "ExpressionAttributeValues": {":pk": s(f"LATE#{shard}")},
                "ConsistentRead": True,
            }
            in_shard = 0
            while in_shard < limit:
                request["Limit"] = min(PAGE_SIZE, limit - in_shard)
                response = self.client.query(**request)
                items = response.get("Items", [])
                found += [timer_from_item(i) for i in items]
                in_shard += len(items)
                if not response.get("LastEvaluatedKey"):
                    break
                request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return sorted(found, key=lambda t: t.slot)[:limit]

    def remove_late(self, timer: Timer) -> None:
        key = late_item(timer, self.shard_count)
        self.client.delete_item(TableName=self.table, Key={"PK": key["PK"], "SK": key["SK"]})


class DynamoLedger:
    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    def claim(
        self,
        dispatch: Dispatch,
        owner: str,
        now: datetime,
        lease_until: datetime,
        take_over_expired: bool,
        indexed: bool = True,
    ) -> Execution:
        condition = (
            "attribute_not_exists(PK) OR (#state = :retry AND (attribute_not_exists(next_ms) OR next_ms <= :now))"
        )
        if take_over_expired:
            condition += " OR (#state = :running AND lease_ms < :now)"
        values: dict[str, Any] = {
            ":running": s(RunState.RUNNING.value),
            ":retry": s(RunState.RETRY_WAIT.value),
            ":now": n(to_ms(now)),
            ":owner": s(owner),
            ":lease": n(to_ms(lease_until)),
            ":one": n(1),
            ":tenant": s(dispatch.tenant),
            ":sfor": s(rfc3339(dispatch.scheduled_for)),
            ":exp": _epoch_seconds(now + EXECUTION_RETENTION),
        }
        # The run-history index is keyed on job_id and scheduled_ms: an item without them stays out of it (both are
        # in the occurrence key, which is where the codec reads them from then).
        index_keys = ""
        if indexed:
            index_keys = "job_id = :job, scheduled_ms = :sched, "
            values[":job"] = s(dispatch.job_id)
            values[":sched"] = n(to_ms(dispatch.scheduled_for))
        try:
            response = self.client.update_item(
                TableName=self.table,
                Key={"PK": s(dispatch.key)},
                UpdateExpression=(
                    "SET #state = :running, #owner = :owner, lease_ms = :lease, updated_ms = :now, "
                    f"{index_keys}tenant = :tenant, scheduled_for = :sfor, "
                    "created_ms = if_not_exists(created_ms, :now), "
                    "expires_at = :exp "
                    "ADD epoch :one, attempts :one "
                    "REMOVE next_ms"
                ),
                ConditionExpression=condition,
                ExpressionAttributeNames={"#state": "state", "#owner": "owner"},
                ExpressionAttributeValues=values,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not _condition_failed(exc):
                raise
            old = _old_item(exc)
            raise ClaimRefused(execution_from_item(old) if old else None) from exc
        return execution_from_item(response["Attributes"])

    def get(self, key: str) -> Execution | None:
        response = self.client.get_item(TableName=self.table, Key={"PK": s(key)}, ConsistentRead=True)
        item = response.get("Item")
        return execution_from_item(item) if item else None

    def heartbeat(self, key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        try:
            self.client.update_item(
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
            if _condition_failed(exc):
                raise LeaseLost(key) from exc
            raise

    def finish(
        self,
        key: str,
        owner: str,
        epoch: int,
        state: RunState,
        now: datetime,
        *,
        result: str | None = None,
        error: str | None = None,
        next_attempt_at: datetime | None = None,
        refund_attempt: bool = False,
        announce: bool = True,
    ) -> Execution:
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
        if next_attempt_at is not None:
            sets.append("next_ms = :next")
            values[":next"] = n(to_ms(next_attempt_at))
        else:
            removes.append("next_ms")
        if state.terminal:
            sets.append("finished_ms = :now")
        if state.terminal and announce:
            sets.append(OUTBOX_SET)
            values.update(_outbox_values(outbox_entry(key, epoch, state, now, error=error, result=result), key))
        adds = ""
        if refund_attempt:
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
            if _condition_failed(exc):
                raise Fenced(key) from exc
            raise
        return execution_from_item(response["Attributes"])

    def record_unclaimed(self, dispatch: Dispatch, state: RunState, now: datetime, reason: str) -> bool:
        try:
            self.client.put_item(
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
                    "expires_at": _epoch_seconds(now + EXECUTION_RETENTION),
                    "outbox": {
                        "L": [outbox_entry_to_attribute(outbox_entry(dispatch.key, 0, state, now, error=reason))]
                    },
                    "event_pending": s(str(outbox_shard(dispatch.key))),
                    "event_ms": n(to_ms(now)),
                },
                ConditionExpression="attribute_not_exists(PK)",
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def expire_to(
        self, key: str, epoch: int, state: RunState, now: datetime, reason: str, *, announce: bool = True
    ) -> bool:
        outbox = _outbox_values(outbox_entry(key, epoch, state, now, error=reason), key) if announce else {}
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"PK": s(key)},
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
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def mark_dead_lettered(self, key: str) -> None:
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"PK": s(key)},
                UpdateExpression="SET dead_lettered = :t",
                ConditionExpression="attribute_exists(PK)",
                ExpressionAttributeValues={":t": {"BOOL": True}},
            )
        except ClientError as exc:
            if not _condition_failed(exc):
                raise  # an unknown key has nothing to mark

    def revive(self, key: str, now: datetime, note: str) -> bool:
        current = self.get(key)
        epoch = current.epoch if current else 0
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"PK": s(key)},
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
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def runs(
        self, job_id: str, limit: int, cursor: str | None, unindexed: str | None = None
    ) -> tuple[list[Execution], str | None]:
        request: dict[str, Any] = {
            "TableName": self.table,
            "IndexName": "by_job",
            "KeyConditionExpression": "job_id = :j",
            "ExpressionAttributeValues": {":j": s(job_id)},
            "ScanIndexForward": False,
            "Limit": limit + 1,  # one ahead, so a page that ends at the last run carries no cursor
        }
        start = _decode_cursor(cursor)
        if start and start.get("job_id") != s(job_id):
            raise ValueError("cursor is not one this API returned for this job")
        page, next_cursor = _query_page(self.client, request, start, limit, ("PK", "job_id", "scheduled_ms"))
        runs = [execution_from_item(i) for i in page]
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
            next_cursor = _encode_cursor(key)
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
            if _condition_failed(exc):
                old = _old_item(exc)
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
            for items in _query_pages(self.client, request):
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
        try:
            self.client.update_item(
                TableName=self.table,
                Key={"PK": s(key)},
                UpdateExpression="REMOVE #ob, event_pending, event_ms",
                ConditionExpression=f"size(#ob) = :n AND #ob[{last}].#eid = :eid",
                ExpressionAttributeNames={"#ob": "outbox", "#eid": "eid"},
                ExpressionAttributeValues={":n": n(len(published)), ":eid": s(published[-1].event_id)},
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True


class DynamoBackfillStore:
    """Backfills in the jobs table: `PK=BACKFILL`, `SK={backfill_id}` (ids sort by creation). Few and short-lived,
    so one partition; finished ones expire by TTL after BACKFILL_RETENTION."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    def _key(self, backfill_id: str) -> dict[str, Any]:
        return {"PK": s(BACKFILL_PK), "SK": s(backfill_id)}

    def create(self, backfill: Backfill) -> None:
        self.client.put_item(
            TableName=self.table, Item=backfill_to_item(backfill), ConditionExpression="attribute_not_exists(PK)"
        )

    def get(self, backfill_id: str) -> Backfill | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(backfill_id), ConsistentRead=True).get("Item")
        return backfill_from_item(item) if item else None

    def for_job(self, job_id: str, limit: int, cursor: str | None) -> tuple[builtins.list[Backfill], str | None]:
        """Newest first, strongly consistent. Every job's backfills share the partition, so this filters on the job
        and queries on until it holds one more than `limit` or the partition ends: a page that ends at the job's
        oldest backfill carries no cursor. The cursor names the job, so it cannot page through another job's."""
        start: dict[str, Any] | None = None
        given = _decode_cursor(cursor)
        if given is not None:
            sort_key = given.get("SK")
            if (
                set(given) != {"PK", "SK", "job_id"}
                or given["PK"] != s(BACKFILL_PK)
                or given["job_id"] != s(job_id)
                or not (isinstance(sort_key, dict) and set(sort_key) == {"S"} and isinstance(sort_key["S"], str))
                or not sort_key["S"]
            ):
                raise ValueError("cursor is not one this API returned for this job")
            start = {"PK": given["PK"], "SK": sort_key}
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk",
            "FilterExpression": "job_id = :job",
            "ExpressionAttributeValues": {":pk": s(BACKFILL_PK), ":job": s(job_id)},
            "ScanIndexForward": False,
            "ConsistentRead": True,
            "Limit": max(limit + 1, PAGE_SIZE),  # items read per query, before the filter
        }
        page, next_cursor = _query_page(self.client, request, start, limit, ("PK", "SK", "job_id"))
        return [backfill_from_item(item) for item in page], next_cursor

    def running(self, limit: int) -> builtins.list[Backfill]:
        found: builtins.list[Backfill] = []
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk",
            "FilterExpression": "#state = :running",
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": {":pk": s(BACKFILL_PK), ":running": s(BackfillState.RUNNING.value)},
            "ConsistentRead": True,
        }
        for items in _query_pages(self.client, request):
            found += [backfill_from_item(i) for i in items]
            if len(found) >= limit:
                break
        return found[:limit]

    def advance(self, backfill: Backfill, cursor: datetime, dispatched: int, done: bool, now: datetime) -> bool:
        values: dict[str, Any] = {
            ":cursor": n(to_ms(cursor)),
            ":dispatched": n(dispatched),
            ":one": n(1),
            ":now": n(to_ms(now)),
            ":running": s(BackfillState.RUNNING.value),
            ":state": s((BackfillState.COMPLETED if done else BackfillState.RUNNING).value),
        }
        expression = "SET cursor_ms = :cursor, dispatched = :dispatched, updated_ms = :now, #state = :state"
        if done:
            expression += ", expires_at = :exp"
            values[":exp"] = _epoch_seconds(now + BACKFILL_RETENTION)
        condition = "#state = :running AND "
        if backfill.cursor is None:
            condition += "attribute_not_exists(cursor_ms)"
        else:
            condition += "cursor_ms = :old"
            values[":old"] = n(to_ms(backfill.cursor))
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self._key(backfill.backfill_id),
                UpdateExpression=expression + " ADD waves :one",
                ConditionExpression=condition,
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def finish(self, backfill: Backfill, state: BackfillState, now: datetime) -> Backfill | None:
        try:
            response = self.client.update_item(
                TableName=self.table,
                Key=self._key(backfill.backfill_id),
                UpdateExpression="SET #state = :state, updated_ms = :now, expires_at = :exp",
                ConditionExpression="#state = :running",
                ExpressionAttributeNames={"#state": "state"},
                ExpressionAttributeValues={
                    ":state": s(state.value),
                    ":now": n(to_ms(now)),
                    ":exp": _epoch_seconds(now + BACKFILL_RETENTION),
                    ":running": s(BackfillState.RUNNING.value),
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if _condition_failed(exc):
                old = _old_item(exc)
                return backfill_from_item(old) if old else None
            raise
        return backfill_from_item(response["Attributes"])


class DynamoTenantBudgets:
    """Each tenant's dispatch-budget calendar in the jobs table: `PK=TENANT#{tenant}`, `SK=BUDGET`, next to the
    tenant's quota counter; `slots` maps a window index to the releases booked in it. Replaced with a conditional
    write on `version`, so concurrent sweepers never both fill the same window; an idle tenant's item expires."""

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    @staticmethod
    def _key(tenant: str) -> dict[str, Any]:
        return {"PK": s(f"TENANT#{tenant}"), "SK": s("BUDGET")}

    def load(self, tenant: str) -> BudgetCalendar | None:
        item = self.client.get_item(TableName=self.table, Key=self._key(tenant), ConsistentRead=True).get("Item")
        if not item:
            return None
        slots = {int(window): int(count["N"]) for window, count in item.get("slots", {}).get("M", {}).items()}
        return BudgetCalendar(int(item["version"]["N"]), int(item["window_ms"]["N"]), slots)

    def save(self, tenant: str, calendar: BudgetCalendar, expected: int | None, expires: datetime) -> bool:
        item = {
            **self._key(tenant),
            "version": n(calendar.version),
            "window_ms": n(calendar.window_ms),
            "slots": {"M": {str(window): n(count) for window, count in calendar.slots.items()}},
            "expires_at": _epoch_seconds(expires),
        }
        request: dict[str, Any] = {"TableName": self.table, "Item": item}
        if expected is None:
            request["ConditionExpression"] = "attribute_not_exists(PK)"
        else:
            request["ConditionExpression"] = "#version = :v"
            request["ExpressionAttributeNames"] = {"#version": "version"}
            request["ExpressionAttributeValues"] = {":v": n(expected)}
        try:
            self.client.put_item(**request)
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True


class DynamoTenantSlots:
    """Each tenant's execution slots in the jobs table: `PK=TENANT#{tenant}`, `SK=SLOT#{n:05d}`, next to its quota
    counter and budget calendar, so one query reads them all. A slot item exists while it is held (or until its
    dead holder's lease ends): taking one is a conditional put (absent, or its lease ended), releasing it a
    conditional delete (still ours). Every holder's item expires by TTL a day after its lease, whatever happens."""

    #: Free slots tried (in random order, so concurrent workers spread out) before the tenant counts as full.
    ATTEMPTS = 3

    def __init__(self, table_name: str, client: DynamoDBClient | None = None) -> None:
        self.table = table_name
        self.client: Any = client or boto3.client("dynamodb")

    @staticmethod
    def _key(tenant: str, slot: int) -> dict[str, Any]:
        return {"PK": s(f"TENANT#{tenant}"), "SK": s(f"SLOT#{slot:05d}")}

    def _held(self, tenant: str, now: datetime) -> dict[int, int]:
        """Slot -> lease end (epoch ms) of every live holder."""
        request: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "PK = :pk AND begins_with(SK, :slot)",
            "ExpressionAttributeValues": {":pk": s(f"TENANT#{tenant}"), ":slot": s("SLOT#")},
            "ProjectionExpression": "SK, lease_until",
            "ConsistentRead": True,
        }
        held: dict[int, int] = {}
        for items in _query_pages(self.client, request):
            for item in items:
                until = int(item["lease_until"]["N"])
                if until >= to_ms(now):
                    held[int(item["SK"]["S"].removeprefix("SLOT#"))] = until
        return held

    def acquire(self, tenant: str, limit: int, holder: str, now: datetime, lease_until: datetime) -> int | None:
        held = self._held(tenant, now)
        if len(held) >= limit:
            return None
        free = [slot for slot in range(limit) if slot not in held]
        random.shuffle(free)
        for slot in free[: self.ATTEMPTS]:
            try:
                self.client.put_item(
                    TableName=self.table,
                    Item={
                        **self._key(tenant, slot),
                        "holder": s(holder),
                        "lease_until": n(to_ms(lease_until)),
                        "expires_at": _epoch_seconds(lease_until + timedelta(days=1)),
                    },
                    ConditionExpression="attribute_not_exists(PK) OR lease_until < :now",
                    ExpressionAttributeValues={":now": n(to_ms(now))},
                )
            except ClientError as exc:
                if _condition_failed(exc):
                    continue  # another worker took it since the query
                raise
            return slot
        return None

    def extend(self, tenant: str, slot: int, holder: str, lease_until: datetime) -> bool:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=self._key(tenant, slot),
                UpdateExpression="SET lease_until = :until, expires_at = :exp",
                ConditionExpression="holder = :holder",
                ExpressionAttributeValues={
                    ":holder": s(holder),
                    ":until": n(to_ms(lease_until)),
                    ":exp": _epoch_seconds(lease_until + timedelta(days=1)),
                },
            )
        except ClientError as exc:
            if _condition_failed(exc):
                return False
            raise
        return True

    def release(self, tenant: str, slot: int, holder: str) -> None:
        try:
            self.client.delete_item(
                TableName=self.table,
                Key=self._key(tenant, slot),
                ConditionExpression="holder = :holder",
                ExpressionAttributeValues={":holder": s(holder)},
            )
        except ClientError as exc:
            if not _condition_failed(exc):
                raise
