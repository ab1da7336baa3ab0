"""Task pools: the `TaskPool` that runs tasks in turn (threads in production: `scheduler.adapters.threads`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


class InOrder:
    """The TaskPool that runs each task in turn, in the calling thread (the default; unit tests, the simulator)."""

    def run_all(self, tasks: Sequence[Callable[[], T]]) -> list[T]:
        return [task() for task in tasks]
