"""Landing a sweep's messages just before their fire times, in requests shared by the buckets swept at once
(docs/design.md §1 and §3.3, step 2 of a page).

SQS holds a message for whole seconds, so one sent at `s` becomes visible at `s + floor(send_at - s)`: up to a
second before its time, and the worker would wait the rest out inside Lambda, billed. So each message has an
*ideal instant*: when `send_at - now` is a whole number of seconds plus `lead` (a message due within a second:
`lead` before its time; one already due: now). A request sent at `t` may carry every message whose ideal instant
is before `t + window`: each is then sent at most `window` before its ideal instant, and lands at most `lead +
window` (110 ms) before its time, never after it (a message sent after its ideal instant lands earlier, not
later).

The board is shared by the bucket chains of one sweep (threads of one process): a chain enters its page's
messages, then, at the ideal instant of its earliest message not yet taken, takes from the board every message
(its own and the other chains') that may go in that request, and sends them. So a herd's minute, whose buckets
are swept at once, sends about one request per ten messages instead of one per window per bucket. A chain
returns only when each of its own messages was sent (by itself or by another chain) and raises if a send that
carried one failed: the order of a page's steps (advance -> send -> next timers -> checkpoint) holds for each
chain as before, and a crash anywhere re-runs the page, which sends everything again (absorbed by the ledger).
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler.core.ports import Clock, Dispatch, Metrics, ReadyQueue


@dataclass(order=True)
class _Entry:
    ideal: datetime
    seq: int
    dispatch: Dispatch = field(compare=False)
    sent: Future[None] = field(compare=False, default_factory=Future)
    taken: bool = field(compare=False, default=False)


@dataclass(eq=False)
class LandingBoard:
    queue: ReadyQueue
    clock: Clock
    sleep: Callable[[float], None]
    metrics: Metrics
    window: timedelta
    lead: timedelta
    _pending: list[_Entry] = field(default_factory=list, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _seq: itertools.count[int] = field(default_factory=itertools.count, init=False)

    def land(self, dispatches: Sequence[Dispatch]) -> None:
        """Send `dispatches` so that each lands at most `lead + window` before its time (see the module). Waits
        at most about a second; returns when every one of them was sent; raises if a send that carried one failed."""
        start = self.clock.now()
        mine = sorted(self._entry(start, dispatch) for dispatch in dispatches)
        with self._lock:
            for entry in mine:
                heapq.heappush(self._pending, entry)
        waited = 0.0
        try:
            for entry in mine:
                if self._taken(entry):
                    continue
                wait = (entry.ideal - self.clock.now()).total_seconds()
                if wait > 0:
                    self.sleep(wait)
                    waited += wait
                if not self._taken(entry):  # another bucket's request may have carried it while this one slept
                    self._send_due()
        finally:
            self._withdraw(mine)
            if waited:
                self.metrics.count("SendAlignmentSeconds", waited, unit="Seconds")
        for entry in mine:
            entry.sent.result()

    def _entry(self, start: datetime, dispatch: Dispatch) -> _Entry:
        lead = self.lead.total_seconds()
        ahead = (dispatch.send_at - start).total_seconds()
        if ahead <= lead:
            wait = 0.0  # due, or due within the lead: now
        elif ahead < 1:
            wait = ahead - lead  # lands at once: send just before its time
        else:
            wait = (ahead - lead) % 1.0  # the next instant at which `ahead` is a whole number of seconds + lead
        return _Entry(start + timedelta(seconds=wait), next(self._seq), dispatch)

    def _taken(self, entry: _Entry) -> bool:
        with self._lock:
            return entry.taken

    def _send_due(self) -> None:
        """One request's worth of the board, from any chain: every message whose ideal instant is before now +
        `window` (those already past it too: a chain that fell behind; they go soonest due first and are
        counted, `SendsOffWindow`). Their futures carry the outcome to the chains that entered them."""
        now = self.clock.now()
        group: list[_Entry] = []
        with self._lock:
            while self._pending and self._pending[0].ideal < now + self.window:
                entry = heapq.heappop(self._pending)
                entry.taken = True
                group.append(entry)
        if not group:
            return
        off_window = sum(1 for entry in group if now - entry.ideal > self.window)
        try:
            self.queue.send([entry.dispatch for entry in group], now)
        except BaseException as exc:
            for entry in group:
                entry.sent.set_exception(exc)
            raise
        for entry in group:
            entry.sent.set_result(None)
        if off_window:
            self.metrics.count("SendsOffWindow", off_window)

    def _withdraw(self, entries: Sequence[_Entry]) -> None:
        """Take a chain's messages that nobody sent off the board (it is leaving: done, or failing), so that no
        later request carries a message whose chain has given up on it."""
        with self._lock:
            left = [entry for entry in entries if not entry.taken]
            if not left:
                return
            for entry in left:
                entry.taken = True
                entry.sent.set_exception(RuntimeError("withdrawn before it was sent"))
            self._pending = [entry for entry in self._pending if not entry.taken]
            heapq.heapify(self._pending)
