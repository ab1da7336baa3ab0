"""The ready queue in memory, and the message and batch visibility controls of what it delivers."""

from __future__ import annotations

import copy
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from scheduler.core.execution.packing import PackingConfig, pack
from scheduler.core.ports import Clock, Dispatch, Execution


@dataclass
class QueuedMessage:
    message_id: str
    #: The message's first occurrence (the one its delay is for).
    dispatch: Dispatch
    visible_at: datetime
    receive_count: int = 0
    receipt: str | None = None
    #: The other occurrences it carries (scheduler.core.execution.packing).
    more: tuple[Dispatch, ...] = ()

    @property
    def dispatches(self) -> list[Dispatch]:
        return [self.dispatch, *self.more]


@dataclass
class MemoryQueue:
    """An SQS-like queue: per-message delay, visibility timeouts, receive counts, a DLQ."""

    clock: Clock
    visibility_timeout: float = 720
    max_receive_count: int = 50
    messages: dict[str, QueuedMessage] = field(default_factory=dict)
    dead: list[tuple[Dispatch, Execution | None]] = field(default_factory=list)
    sent: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: How occurrences share messages (a message each unless told; the simulator packs as deployed).
    packing: PackingConfig = field(default_factory=lambda: PackingConfig(occurrences=1))

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        with self.lock:
            for message in pack(dispatches, self.packing):
                delay = min(900, max(0, math.floor((message[0].send_at - now).total_seconds())))
                self._put(message, self._arrival(now) + timedelta(seconds=delay))

    def _arrival(self, now: datetime) -> datetime:
        """The queue's time when a message sent at the sender's `now` arrives (its delay counts from then)."""
        return now

    def _put(self, dispatches: Sequence[Dispatch], visible_at: datetime) -> str:
        """One message carrying `dispatches` (the first is the one its delay is for), visible from `visible_at`."""
        self.sent += 1
        message_id = f"m{self.sent}"
        first, *more = dispatches
        self.messages[message_id] = QueuedMessage(message_id, first, visible_at, more=tuple(more))
        return message_id

    def dead_letter(self, dispatch: Dispatch, execution: Execution) -> None:
        with self.lock:
            self.dead.append((replace(dispatch, job_copy=None), copy.deepcopy(execution)))

    def receive(self, max_messages: int = 10) -> list[QueuedMessage]:
        now = self.clock.now()
        out: list[QueuedMessage] = []
        with self.lock:
            for message in self._delivery_order(now):
                if len(out) == max_messages:
                    break
                received = self._receive_one(message, now)
                if received is not None:
                    out.append(received)
        return out

    def _delivery_order(self, now: datetime) -> list[QueuedMessage]:
        """The messages visible at `now`, in the order a receive takes them: the longest visible first."""
        return sorted((m for m in self.messages.values() if m.visible_at <= now), key=lambda m: m.visible_at)

    def _receive_one(self, message: QueuedMessage, now: datetime) -> QueuedMessage | None:
        """One receive of a visible message: the copy handed out, with a new receipt, while the message is hidden
        for the visibility timeout; or None when this receive is one too many (the message goes to the DLQ)."""
        message.receive_count += 1
        if message.receive_count > self.max_receive_count:
            del self.messages[message.message_id]
            self.dead.extend((dispatch, None) for dispatch in message.dispatches)
            return None
        message.visible_at = now + timedelta(seconds=self.visibility_timeout)
        message.receipt = f"{message.message_id}#{message.receive_count}"
        return replace(message)

    def delete(self, message: QueuedMessage) -> None:
        with self.lock:
            current = self.messages.get(message.message_id)
            if current is not None and current.receipt == message.receipt:
                del self.messages[message.message_id]

    def change_visibility(self, message: QueuedMessage, seconds: int) -> None:
        with self.lock:
            current = self.messages.get(message.message_id)
            if current is not None and current.receipt == message.receipt:
                current.visible_at = self.clock.now() + timedelta(seconds=seconds)


class MemoryMessage:
    """MessageControl for one received MemoryQueue message."""

    def __init__(self, queue: MemoryQueue, message: QueuedMessage) -> None:
        self.queue = queue
        self.message = message
        self.receive_count = message.receive_count

    def extend_visibility(self, seconds: int) -> None:
        self.queue.change_visibility(self.message, seconds)


class MemoryBatchVisibility:
    """BatchVisibility for one batch received from a MemoryQueue."""

    def __init__(self, queue: MemoryQueue, messages: Sequence[QueuedMessage]) -> None:
        self.queue = queue
        self.messages = {m.message_id: m for m in messages}

    def hold(self, message_ids: Sequence[str], seconds: int) -> list[str]:
        refused = []
        with self.queue.lock:
            for message_id in message_ids:
                received = self.messages[message_id]
                current = self.queue.messages.get(message_id)
                if current is None or current.receipt != received.receipt:
                    refused.append(message_id)
                else:
                    self.queue.change_visibility(received, seconds)
        return refused
