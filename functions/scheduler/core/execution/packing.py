"""Packing several occurrences into one ready-queue message, and running a packed message (docs/design.md §3.4).

SQS bills every request, and a message is the unit of each: the sweeper's send, the event source mapping's receive
and delete, and the worker's batch hold are one request per 10 messages each, 0.4 a fire when every message
carries one occurrence. A message that carries the occurrences due in the same instant of one tenant and lane
divides all four by how many it carries: a herd's 500 fires in one second are 50 messages, not 500.

Sending (`pack`, used by every ReadyQueue adapter): the occurrences of one send are grouped by lane and tenant (the
message group of SQS fair queues), ordered by when each is to be released (`Dispatch.send_at`), and cut into
messages of at most `PackingConfig.occurrences`, each spanning at most `PackingConfig.spread` from its first. A
message is delayed to its first occurrence (rounded down, as any message): the others land at most the spread
before their own time, and the worker waits that out, as it does the rounding's remainder.

Receiving (`MessageRunner`): each occurrence of the message runs through the executor exactly as a message of its
own would (two copies of one key, in one message or two, race on the ledger's conditional claim: one effect). A
message is one SQS receipt, so it is acknowledged as a whole, and only when every occurrence in it is settled:

- an occurrence whose outcome is recorded (or already final) needs nothing more;
- one the executor would keep hidden (a retry's backoff, another worker's live lease, its tenant at its execution
  limit, an early arrival) is **sent again** as a message of its own, released when the executor would have shown
  the message again (`Dispatch.deferred_to`), *before* the message is acknowledged;
- if that send fails, or any occurrence raises, nothing is acknowledged: the message comes back after the batch's
  hold (`core/execution/recovery.py`) and each occurrence is decided again, the settled ones by their ledger items (a
  claim on a final item is refused and acknowledged, as any redelivery).

So a worker that dies at any instruction loses nothing: before the acknowledgement every occurrence is still in the
message, after it every unsettled one is in a message of its own. A message of one occurrence is handled exactly as
before (its visibility is changed instead of sending it again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial

from scheduler.core.execution.executor import Executor, Outcome, Why
from scheduler.core.ports import Clock, Dispatch, MessageControl, Metrics, ReadyQueue, TaskPool
from scheduler.core.runtime.tasks import InOrder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PackingConfig:
    #: The most occurrences one ready-queue message carries (1: a message each).
    occurrences: int = 10
    #: Occurrences share a message only if each is released at most this long after the message's first: what the
    #: worker may wait out beyond a single message's rounding (the sweep lands a page's sends 70 ms apart).
    spread: timedelta = timedelta(milliseconds=100)

    def __post_init__(self) -> None:
        if self.occurrences < 1:
            raise ValueError("a message carries at least one occurrence")


def pack(dispatches: Sequence[Dispatch], config: PackingConfig) -> list[list[Dispatch]]:
    """The messages that carry `dispatches`: per lane and tenant, by release instant, at most `config.occurrences`
    each, spanning at most `config.spread`. Each message's first occurrence is its earliest (its delay is that
    one's). Messages come out in the order of their first occurrence's release."""
    groups: dict[tuple[str, str], list[Dispatch]] = {}
    for dispatch in sorted(dispatches, key=lambda d: d.send_at):
        groups.setdefault((dispatch.priority, dispatch.tenant), []).append(dispatch)
    messages: list[list[Dispatch]] = []
    for group in groups.values():
        current: list[Dispatch] = []
        for dispatch in group:
            if current and (
                len(current) >= config.occurrences or dispatch.send_at - current[0].send_at > config.spread
            ):
                messages.append(current)
                current = []
            current.append(dispatch)
        if current:
            messages.append(current)
    messages.sort(key=lambda message: message[0].send_at)
    return messages


@dataclass(eq=False)
class MessageRunner:
    """Runs the occurrences of one ready-queue message through the executor; returns what to do with the message
    (see the module's docstring)."""

    executor: Executor
    queue: ReadyQueue
    clock: Clock
    metrics: Metrics
    #: Runs the occurrences of one message (at once in threads when deployed; the simulator: a seeded order).
    pool: TaskPool = field(default_factory=InOrder)
    #: Called in the thread that runs an occurrence, before it runs (the handler binds its log keys).
    bind: Callable[[Dispatch], None] | None = None

    def run(self, dispatches: Sequence[Dispatch], message: MessageControl) -> Outcome:
        if not dispatches:
            raise ValueError("a message carries at least one occurrence")
        if len(dispatches) == 1:
            return self._one(dispatches[0], message)
        outcomes = self.pool.run_all([partial(self._one, dispatch, message) for dispatch in dispatches])
        kept = [(dispatch, outcome) for dispatch, outcome in zip(dispatches, outcomes, strict=True) if not outcome.ack]
        if kept:
            now = self.clock.now()
            # Released no sooner than the executor would have shown the message again: a whole second more, since
            # a delay is rounded down.
            again = [
                dispatch.deferred_to(now + timedelta(seconds=kept_for.hide_seconds + 1)) for dispatch, kept_for in kept
            ]
            self.queue.send(again, now)  # raises: nothing acknowledged, the message comes back after the hold
            self.metrics.count("OccurrencesSentAgain", len(again))
            log.info(
                "occurrences of a message sent again on their own",
                extra={
                    "occurrence_keys": [dispatch.key for dispatch, _ in kept],
                    "reasons": [outcome.reason for _, outcome in kept],
                },
            )
        return Outcome.acknowledge(Why.SETTLED, f"{len(dispatches)} occurrences, {len(kept)} sent again")

    def _one(self, dispatch: Dispatch, message: MessageControl) -> Outcome:
        if self.bind is not None:
            self.bind(dispatch)
        return self.executor.execute(dispatch, message)
