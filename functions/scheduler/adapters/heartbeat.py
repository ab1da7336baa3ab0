"""The `Heartbeats` port on threads: one daemon thread per heartbeat, woken every period until stopped."""

from __future__ import annotations

import threading
from collections.abc import Callable


class ThreadBeating:
    """One heartbeat's thread: waits `every` seconds, beats, and again, until the beat returns False or `stop`."""

    def __init__(self, beat: Callable[[], bool], every: float) -> None:
        self._beat = beat
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            if not self._beat():
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class ThreadHeartbeats:
    def start(self, beat: Callable[[], bool], every: float) -> ThreadBeating:
        return ThreadBeating(beat, every)
