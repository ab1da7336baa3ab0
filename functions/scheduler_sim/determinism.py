"""Making one run of the real core a pure function of its seed, and cheap.

Identity: the core draws job ids, attempt owners and backfill ids from its `Ids` port (`uuid4` in production,
fatal to a replay: ids decide shards, jitter and the order of timers). The simulator hands its services
`SeededIds`, drawn from the run's own generator; nothing about identity is patched.

Cost (none of this changes what a run does): the simulator gives its ledger `snapshot` as the copy of the items it
hands out (`scheduler.composition.memory_stores`), cheaper than `copy.deepcopy`, whose snapshots were the largest
share of a run: an `Execution` holds immutable values and lists of frozen entries, so copying its fields and its
lists is the same snapshot; anything else goes to the real `copy.deepcopy`. A run's
logging is off (`quiet_logging`): the core would flood it. The checker's own walks along schedules use the memoised
`next_occurrence`.
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
from typing import TypeVar, cast

from scheduler.core.model import schedules as schedules_module
from scheduler.core.model.schedules import Schedule
from scheduler.core.ports import Execution

_T = TypeVar("_T")
_next_occurrence = schedules_module.next_occurrence


@functools.lru_cache(maxsize=1 << 16)
def _memo_next_occurrence(schedule: Schedule, after: datetime, created_at: datetime) -> datetime | None:
    return _next_occurrence(schedule, after, created_at)


def next_occurrence(schedule: Schedule, after: datetime, created_at: datetime) -> datetime | None:
    """The core's `next_occurrence`, memoised (schedules are frozen, hashable models)."""
    return _memo_next_occurrence(schedule, after, created_at)


def snapshot(value: _T, /) -> _T:
    """The ledger's copy of what it hands out (see the module): an `Execution`'s fields and lists, anything else a
    deep copy."""
    if type(value) is Execution:
        item = cast(Execution, value)
        return cast(_T, dataclasses.replace(item, history=list(item.history), outbox=list(item.outbox)))
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
def quiet_logging() -> Iterator[None]:
    """Within this block logging is off (a run's core would flood it)."""
    floor = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        logging.disable(floor)
