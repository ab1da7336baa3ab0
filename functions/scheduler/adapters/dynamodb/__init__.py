"""DynamoDB adapters, one module per store: the jobs table holds jobs, idempotency records and quota counters
(`jobs`), timers, buckets, the watermark and the late lane (`timers`), backfills (`backfill`), bulk operations
(`operations`) and each tenant's budget calendar and execution slots (`tenants`); the executions table is the ledger
with its outbox (`ledger`).
`common` holds what they share.

Every race is decided by a conditional write; `ConditionalCheckFailedException` becomes a domain error.
Expressions name every attribute through placeholders: DynamoDB reserves words such as `state`, `owner`.
"""

from scheduler.adapters.dynamodb.backfill import BACKFILL_RETENTION, DynamoBackfillStore
from scheduler.adapters.dynamodb.common import MAX_TRANSACTION_ITEMS, PAGE_SIZE, TIMER_PAGE_SIZE
from scheduler.adapters.dynamodb.fan_out import DynamoFanOutStore
from scheduler.adapters.dynamodb.jobs import DynamoJobStore
from scheduler.adapters.dynamodb.ledger import EXECUTION_RETENTION, OUTBOX_INDEX, OUTBOX_SET, DynamoLedger
from scheduler.adapters.dynamodb.operations import DynamoOperationStore
from scheduler.adapters.dynamodb.tenants import (
    DynamoFlowControls,
    DynamoRequestWindows,
    DynamoTenantBudgets,
    DynamoTenantSlots,
)
from scheduler.adapters.dynamodb.timers import (
    TIMER_RETENTION,
    WATERMARK_KEY,
    DynamoTimerStore,
    ShardCountRecord,
    late_item,
    timer_item,
)

__all__ = [
    "BACKFILL_RETENTION",
    "EXECUTION_RETENTION",
    "MAX_TRANSACTION_ITEMS",
    "OUTBOX_INDEX",
    "OUTBOX_SET",
    "PAGE_SIZE",
    "TIMER_PAGE_SIZE",
    "TIMER_RETENTION",
    "WATERMARK_KEY",
    "DynamoBackfillStore",
    "DynamoFanOutStore",
    "DynamoFlowControls",
    "DynamoJobStore",
    "DynamoLedger",
    "DynamoOperationStore",
    "DynamoRequestWindows",
    "DynamoTenantBudgets",
    "DynamoTenantSlots",
    "DynamoTimerStore",
    "ShardCountRecord",
    "late_item",
    "timer_item",
]
