"""Making one run of the real core a pure function of its seed, and cheap.

Identity: the core draws job ids, attempt owners and backfill ids from its `Ids` port (`uuid4` in production,
fatal to a replay: ids decide shards, jitter and the order of timers). The simulator hands its services
`SeededIds`, drawn from the run's own generator; nothing about identity is patched.

Performance only (none of these changes what a run does, only what it costs): `cheap_core` memoises
`next_occurrence`, a pure function whose cron evaluation (croniter) dominates the cost of a run, silences the
core's logging, which a run would otherwise flood, and gives the in-memory adapters a faster `deepcopy` for
ledger items (their snapshots were half the cost of a run): an `Execution` holds immutable values and a list of
flat dicts, so copying its fields and each history entry is the same snapshot; anything else goes to the real
`copy.deepcopy`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import random
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from scheduler.adapters.memory import ledger as memory_ledger
from scheduler.adapters.memory import queue as memory_queue
from scheduler.adapters.memory import tenants as memory_tenants
from scheduler.core import dispatch as dispatch_module
from scheduler.core import job_lifecycle as job_lifecycle_module
from scheduler.core import jobs as jobs_module
from scheduler.core import schedules as schedules_module
from scheduler.core.ports import Execution
from scheduler.core.schedules import Schedule

_next_occurrence = schedules_module.next_occurrence


@functools.lru_cache(maxsize=1 << 16)
def _memo_next_occurrence(schedule: Schedule, after: datetime, created_at: datetime) -> datetime | None:
    return _next_occurrence(schedule, after, created_at)


def next_occurrence(schedule: Schedule, after: datetime, created_at: datetime) -> datetime | None:
    """The core's `next_occurrence`, memoised (schedules are frozen, hashable models)."""
    return _memo_next_occurrence(schedule, after, created_at)


class _SnapshotCopy:
    """Stands in for the `copy` module in the modules of `scheduler.adapters.memory` that snapshot items."""

    @staticmethod
    def deepcopy(value: object) -> object:
        if type(value) is Execution:
            return dataclasses.replace(value, history=list(value.history), outbox=list(value.outbox))
        return copy.deepcopy(value)


class SeededIds:
    """The core's `Ids`, drawn from the run's generator: job ids of 10 hex characters (40 bits), tokens of 12."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def job_id(self) -> str:
        return f"{self.rng.getrandbits(40):010x}"

    def token(self) -> str:
        # The first 12 hex characters of 128 random bits, as of a uuid4 (whose version bits come later).
        return f"{self.rng.getrandbits(128):032x}"[:12]


@contextmanager
def cheap_core() -> Iterator[None]:
    """Within this block `next_occurrence` is memoised, ledger snapshots are field copies and logging is off."""
    patches: list[tuple[object, str, object]] = [
        (jobs_module, "next_occurrence", next_occurrence),
        (job_lifecycle_module, "next_occurrence", next_occurrence),
        (dispatch_module, "next_occurrence", next_occurrence),
        (schedules_module, "next_occurrence", next_occurrence),
        *((module, "copy", _SnapshotCopy()) for module in (memory_ledger, memory_queue, memory_tenants)),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in patches]
    logging_floor = logging.root.manager.disable
    for module, name, value in patches:
        setattr(module, name, value)
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)
        logging.disable(logging_floor)
