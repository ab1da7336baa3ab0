"""How many worker pollers the local stack runs: the local analogue of Lambda scaling its SQS event source mapping
with the queue's backlog, within a configured ceiling (the function's reserved concurrency on AWS).

The supervisor (`python -m scheduler_local`) reads the ready queues' counts every second and asks the policy for
the number of pollers it wants: enough that each has at most `messages_per_worker` messages of backlog, between
`minimum` and `maximum`. It adds pollers at once (a poller takes a second or two to start, so a herd is met
by warm pollers: messages delayed until their fire time count as backlog, which Lambda does not need but a local
process start does), and removes one at a time, only after the queues have been empty for `idle_seconds`.

A small backlog can wait too: each poller handles one batch at a time, so while every poller waits on a long
target call, a message that falls due waits with it. As Lambda invokes another function while messages are
available, a message left visible for `waiting_seconds` (no poller took it) adds one poller, one per such period.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Backlog:
    """The ready queues' approximate counts, summed over the lanes."""

    visible: int = 0
    in_flight: int = 0
    delayed: int = 0

    @property
    def total(self) -> int:
        return self.visible + self.in_flight + self.delayed


@dataclass
class ScalingPolicy:
    minimum: int = 2
    maximum: int = 4
    messages_per_worker: int = 100
    idle_seconds: float = 30.0
    waiting_seconds: float = 1.0
    _idle_since: float | None = None
    _waiting_since: float | None = None

    def __post_init__(self) -> None:
        if self.minimum < 1 or self.maximum < self.minimum or self.messages_per_worker < 1:
            raise ValueError(
                f"worker scaling: need 1 <= minimum ({self.minimum}) <= maximum ({self.maximum}) and "
                f"messages_per_worker ({self.messages_per_worker}) >= 1"
            )

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> ScalingPolicy:
        """SCHEDULER_LOCAL_WORKERS (the minimum, 2), SCHEDULER_LOCAL_MAX_WORKERS (the ceiling: twice the cores,
        at least the minimum), SCHEDULER_LOCAL_MESSAGES_PER_WORKER (100), SCHEDULER_LOCAL_IDLE_SECONDS (30)."""
        env = dict(os.environ) if env is None else env
        minimum = int(env.get("SCHEDULER_LOCAL_WORKERS", "2"))
        default_max = max(minimum, 2 * (os.cpu_count() or 1))
        return cls(
            minimum=minimum,
            maximum=int(env.get("SCHEDULER_LOCAL_MAX_WORKERS", str(default_max))),
            messages_per_worker=int(env.get("SCHEDULER_LOCAL_MESSAGES_PER_WORKER", "100")),
            idle_seconds=float(env.get("SCHEDULER_LOCAL_IDLE_SECONDS", "30")),
        )

    def desired(self, current: int, backlog: Backlog, now: float) -> int:
        """The number of pollers to run from now on, given `current` and the queues' backlog at `now`."""
        wanted = min(self.maximum, max(self.minimum, math.ceil(backlog.total / self.messages_per_worker)))
        if self._left_waiting(backlog, now):
            wanted = max(wanted, min(self.maximum, current + 1))
        if wanted > current:
            self._idle_since = None
            return wanted
        current = min(max(current, self.minimum), self.maximum)
        if backlog.total > 0:
            self._idle_since = None
            return current
        if self._idle_since is None:
            self._idle_since = now
        if now - self._idle_since >= self.idle_seconds and current > self.minimum:
            self._idle_since = now  # one at a time, each after another idle period
            return current - 1
        return current

    def _left_waiting(self, backlog: Backlog, now: float) -> bool:
        """Whether messages have been visible, none taking them, for `waiting_seconds` (then counted afresh)."""
        if backlog.visible == 0:
            self._waiting_since = None
            return False
        if self._waiting_since is None:
            self._waiting_since = now
            return False
        if now - self._waiting_since < self.waiting_seconds:
            return False
        self._waiting_since = now
        return True
