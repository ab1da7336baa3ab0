"""The bulk operation store in memory."""

from __future__ import annotations

import threading

from scheduler.core.jobs.bulk import BulkOperation


class MemoryOperationStore:
    def __init__(self) -> None:
        self.items: dict[tuple[str, str], BulkOperation] = {}
        self.lock = threading.Lock()

    def create(self, operation: BulkOperation) -> BulkOperation:
        with self.lock:
            return self.items.setdefault((operation.tenant, operation.operation_id), operation)

    def get(self, tenant: str, operation_id: str) -> BulkOperation | None:
        with self.lock:
            return self.items.get((tenant, operation_id))

    def save(self, operation: BulkOperation, expected_version: int) -> bool:
        with self.lock:
            key = (operation.tenant, operation.operation_id)
            current = self.items.get(key)
            if current is None or current.version != expected_version:
                return False
            self.items[key] = operation
            return True
