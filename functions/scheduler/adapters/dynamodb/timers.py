"""The timer store in the jobs table: due timers by minute bucket and shard, bucket claims, the watermark and
the late lane."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from scheduler.adapters.codec import Item, n, s, timer_attributes, timer_from_item, timer_sk
from scheduler.adapters.dynamodb.common import (
    MAX_TRANSACTION_ITEMS,
    PAGE_SIZE,
    TIMER_PAGE_SIZE,
    condition_failed,
    epoch_seconds,
    first_write_refused,
    get_many,
    old_item,
    query_pages,
    quota_update,
    transact,
)
from scheduler.core.errors import ClaimLost
from scheduler.core.model.keys import shard_of
from scheduler.core.model.timefmt import from_ms, minute_key, minute_of, rfc3339, to_ms
from scheduler.core.ports import BucketBusy, BucketClaim, BucketId, Timer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

TIMER_RETENTION = timedelta(days=2)
#: Queries `upcoming` makes at once (the forecast reads every shard of every minute of its window).
UPCOMING_READERS = 16
WATERMARK_KEY = {"PK": s("WATERMARK"), "SK": s("WATERMARK")}


def record_shards(client: Any, table: str, shard_count: int) -> None:
    """Record `shard_count` in the watermark item before a writer's first timer or late-lane write with it
    (docs/design.md §3.3): into `counts`, every count ever written with (where a reader looks for a timer a writer of
    another count put), and into `shards`, the most of them (grow-only: what the sweeps sweep). One write when the
    item already holds a count as high; a second, conditional one raises `shards`."""
    response = client.update_item(
        TableName=table,
        Key=WATERMARK_KEY,
        UpdateExpression="ADD #counts :c",
        ExpressionAttributeNames={"#counts": "counts"},
        ExpressionAttributeValues={":c": {"NS": [str(shard_count)]}},
        ReturnValues="ALL_NEW",
    )
    if int(response.get("Attributes", {}).get("shards", {}).get("N", 0)) >= shard_count:
        return
    try:
        client.update_item(
            TableName=table,
            Key=WATERMARK_KEY,
            UpdateExpression="SET shards = :n",
            ConditionExpression="attribute_not_exists(shards) OR shards < :n",
            ExpressionAttributeValues={":n": n(shard_count)},
        )
    except ClientError as exc:
        if not condition_failed(exc):
            raise


class ShardCountRecord:
    """A process's record of its shard count (`record_shards`), made once before its first timer or late-lane write
    and shared by the stores that write them (the job store's transactions and the timer store)."""

    def __init__(self, client: Any, table: str, shard_count: int) -> None:
        self.client, self.table, self.shard_count = client, table, shard_count
        self.done = False
        self._lock = threading.Lock()

    def ensure(self) -> None:
        if self.done:
            return
        with self._lock:
            if not self.done:
                record_shards(self.client, self.table, self.shard_count)
                self.done = True


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
        "expires_at": epoch_seconds(expires),
        **timer_attributes(timer),
    }


def late_item(timer: Timer, shard_count: int) -> Item:
    return {
        "PK": s(f"LATE#{shard_of(timer.job_id, shard_count)}"),
        "SK": s(timer_sk(timer)),
        **timer_attributes(timer),
    }


