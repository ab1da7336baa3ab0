"""The `Heartbeats` port on threads: one daemon thread per heartbeat, woken every period until stopped."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class ThreadBeating:
    """One heartbeat's thread: beats every `every` seconds, until the beat returns False or `stop`.

    The beats keep to a fixed rate: each is due a period after the one before was due, not after it ended, so a slow
    beat (a renewal whose request took seconds) does not push back the ones after it; one that overran its period is
    followed at once. A lease renewed every third of its length thus keeps two periods of margin for a late renewal
    (docs/reliability.md)."""

    def __init__(self, beat: Callable[[], bool], every: float) -> None:
        self._beat = beat
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        due = time.monotonic() + self._every
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            if not self._beat():
                return
            due = max(due + self._every, time.monotonic())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class ThreadHeartbeats:
    def start(self, beat: Callable[[], bool], every: float) -> ThreadBeating:
        return ThreadBeating(beat, every)
