"""The job store in the jobs table: job definitions, idempotency records and the tenant quota counter."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from scheduler.adapters.codec import (
    JOB_LISTING_ATTRIBUTES,
    JOB_OPTIONAL_ATTRIBUTES,
    Item,
    external_id_item,
    external_id_key,
    job_from_item,
    job_list_item,
    job_pk,
    job_to_item,
    label_item,
    label_pk,
    label_sk,
    n,
    s,
)
from scheduler.adapters.dynamodb.common import (
    cancellation_reasons,
    epoch_seconds,
    first_write_refused,
    old_item,
    quota_update,
    transact,
)
from scheduler.adapters.dynamodb.job_list import DynamoJobList
from scheduler.adapters.dynamodb.timers import ShardCountRecord, late_item, timer_item
from scheduler.core.errors import (
    ExternalIdTaken,
    IdempotencyConflict,
    IdempotentReplay,
    QuotaExceeded,
    VersionConflict,
)
from scheduler.core.jobs.chain import active_delta, already_advanced, completion_mark
from scheduler.core.model.job import ALL_JOBS, Job, JobQuery, JobState, payload_size
from scheduler.core.model.labels import label_entries
from scheduler.core.model.timefmt import from_ms, to_ms
from scheduler.core.ports import Advance, AdvanceResult, IdempotencyRecord, NewJob, Timer

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

log = logging.getLogger(__name__)

#: TransactWriteItems takes at most 100 writes and 4 MB; a batch's transactions stay under both.
MAX_TRANSACTION_WRITES = 100
MAX_TRANSACTION_BYTES = 3 * 1024 * 1024


class DynamoJobStore:
    def __init__(
        self,
        table_name: str,
        shard_count: int,
        client: DynamoDBClient | None = None,
        shard_record: ShardCountRecord | None = None,
    ) -> None:
        self.table = table_name
        self.shard_count = shard_count
        self.client: Any = client or boto3.client("dynamodb")
        #: The tenant's job list (its entries, batch entries and the label index).
        self.listing = DynamoJobList(table_name, self.client)
        #: Its shard count's record, made before its first timer write (shared with the timer store of the process).
        self.shard_record = shard_record or ShardCountRecord(self.client, table_name, shard_count)

    def _timer_puts(self, timer: Timer | None, late: bool) -> list[dict[str, Any]]:
        if timer is None:
            return []
        self.shard_record.ensure()
        puts = [{"Put": {"TableName": self.table, "Item": timer_item(timer, self.shard_count)}}]
        if late:
            puts.append({"Put": {"TableName": self.table, "Item": late_item(timer, self.shard_count)}})
        return puts

    def create(
        self, job: Job, timer: Timer | None, idempotency: IdempotencyRecord | None, late: bool, quota: int
    ) -> None:
        # The order the cancellation reasons are read in below: the job, the quota, the timer(s), the key, the
        # external id (then the labels, which have no condition).
        timers = self._timer_puts(timer, late)
        keyed = self._idempotency_put(idempotency, job)
        claimed = self._external_id_put(job)
        items: list[dict[str, Any]] = [
            self._job_put(job),
            quota_update(self.table, job.tenant, 1, limit=quota),
            *timers,
            *keyed,
            *claimed,
            *self._label_writes(job, None),
        ]
        try:
            transact(self.client, items)
        except ClientError as exc:
            if exc.response["Error"]["Code"] != "TransactionCanceledException":
                raise
            reasons = cancellation_reasons(exc)
            at = 2 + len(timers)
            if idempotency is not None and len(reasons) == len(items):
                reason = reasons[at]
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
            if (
                claimed
                and len(reasons) == len(items)
                and reasons[at + len(keyed)].get("Code") == "ConditionalCheckFailed"
            ):
                holder = (reasons[at + len(keyed)].get("Item") or {}).get("job_id", {}).get("S")
                raise ExternalIdTaken(str(job.spec.external_id), holder) from exc
            if len(reasons) > 1 and reasons[1].get("Code") == "ConditionalCheckFailed":
                raise QuotaExceeded(f"this tenant already has {quota} active or paused jobs") from exc
            raise

    def create_all(self, new: Sequence[NewJob], quota: int) -> int:
        """As few transactions as DynamoDB takes (100 items, 4 MB), each with one quota change for its jobs and,
        for two jobs or more, one entry in the job list for them all (`job_list_item`: 1 index write and a small
        item instead of an index write a job)."""
        stored = 0
        for chunk in self._transactions(new):
            jobs = len(chunk)
            tenant = chunk[0].job.tenant
            external_ids = [item.job.spec.external_id for item in chunk if item.job.spec.external_id is not None]
            if any(item.job.tenant != tenant for item in chunk) or jobs > quota:
                return stored
            if len(set(external_ids)) != len(external_ids):  # one transaction cannot write an item twice
                return stored
            listed_in = chunk[0].job.job_id if jobs > 1 else None
            writes = [write for item in chunk for write in self._writes(item, listed_in)]
            if listed_in is not None:
                writes.append(self._put_new(job_list_item([item.job for item in chunk])))
            # the count may rise by `jobs` only while it stays at or under the quota
            quota_change = quota_update(self.table, tenant, jobs, limit=quota - jobs + 1)
            try:
                transact(self.client, [*writes, quota_change])
            except Exception as exc:
                refused = (
                    isinstance(exc, ClientError) and exc.response["Error"]["Code"] == "TransactionCanceledException"
                )
                if stored == 0 and not refused:
                    raise
                log.info(
                    "batch transaction refused" if refused else "batch transaction failed",
                    extra={"tenant": tenant, "jobs": jobs, "stored": stored},
                )
                return stored
            stored += jobs
        return stored

    def _transactions(self, new: Sequence[NewJob]) -> Iterator[list[NewJob]]:
        """`new` in order, cut into transactions of at most 100 writes (the quota change and the list entry are two
        of them) and ~3 MB."""
        chunk: list[NewJob] = []
        writes = size = 0
        for item in new:
            own = len(self._writes(item, None))
            weight = 2 * payload_size(item.job.spec.payload) + 4096  # the job and its timer carry the payload
            if chunk and (writes + own + 2 > MAX_TRANSACTION_WRITES or size + weight > MAX_TRANSACTION_BYTES):
                yield chunk
                chunk, writes, size = [], 0, 0
            chunk.append(item)
            writes += own
            size += weight
        if chunk:
            yield chunk

    def _writes(self, new: NewJob, listed_in: str | None) -> list[dict[str, Any]]:
        """A new job's writes but the quota change: the job, its timer (and late copy), its idempotency record."""
        return [
            self._put_new(job_to_item(new.job, listed_in)),
            *self._timer_puts(new.timer, new.late),
            *self._idempotency_put(new.idempotency, new.job),
            *self._external_id_put(new.job),
            *self._label_writes(new.job, None),
        ]

    def _external_id_put(self, job: Job) -> list[dict[str, Any]]:
        """The tenant's claim on the job's external id, refused when another job has it."""
        if job.spec.external_id is None:
            return []
        put = {
            "TableName": self.table,
            "Item": external_id_item(job.tenant, job.spec.external_id, job.job_id),
            "ConditionExpression": "attribute_not_exists(PK)",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        return [{"Put": put}]

    def _label_writes(self, job: Job, previous: Job | None) -> list[dict[str, Any]]:
        """The label index's changes from `previous`'s labels (none: a new job) to `job`'s: a put per label added
        or changed, a delete per label removed or changed; none for a label that stays."""
        old = dict(label_entries(previous.spec.labels)) if previous is not None else {}
        new = dict(label_entries(job.spec.labels))
        writes: list[dict[str, Any]] = []
        for key, value in old.items():
            if new.get(key) != value:
                gone = {"PK": s(label_pk(job.tenant, key)), "SK": s(label_sk(value, job.job_id))}
                writes.append({"Delete": {"TableName": self.table, "Key": gone}})
        for key, value in new.items():
            if old.get(key) != value:
                writes.append(
                    {"Put": {"TableName": self.table, "Item": label_item(job.tenant, key, value, job.job_id)}}
                )
        return writes

    def _job_put(self, job: Job) -> dict[str, Any]:
        return self._put_new(job_to_item(job))

    def _put_new(self, item: Item) -> dict[str, Any]:
        return {"Put": {"TableName": self.table, "Item": item, "ConditionExpression": "attribute_not_exists(PK)"}}

    def _idempotency_put(self, idempotency: IdempotencyRecord | None, job: Job) -> list[dict[str, Any]]:
        if idempotency is None:
            return []
        item = {
            "PK": s(f"IDEM#{idempotency.tenant}#{idempotency.key}"),
            "SK": s("IDEM"),
            "kind": s("idempotency"),
            "request_hash": s(idempotency.request_hash),
            "job_id": s(idempotency.job_id),
            "expires_ms": n(to_ms(idempotency.expires_at)),
            "expires_at": epoch_seconds(idempotency.expires_at),
        }
        put = {
            "TableName": self.table,
            "Item": item,
            # TTL deletes lazily, so an expired record may still be there: it no longer counts.
            "ConditionExpression": "attribute_not_exists(PK) OR expires_ms < :now",
            "ExpressionAttributeValues": {":now": n(to_ms(job.created_at))},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        return [{"Put": put}]

    def get(self, job_id: str) -> Job | None:
        response = self.client.get_item(
            TableName=self.table, Key={"PK": s(job_pk(job_id)), "SK": s("DEF")}, ConsistentRead=True
        )
        item = response.get("Item")
        return job_from_item(item) if item else None

    def get_by_external_id(self, tenant: str, external_id: str) -> Job | None:
        """Two consistent reads: the tenant's claim on the id, then the job it names."""
        claim = self.client.get_item(
            TableName=self.table, Key=external_id_key(tenant, external_id), ConsistentRead=True
        ).get("Item")
        return self.get(claim["job_id"]["S"]) if claim else None

    def list(
        self, tenant: str, state: JobState | None, limit: int, cursor: str | None, query: JobQuery = ALL_JOBS
    ) -> tuple[builtins.list[Job], str | None]:
        return self.listing.list(tenant, state, limit, cursor, query)

    def replace(self, job: Job, previous: Job, timer: Timer | None, late: bool) -> None:
        # scheduler.core.jobs.chain.replace_allowed: same version, and the chain has not advanced since the read.
        condition, values = "#version = :v AND attribute_not_exists(adv_ms)", {":v": n(previous.version)}
        if previous.advanced_from is not None:
            condition, values[":adv"] = "#version = :v AND adv_ms = :adv", n(to_ms(previous.advanced_from))
        items: list[dict[str, Any]] = [
            {"Update": self._job_update(job, condition, values)},
            *self._timer_puts(timer, late),
            *self._label_writes(job, previous),
        ]
        delta = active_delta(previous, job)
        if delta:
            items.append(quota_update(self.table, job.tenant, delta))
        try:
            transact(self.client, items)
        except ClientError as exc:
            if first_write_refused(exc):
                raise VersionConflict(self.get(job.job_id)) from exc
            raise

    def _job_update(self, job: Job, condition: str, values: dict[str, Any]) -> dict[str, Any]:
        """The job's item rewritten to `job` but for its key and its place in the job list (its own index entry, or
        the batch entry that names it), which an update that does not set them leaves as they are."""
        item = job_to_item(job)
        fields = [name for name in item if name not in JOB_LISTING_ATTRIBUTES]
        # `condition` names the version #version: one placeholder for one attribute
        placeholders = {name: "#version" if name == "version" else f"#a{i}" for i, name in enumerate(fields)}
        gone = {name: f"#r{i}" for i, name in enumerate(a for a in JOB_OPTIONAL_ATTRIBUTES if a not in item)}
        expression = "SET " + ", ".join(f"{placeholders[name]} = :a{i}" for i, name in enumerate(fields))
        if gone:
            expression += " REMOVE " + ", ".join(gone.values())
        return {
            "TableName": self.table,
            "Key": {"PK": item["PK"], "SK": item["SK"]},
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {p: name for name, p in {**placeholders, **gone}.items()},
            "ExpressionAttributeValues": {**values, **{f":a{i}": item[name] for i, name in enumerate(fields)}},
        }

    def advance(self, timer: Timer, step: Advance) -> AdvanceResult:
        next_run_at, dispatched_for, skipped = step.next_run_at, step.dispatched_for, step.skipped
        planned_at, planned_horizon, release_by = step.planned_at, step.planned_horizon, step.release_by
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
        written = None
        try:
            if completing and not deferred_release:
                # The job stops counting against the tenant's quota in the same write that completes it.
                transact(self.client, [{"Update": update}, quota_update(self.table, timer.tenant, -1)])
            elif deferred_release:
                # The job as written (no more units than the write), for the message to carry (Dispatch.job_copy).
                written = job_from_item(self.client.update_item(**update, ReturnValues="ALL_NEW")["Attributes"])
            else:
                self.client.update_item(**update)
        except ClientError as exc:
            code = exc.response["Error"]["Code"]
            if code == "ConditionalCheckFailedException":
                old = old_item(exc)
            elif code == "TransactionCanceledException":
                reasons = cancellation_reasons(exc)
                if not reasons or reasons[0].get("Code") != "ConditionalCheckFailed":
                    raise
                old = reasons[0].get("Item")
            else:
                raise
            return already_advanced(job_from_item(old) if old else None, timer, dispatched_for, release_by)
        return AdvanceResult(True, True, JobState.ACTIVE, release=deferred_release, job=written)
