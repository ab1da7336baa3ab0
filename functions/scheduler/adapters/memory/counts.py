"""The tenants' active-job counts that the memory job and timer stores share, as the jobs table holds them for both
in DynamoDB: a create counts a job up (`MemoryJobStore`), a sweep's page checkpoint counts the jobs it completed down
(`MemoryTimerStore`), each atomically with its own write, under the one lock both take first."""

from __future__ import annotations

import threading


class ActiveJobCounts:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: tenant -> its active or paused jobs.
        self.active: dict[str, int] = {}

    def release(self, tenant: str, count: int) -> None:
        self.active[tenant] = self.active.get(tenant, 0) - count
