"""Making one run of the real core a pure function of its seed.

The core draws job ids and attempt owners from `uuid4` (right in production, fatal to a replay: ids decide
shards, jitter and the order of timers). For the duration of a run they are drawn from the seed instead. The
same context memoises `next_occurrence`, a pure function whose cron evaluation (croniter) dominates the cost
of a run, and silences the core's logging, which a run would otherwise flood. Finally it gives the in-memory
adapters a faster `deepcopy` for ledger items (their snapshots were half the cost of a run): an `Execution`
holds immutable values and a list of flat dicts, so copying its fields and each history entry is the same
snapshot; anything else goes to the real `copy.deepcopy`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
import random
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime

from scheduler.adapters.memory import ledger as memory_ledger
from scheduler.adapters.memory import queue as memory_queue
from scheduler.adapters.memory import tenants as memory_tenants
from scheduler.core import dispatch as dispatch_module
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
            return dataclasses.replace(value, history=[dict(entry) for entry in value.history])
        return copy.deepcopy(value)


class _SeededUuid:
    """Stands in for the `uuid` module where the core calls `uuid.uuid4()`."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self.rng.getrandbits(128), version=4)


@contextmanager
def deterministic_core(rng: random.Random) -> Iterator[None]:
    """Within this block the core's ids come from `rng`, `next_occurrence` is memoised and logging is off."""
    patches: list[tuple[object, str, object]] = [
        (jobs_module, "new_job_id", _job_ids(rng)),
        (jobs_module, "next_occurrence", next_occurrence),
        (dispatch_module, "next_occurrence", next_occurrence),
        (schedules_module, "next_occurrence", next_occurrence),
        *((module, "copy", _SnapshotCopy()) for module in (memory_ledger, memory_queue, memory_tenants)),
    ]
    from scheduler.core import execute as execute_module

    patches.append((execute_module, "uuid", _SeededUuid(rng)))
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


def _job_ids(rng: random.Random) -> Callable[[], str]:
    def new_job_id() -> str:
        return f"{rng.getrandbits(40):010x}"

    return new_job_id
