"""Call deadlines of the `http` target: `timeout_seconds` bounds the whole call, not each read.

A socket timeout bounds each read only, so a receiver that drips a byte a second would hold a call - and the
worker - indefinitely. Past a call's deadline its socket is shut down, so whatever the call is blocked in returns
at once.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import socket
import threading
import time
from collections.abc import Callable


class CallWatch:
    """One call's deadline: past it, the socket the call is using (`attach`) is shut down, so whatever the call is
    blocked in - the TLS handshake, a send, the status line, a header, the body - returns at once."""

    def __init__(self, deadline: float, seconds: float) -> None:
        self.deadline = deadline
        self.seconds = seconds
        self.fired = False
        self._done = False
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()

    def attach(self, sock: socket.socket) -> None:
        """Cut `sock` at the deadline (at once if it has passed)."""
        with self._lock:
            self._sock = sock
            if self.fired:
                _shut(sock)

    def detach(self) -> bool:
        """Leave the socket alone from now on (it is about to be closed, pooled or used for a retry); whether the
        deadline had cut it."""
        with self._lock:
            self._sock = None
            return self.fired

    def fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            if self._sock is not None:
                _shut(self._sock)

    def finish(self) -> None:
        """The call is over: its deadline is forgotten."""
        with self._lock:
            self._done = True
            self._sock = None

    @property
    def done(self) -> bool:
        return self._done


def _shut(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for an SSLSocket (whose own shutdown drops its TLS state under a reader). On
    # the socket object, never its descriptor's number: a closed socket's number may already be another's.
    with contextlib.suppress(OSError):  # closed or never connected: nothing is blocked on it
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class CallDeadlines:
    """Enforces each http call's wall-clock deadline (`timeout_seconds` for the whole call): a socket timeout bounds
    each read only, so a receiver that drips a byte a second would hold a call - and the worker - indefinitely.
    One daemon thread for all calls, started on first use, shuts down the socket of a call past its deadline."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self._due: list[tuple[float, int, CallWatch]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, seconds: float) -> CallWatch:
        """A deadline `seconds` from now; `finish` it when the call is over."""
        watch = CallWatch(self.monotonic() + seconds, seconds)
        with self._changed:
            heapq.heappush(self._due, (watch.deadline, next(self._order), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="target-deadlines", daemon=True)
                self._thread.start()
            self._changed.notify()
        return watch

    def _run(self) -> None:
        with self._changed:
            while True:
                while self._due and self._due[0][2].done:
                    heapq.heappop(self._due)
                if not self._due:
                    self._changed.wait()
                    continue
                wait = self._due[0][0] - self.monotonic()
                if wait > 0:
                    self._changed.wait(wait)
                    continue
                heapq.heappop(self._due)[2].fire()
