"""The one definition of the tables and queues, used by the CDK stack and by local provisioning alike,
so the local and the deployed schema cannot drift. Plain data: no boto3 or CDK imports here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Index:
    name: str
    partition_key: tuple[str, str]  # (attribute, "S" | "N")
    sort_key: tuple[str, str] | None
    #: "ALL" or "KEYS_ONLY". A keys-only index is written only when an item enters or leaves it (its keys change),
    #: not on every update of the item: readers fetch the items by key.
    projection: str = "ALL"


@dataclass(frozen=True)
class TableSchema:
    logical_name: str
    partition_key: tuple[str, str]
    sort_key: tuple[str, str] | None
    ttl_attribute: str
    indexes: tuple[Index, ...]


JOBS_TABLE = TableSchema(
    logical_name="Jobs",
    partition_key=("PK", "S"),
    sort_key=("SK", "S"),
    ttl_attribute="expires_at",
    # Keys only: a fire updates its job (state, chain), and with ALL projection each such update also rewrote the
    # job's index entry (1 write unit a fire). The job list reads the jobs by key (DynamoJobStore.list).
    indexes=(Index("by_tenant", ("tenant_pk", "S"), ("tenant_sk", "S"), projection="KEYS_ONLY"),),
)

EXECUTIONS_TABLE = TableSchema(
    logical_name="Executions",
    partition_key=("PK", "S"),
    sort_key=None,
    ttl_attribute="expires_at",
    indexes=(
        # Keys only: with ALL projection every write to an execution (its claim, its finish) also rewrote its entry
        # here (1 write unit each); keys-only, an entry is written once, when the claim creates the item. The run
        # history and the overlap check read the runs they need by key (DynamoLedger.runs).
        Index("by_job", ("job_id", "S"), ("scheduled_ms", "N"), projection="KEYS_ONLY"),
        # Sparse: only items with unpublished completion events carry `event_pending` (an outbox shard), so the
        # sweeper's drain reads just those (scheduler.core.execution.events).
        Index("outbox", ("event_pending", "S"), ("event_ms", "N")),
    ),
)

TABLES = (JOBS_TABLE, EXECUTIONS_TABLE)


@dataclass(frozen=True)
class QueueSchema:
    logical_name: str
    #: Worker Lambda timeout; the ready queue's visibility timeout is 6x this (AWS guidance for ESMs).
    worker_timeout_seconds: int = 120
    max_receive_count: int = 50
    dlq_retention_days: int = 14

    @property
    def visibility_timeout_seconds(self) -> int:
        return 6 * self.worker_timeout_seconds


READY_QUEUE = QueueSchema(logical_name="Ready")

#: Powertools' `service` dimension on every metric and log line (the dashboard and alarms filter on it), and the
#: CloudWatch namespace the handlers' EMF metrics land in: what cdk/punctual_cdk/environment.py deploys, what the
#: local stack runs with, and what the benchmark prices the logs of.
SERVICE_NAME = "punctual"
METRICS_NAMESPACE = "Punctual"

#: The worker event source mapping's defaults (cdk/punctual_cdk/config.py `worker_batch_size`,
#: `worker_max_concurrency`; the capacity model assumes them): messages per invocation, and the standard-mode
#: mapping's MaximumConcurrency.
WORKER_BATCH_SIZE = 10
WORKER_MAX_CONCURRENCY = 50
#: Occurrences of a batch's messages that carry several (scheduler.core.execution.packing) the worker runs at once, on
#: one pool beside its record threads: with them within the DynamoDB client's connection pool (32).
WORKER_OCCURRENCE_THREADS = 20

#: Memory of each deployed function, MB (infra/ deploys these; the benchmark prices Lambda time at them). Lambda
#: gives a function CPU in proportion to its memory, one vCPU at 1,769 MB. The sweeper is one Python process whose
#: bucket chains share that CPU: at 512 MB a sweep dispatches about a third as fast as at 1,769 MB; a deployment
#: whose herds one sweep at 512 MB cannot dispatch within the look-ahead (docs/capacity.md says how large that is)
#: raises `sweeper_memory_mb` (cdk/punctual_cdk/config.py). Below that, 512 MB is the cheapest: the sweep's landing
#: waits are billed at its memory, and its CPU-bound work costs the same GB-seconds at any size.
FUNCTION_MEMORY_MB: dict[str, int] = {"api": 512, "sweeper": 512, "worker": 512}

#: One ready queue per priority lane (scheduler.core.model.job.Priority), all sharing the one DLQ. `normal` is the
#: original ready queue, so a deployment from before lanes keeps its queue (and the messages in it).
READY_LANES: dict[str, QueueSchema] = {
    "high": QueueSchema(logical_name="ReadyHigh"),
    "normal": READY_QUEUE,
    "low": QueueSchema(logical_name="ReadyLow"),
}


def attribute_definitions(table: TableSchema) -> list[dict[str, str]]:
    """AttributeDefinitions for CreateTable: every key attribute of the table and its indexes, once."""
    seen: dict[str, str] = {}
    keys = [table.partition_key, table.sort_key]
    for index in table.indexes:
        keys += [index.partition_key, index.sort_key]
    for key in keys:
        if key is not None:
            seen.setdefault(key[0], key[1])
    return [{"AttributeName": name, "AttributeType": kind} for name, kind in seen.items()]


def create_table_request(table: TableSchema, table_name: str) -> dict[str, object]:
    """The CreateTable request for local provisioning (on-demand billing, as deployed)."""
    key_schema = [{"AttributeName": table.partition_key[0], "KeyType": "HASH"}]
    if table.sort_key:
        key_schema.append({"AttributeName": table.sort_key[0], "KeyType": "RANGE"})
    indexes = []
    for index in table.indexes:
        index_keys = [{"AttributeName": index.partition_key[0], "KeyType": "HASH"}]
        if index.sort_key:
            index_keys.append({"AttributeName": index.sort_key[0], "KeyType": "RANGE"})
        indexes.append(
            {"IndexName": index.name, "KeySchema": index_keys, "Projection": {"ProjectionType": index.projection}}
        )
    request: dict[str, object] = {
        "TableName": table_name,
        "KeySchema": key_schema,
        "AttributeDefinitions": attribute_definitions(table),
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        request["GlobalSecondaryIndexes"] = indexes
    return request
