"""The core's TaskPool on threads: a sweep's buckets of one minute at once (they wait on DynamoDB and SQS, and on
the landing of their sends, not on the CPU)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from typing import TypeVar

from scheduler.core.runtime.tasks import InOrder

T = TypeVar("T")


class ThreadTaskPool:
    """Runs up to `size` tasks at once, each in its own thread; a size of 1 runs them in turn in the caller's."""

    def __init__(self, size: int, name: str = "task") -> None:
        if size < 1:
            raise ValueError("a task pool runs at least one task at a time")
        self.size = size
        self.name = name

    def run_all(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        if self.size == 1 or len(tasks) <= 1:
            return InOrder().run_all(tasks)
        with ThreadPoolExecutor(max_workers=min(self.size, len(tasks)), thread_name_prefix=self.name) as pool:
            return _all(pool, tasks)


class SharedTaskPool:
    """A TaskPool whose threads live as long as it does and are shared by every caller: the worker's occurrences of
    all the messages of one batch (each message's record thread waits for its own), so that a batch of messages
    that carry several occurrences each runs at most `size` of them at once however many messages it has - what the
    connection pool is sized for."""

    def __init__(self, size: int, name: str = "task") -> None:
        if size < 1:
            raise ValueError("a task pool runs at least one task at a time")
        self.size = size
        self._pool = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)

    def run_all(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        if len(tasks) <= 1:
            return InOrder().run_all(tasks)
        return _all(self._pool, tasks)


def _all(pool: ThreadPoolExecutor, tasks: Sequence[Callable[[], T]]) -> list[T]:
    """Every task on `pool`, their results in the tasks' order once all have finished (none is left running behind
    a failure); the first error, in the tasks' order."""
    futures = [pool.submit(task) for task in tasks]
    wait(futures)
    return [future.result() for future in futures]
