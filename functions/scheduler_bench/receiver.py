"""A cooperating HTTP target on 127.0.0.1: it records every call (arrival time, occurrence key, fencing token)
and applies each occurrence's effect at most once, as docs/design.md asks of a cooperating target: once per
`Idempotency-Key`, refusing a fencing token lower than one it already accepted for that key."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Call:
    """One HTTP call as it arrived: wall-clock time and the scheduler's headers."""

    at: float
    key: str
    job_id: str
    scheduled_for: str
    token: int


class ReceiverServer(ThreadingHTTPServer):
    """The receiver's HTTP server, with a listen backlog a herd's concurrent connects fit in: socketserver's
    default of 5 made the kernel drop the connects beyond it, and each dropped one waited a whole second for its
    retransmission inside the worker's target call (a real target - a load balancer, a service behind one - does
    not refuse connections at 5)."""

    request_queue_size = 1024
    daemon_threads = True


@dataclass
class Receiver:
    """The target of the benchmark's jobs (`start()`, then `url`)."""

    calls: list[Call] = field(default_factory=list)
    #: Effects applied per occurrence key (a cooperating target applies each key once).
    effects: Counter[str] = field(default_factory=Counter)
    _tokens: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _handler_cpu: float = 0.0
    _acceptor: threading.Thread | None = None

    def start(self) -> Receiver:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def handle_one_request(self) -> None:
                # Per request, not per connection: a worker keeps its connections alive, so a connection's CPU
                # would be counted only when it closes, after the measurement that must take it out.
                began = time.thread_time()
                try:
                    super().handle_one_request()
                finally:
                    outer.add_cpu(time.thread_time() - began)

            def do_POST(self) -> None:
                arrived = time.time()
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.record(
                    Call(
                        arrived,
                        self.headers.get("Idempotency-Key", ""),
                        self.headers.get("X-Scheduler-Job-Id", ""),
                        self.headers.get("X-Scheduler-Scheduled-For", ""),
                        int(self.headers.get("X-Scheduler-Fencing-Token") or 0),
                    )
                )
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ReceiverServer(("127.0.0.1", 0), Handler)
        self._acceptor = threading.Thread(target=self.server.serve_forever, name="bench-receiver", daemon=True)
        self._acceptor.start()
        return self

    def add_cpu(self, seconds: float) -> None:
        with self._lock:
            self._handler_cpu += seconds

    def cpu_seconds(self) -> float:
        """CPU time the receiver has used in this process so far (its accept loop and its connections' threads):
        the target's work, which the benchmark takes out of the in-process worker's CPU time."""
        accepting = 0.0
        if self._acceptor is not None and self._acceptor.ident is not None:
            try:
                accepting = time.clock_gettime(time.pthread_getcpuclockid(self._acceptor.ident))
            except (OSError, AttributeError):  # the thread ended, or a platform without per-thread clocks
                accepting = 0.0
        with self._lock:
            return self._handler_cpu + accepting

    def record(self, call: Call) -> None:
        with self._lock:
            self.calls.append(call)
            if call.token >= self._tokens.get(call.key, 0) and call.key not in self.effects:
                self.effects[call.key] += 1
            self._tokens[call.key] = max(call.token, self._tokens.get(call.key, 0))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def wait_for(self, keys: set[str], timeout: float) -> int:
        """Wait until every key of `keys` arrived (or `timeout` seconds); returns how many did."""
        deadline = time.time() + timeout
        while True:
            with self._lock:
                seen = len(keys & {c.key for c in self.calls})
            if seen >= len(keys) or time.time() >= deadline:
                return seen
            time.sleep(0.1)

    def first_calls(self, due: Mapping[str, datetime]) -> dict[str, float]:
        """When each job of `due` (job id -> when it was due) first reached the receiver (epoch seconds)."""
        with self._lock:
            calls = [c for c in self.calls if c.job_id in due]
        first: dict[str, float] = {}
        for call in calls:
            first[call.job_id] = min(call.at, first.get(call.job_id, call.at))
        return first

    def lateness(self, due: Mapping[str, datetime]) -> list[float]:
        """How late each job of `due` first reached the receiver, in seconds (negative: early)."""
        return [at - due[job_id].timestamp() for job_id, at in self.first_calls(due).items()]

    def summary(self, keys: set[str] | None = None) -> dict[str, Any]:
        """Over the calls for `keys` (all calls when None): raw calls, distinct keys, duplicate calls (what a
        target that ignores the key would have applied twice), effects applied per key (must be 1), missing."""
        with self._lock:
            calls = [c for c in self.calls if keys is None or c.key in keys]
            effects = Counter({k: n for k, n in self.effects.items() if keys is None or k in keys})
        per_key = Counter(c.key for c in calls)
        out: dict[str, Any] = {
            "raw_calls": len(calls),
            "distinct_keys": len(per_key),
            "keys_called_more_than_once": sum(1 for n in per_key.values() if n > 1),
            "duplicate_calls": sum(n - 1 for n in per_key.values()),
            "max_calls_per_key": max(per_key.values(), default=0),
            "max_effects_per_key": max(effects.values(), default=0),
            "keys_with_more_than_one_effect": sum(1 for n in effects.values() if n > 1),
        }
        if keys is not None:
            out["missing_keys"] = len(keys - set(per_key))
        return out