class DynamoTimerStore:
    def __init__(
        self,
        table_name: str,
        shard_count: int,
        client: DynamoDBClient | None = None,
        page_size: int = TIMER_PAGE_SIZE,
        shard_record: ShardCountRecord | None = None,
    ) -> None:
        if not 1 <= page_size <= TIMER_PAGE_SIZE:
            raise ValueError(f"a page of timers holds 1-{TIMER_PAGE_SIZE} (one transaction with its checkpoint)")
        self.table = table_name
        self.shard_count = shard_count
        self.client: Any = client or boto3.client("dynamodb")
        #: Timers a page reads (and its checkpoint's transaction writes): the most a transaction holds, less the
        #: checkpoint; smaller only where a test wants many pages of few timers.
        self.page_size = page_size
        #: Its shard count's record, made before its first write (shared with the job store of the same process).
        self.shard_record = shard_record or ShardCountRecord(self.client, table_name, shard_count)
        #: The keys of the late-lane items `late_timers` read, by timer (`remove_late` deletes what was read).
        self._late_keys: dict[str, Item] = {}

    def bucket_of(self, timer: Timer) -> BucketId:
        return BucketId(minute_of(timer.due_at), shard_of(timer.job_id, self.shard_count))

    def _record_shards(self) -> None:
        self.shard_record.ensure()

    def recorded_shards(self) -> int:
        response = self.client.get_item(
            TableName=self.table, Key=WATERMARK_KEY, ConsistentRead=True, ProjectionExpression="shards"
        )
        return int(response.get("Item", {}).get("shards", {}).get("N", 0))

    def put_timer(self, timer: Timer) -> None:
        self._record_shards()
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
                    ":exp": epoch_seconds(bucket.minute + TIMER_RETENTION),
                },
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
            old = old_item(exc) or {}
            return BucketBusy(done=bool(old.get("done", {}).get("BOOL", False)))
        item = response["Attributes"]
        return BucketClaim(bucket, owner, int(item["epoch"]["N"]), item.get("cursor", {}).get("S"))

    def has_timer(self, timer: Timer) -> bool:
        key = {k: v for k, v in timer_item(timer, self.shard_count).items() if k in ("PK", "SK")}
        response = self.client.get_item(TableName=self.table, Key=key, ConsistentRead=True, ProjectionExpression="PK")
        if "Item" in response:
            return True
        # A writer deployed with another shard count put it in that count's bucket: look there too (rare: only
        # when the timer is not where this store would have put it).
        marks = self.client.get_item(
            TableName=self.table,
            Key=WATERMARK_KEY,
            ConsistentRead=True,
            ProjectionExpression="#counts",
            ExpressionAttributeNames={"#counts": "counts"},
        ).get("Item", {})
        others = {int(c) for c in marks.get("counts", {}).get("NS", [])} - {self.shard_count}
        keys = [{k: v for k, v in timer_item(timer, count).items() if k in ("PK", "SK")} for count in sorted(others)]
        return bool(keys) and bool(get_many(self.client, self.table, keys, consistent=True))

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
                return "minute_ms" in item and to_ms(bucket.minute) < int(item["minute_ms"]["N"])
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
                "Limit": self.page_size,
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

    def upcoming(self, minute: datetime, recorded: int | None = None) -> list[Timer]:
        """One eventually consistent query per shard (half the read units of the sweep's strongly consistent ones), of
        every shard a writer recorded, `UPCOMING_READERS` at a time: a herd's hundreds of shards are read in about
        the time of a few dozen queries, not of all of them one after another."""

        def read(shard: int) -> list[Timer]:
            request = {
                "TableName": self.table,
                "KeyConditionExpression": "PK = :pk",
                "ExpressionAttributeValues": {":pk": s(_due_pk(BucketId(minute, shard)))},
            }
            return [timer_from_item(item) for items in query_pages(self.client, request) for item in items]

        shards = max(self.shard_count, self.recorded_shards() if recorded is None else recorded)
        if shards == 1:
            return read(0)
        with ThreadPoolExecutor(max_workers=min(UPCOMING_READERS, shards), thread_name_prefix="upcoming") as pool:
            return [timer for found in pool.map(read, range(shards)) for timer in found]

    def _held_update(self, claim: BucketClaim, expression: str, values: dict[str, Any]) -> None:
        try:
            self.client.update_item(**self._held_request(claim, expression, values))
        except ClientError as exc:
            if condition_failed(exc):
                raise ClaimLost(_bucket_pk(claim.bucket)) from exc
            raise

    def checkpoint(
        self, claim: BucketClaim, cursor: str, lease_until: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        self._progress(
            claim, "SET #cursor = :c, lease_ms = :lease", {":lease": n(to_ms(lease_until))}, cursor, releases
        )

    def finish_bucket(
        self, claim: BucketClaim, cursor: str, expire_after: datetime, releases: Mapping[str, int] | None = None
    ) -> None:
        values = {":t": {"BOOL": True}, ":exp": epoch_seconds(expire_after)}
        self._progress(claim, "SET #cursor = :c, done = :t, expires_at = :exp", values, cursor, releases)

    def _progress(
        self,
        claim: BucketClaim,
        expression: str,
        values: dict[str, Any],
        cursor: str,
        releases: Mapping[str, int] | None,
    ) -> None:
        """A held write of the bucket's cursor (and `expression`'s other attributes), with the page's quota
        releases in the same transaction when it has any."""
        values = {":c": s(cursor), **values}
        owed = {tenant: count for tenant, count in (releases or {}).items() if count}
        if not owed:
            self._held_update(claim, expression, values)
            return
        # The page's quota releases go with its checkpoint, in one transaction: the checkpoint's condition (the
        # claim still held) decides both, so a page re-run after a crash releases them exactly once.
        if len(owed) >= MAX_TRANSACTION_ITEMS:
            raise ValueError(f"a page released the quota of {len(owed)} tenants; at most {MAX_TRANSACTION_ITEMS - 1}")
        update = {"Update": self._held_request(claim, expression, values)}
        items = [update, *(quota_update(self.table, tenant, -count) for tenant, count in sorted(owed.items()))]
        try:
            transact(self.client, items)
        except ClientError as exc:
            if first_write_refused(exc):
                raise ClaimLost(_bucket_pk(claim.bucket)) from exc
            raise

    def release(self, claim: BucketClaim) -> None:
        self._held_update(claim, "REMOVE #owner, lease_ms", {})

    def complete_bucket(self, claim: BucketClaim, expire_after: datetime) -> None:
        self._held_update(
            claim,
            "SET done = :t, expires_at = :exp",
            {":t": {"BOOL": True}, ":exp": epoch_seconds(expire_after)},
        )

    def watermark(self) -> datetime | None:
        response = self.client.get_item(TableName=self.table, Key=WATERMARK_KEY, ConsistentRead=True)
        item = response.get("Item") or {}
        # The item may hold the recorded shard count alone (a writer came before the first sweep).
        return from_ms(int(item["minute_ms"]["N"])) if "minute_ms" in item else None

    def init_watermark(self, minute: datetime) -> datetime:
        try:
            self.client.update_item(
                TableName=self.table,
                Key=WATERMARK_KEY,
                UpdateExpression="SET minute_ms = :m, #minute = :label",
                ConditionExpression="attribute_not_exists(minute_ms)",
                ExpressionAttributeNames={"#minute": "minute"},
                ExpressionAttributeValues={":m": n(to_ms(minute)), ":label": s(rfc3339(minute))},
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise
        current = self.watermark()
        assert current is not None
        return current

    def advance_watermark(self, minute: datetime, swept_shards: int | None = None) -> None:
        swept = self.shard_count if swept_shards is None else swept_shards
        try:
            self.client.update_item(
                TableName=self.table,
                Key=WATERMARK_KEY,
                UpdateExpression="SET minute_ms = :m, #minute = :label",
                ConditionExpression=(
                    "(attribute_not_exists(minute_ms) OR minute_ms < :m) AND (attribute_not_exists(shards) OR "
                    "shards <= :swept)"
                ),
                ExpressionAttributeNames={"#minute": "minute"},
                ExpressionAttributeValues={
                    ":m": n(to_ms(minute)),
                    ":label": s(rfc3339(minute)),
                    ":swept": n(swept),
                },
            )
        except ClientError as exc:
            if not condition_failed(exc):
                raise

    def put_late(self, timer: Timer) -> None:
        self._record_shards()
        self.client.put_item(TableName=self.table, Item=late_item(timer, self.shard_count))

    def late_timers(self, limit: int, shards: int | None = None) -> list[Timer]:
        # Each shard is ordered by fire_at; the oldest `limit` overall are among the oldest `limit` of each shard.
        found: list[Timer] = []
        for shard in range(self.shard_count if shards is None else shards):
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
                for item in items:
                    timer = timer_from_item(item)
                    # Where it lies: a writer of another shard count may have put it in another late shard.
                    self._late_keys[timer.place] = {"PK": item["PK"], "SK": item["SK"]}
                    found.append(timer)
                in_shard += len(items)
                if not response.get("LastEvaluatedKey"):
                    break
                request["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return sorted(found, key=lambda t: t.place)[:limit]

    def remove_late(self, timer: Timer) -> None:
        key = self._late_keys.pop(timer.place, None) or late_item(timer, self.shard_count)
        self.client.delete_item(TableName=self.table, Key={"PK": key["PK"], "SK": key["SK"]})
