"""What every step of an attempt works through: the ledger, the ready queue, the clock, the executor's config and its
metrics - one bundle, so each step names only what it adds (the recorder, the gate, the targets)."""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.core.execution.config import ExecuteConfig
from scheduler.core.ports import Clock, Ledger, Metrics, ReadyQueue


@dataclass(frozen=True)
class StepPorts:
    ledger: Ledger
    queue: ReadyQueue
    clock: Clock
    config: ExecuteConfig
    metrics: Metrics
