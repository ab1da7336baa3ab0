"""In-memory adapters for every port, one module per store: for unit tests and the simulator. They keep the exact
conditional semantics of the DynamoDB adapters (the same contract tests run against both). `doubles` holds the
rest of the outside world: a clock, heartbeats, metrics, an event bus, the pollers' control."""

from scheduler.adapters.memory.backfill import MemoryBackfillStore
from scheduler.adapters.memory.doubles import (
    FakeClock,
    ManualHeartbeats,
    MemoryEventPublisher,
    MemoryPollerControl,
    RecordingMetrics,
)
from scheduler.adapters.memory.jobs import MemoryJobStore
from scheduler.adapters.memory.ledger import MemoryLedger, Snapshot
from scheduler.adapters.memory.operations import MemoryOperationStore
from scheduler.adapters.memory.queue import MemoryBatchVisibility, MemoryMessage, MemoryQueue, QueuedMessage
from scheduler.adapters.memory.tenants import (
    MemoryFlowControls,
    MemoryRequestWindows,
    MemoryTenantBudgets,
    MemoryTenantSlots,
)
from scheduler.adapters.memory.timers import PAGE_SIZE, MemoryTimerStore

__all__ = [
    "PAGE_SIZE",
    "FakeClock",
    "ManualHeartbeats",
    "MemoryBackfillStore",
    "MemoryBatchVisibility",
    "MemoryEventPublisher",
    "MemoryFlowControls",
    "MemoryJobStore",
    "MemoryLedger",
    "MemoryMessage",
    "MemoryOperationStore",
    "MemoryPollerControl",
    "MemoryQueue",
    "MemoryRequestWindows",
    "MemoryTenantBudgets",
    "MemoryTenantSlots",
    "MemoryTimerStore",
    "QueuedMessage",
    "RecordingMetrics",
    "Snapshot",
]
