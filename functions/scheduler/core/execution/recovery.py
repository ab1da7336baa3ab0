"""Bounded recovery of a worker's batch: what a worker that dies holding a batch leaves behind comes
back within seconds, not after the queue's visibility timeout.

The ready queues' visibility timeout is 6x the worker timeout (720 s; AWS's rule for event source mappings, so a
batch the mapping holds while the function is throttled is not received twice). That is the time a message stays
hidden after a receive, so on its own it is the time a dead worker's unfinished messages stay stranded. So the
worker holds its batch only for as long as it lives:

- when a batch arrives, one request (ChangeMessageVisibilityBatch on SQS) sets every record's visibility to the
  hold time (20 s);
- while the worker works through the batch, a heartbeat renews the hold of every record not yet settled, every
  third of the hold (two renewals may fail before a message shows early);
- a record is released from the hold when its outcome is known, before its own visibility is set (a retry's
  backoff, an early arrival), so a renewal never overrides that.

The bound. Every record the worker still holds is visible again at most one hold time after the worker's last
renewal, so at most `hold` after it died. A record it had not started is then simply run by the worker that
receives it. A record it had started (claimed in the ledger) may be found with the dead worker's lease still running,
at most `lease` from its last heartbeat, so the receiving worker keeps it hidden until just after the lease ends
(the executor's step 3, a refused claim). So an occurrence held by a worker that dies at any instruction after the
batch's first hold restarts at most `hold` (not started) or `max(hold, lease + margin)` (started) after the death,
plus the time to receive it: with the lease and its margin shorter than the hold (the deployed settings), `hold` for
both. The hold is kept short so that a second death of a second worker holding the same not-started record adds
only another `hold`. (A function that dies before its first instruction, e.g. while the
runtime starts, leaves its batch to the queue's visibility timeout: the window between the event source mapping's
receive and the handler is AWS's. The local stack's poller receives with the hold time itself.)

Cost: one request per batch of up to 10 messages (0.1 per fire with full batches), plus one per third of the hold
that a batch is still running.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from scheduler.core.execution.heartbeat import Heartbeat
from scheduler.core.ports import BatchVisibility, Heartbeats, Metrics

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HoldConfig:
    #: How long a message a worker holds stays hidden without a renewal: how long a dead worker's records wait.
    hold_seconds: int = 20
    #: Renewal period as a fraction of the hold; None: no renewal (the simulator: steps take no real time).
    renew_fraction: float | None = 1 / 3

    @property
    def renew_every(self) -> float | None:
        return self.hold_seconds * self.renew_fraction if self.renew_fraction else None


class HeldBatch:
    """The messages of one received batch, hidden for the hold time while this worker lives.

    `messages` maps each message id to its occurrence key (for logs; None when the message does not say).
    Use it as a context manager around the batch's processing, and `release` each record once it is settled.
    `heartbeats` renews the hold in the background (needed unless the config renews never).
    """

    def __init__(
        self,
        visibility: BatchVisibility,
        messages: Mapping[str, str | None],
        config: HoldConfig,
        metrics: Metrics,
        heartbeats: Heartbeats | None = None,
    ) -> None:
        self.visibility = visibility
        self.keys = dict(messages)
        self.config = config
        self.metrics = metrics
        self._held = set(self.keys)
        self._lock = threading.Lock()
        self._renewal = Heartbeat(heartbeats, self.renew, config.renew_every)
        self.holds = 0

    def __enter__(self) -> HeldBatch:
        self.renew()
        self._renewal.__enter__()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self._renewal.__exit__(kind, exc, traceback)

    @property
    def held(self) -> list[str]:
        with self._lock:
            return sorted(self._held)

    def release(self, message_id: str) -> None:
        """The record is settled (acknowledged, or its own visibility is about to be set): stop holding it.
        Waits for a renewal in flight, so that renewal cannot land after the caller's own visibility change."""
        with self._lock:
            self._held.discard(message_id)

    def renew(self) -> None:
        """Hide every record still held for the hold time. A failure is logged and counted, never raised: the
        next renewal tries again, and the queue's own visibility timeout is the last resort."""
        with self._lock:
            ids = sorted(self._held)
            if not ids:
                return
            seconds = self.config.hold_seconds
            try:
                refused = self.visibility.hold(ids, seconds)
            except Exception:
                self.metrics.count("BatchHoldFailures")
                log.exception(
                    "batch hold failed; the next renewal tries again",
                    extra={"occurrence_keys": [self.keys[i] for i in ids], "hold_s": seconds},
                )
                return
            self.holds += 1
            self.metrics.count("BatchHolds")
            if refused:
                self.metrics.count("BatchHoldFailures", len(refused))
                log.warning(
                    "messages of the batch not held (deleted or received elsewhere)",
                    extra={"occurrence_keys": [self.keys.get(i) for i in refused], "hold_s": seconds},
                )
            log.debug("batch held", extra={"occurrence_keys": [self.keys[i] for i in ids], "hold_s": seconds})
