"""The `http` target: a signed POST carrying the occurrence key as `Idempotency-Key` (docs/security.md).

Every call goes to an address the SSRF guard checked (`scheduler.adapters.address_guard`), pinned: the connection
goes to the very address that was checked, so DNS rebinding between check and call cannot redirect it. Redirects
are never followed (a 3xx fails the occurrence): following one would send the signed call to an address nobody
checked. `timeout_seconds` bounds the whole call (`scheduler.adapters.call_deadlines`).
"""

from __future__ import annotations

import email.utils
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlsplit

from scheduler.adapters.address_guard import AddressGuard, BlockedAddress
from scheduler.adapters.call_deadlines import CallDeadlines, CallWatch
from scheduler.adapters.host_lookups import LookupsBusy
from scheduler.core.errors import InvalidRequest
from scheduler.core.execution.retry import classify_http_status
from scheduler.core.jobs.secrecy import headers_to_send, redact_url
from scheduler.core.model.job import SCHEDULER_HEADERS, HttpTarget, Job, JobSpec, header_problem
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Metrics, SealFailed, SecretSealer, TargetCall, TargetFailure
from scheduler.core.runtime.metrics import NullMetrics
from scheduler.security.signing import (
    ATTEMPT_HEADER,
    FENCING_TOKEN_HEADER,
    OCCURRENCE_KEY_HEADER,
    SCHEDULED_FOR_HEADER,
    SIGNATURE_HEADER,
    KeyRing,
    SignedCall,
    sign_v2,
    signing_versions,
    tenant_key,
)

USER_AGENT = "punctual-scheduler/0.1"


def check_headers(spec: JobSpec) -> None:
    """Submit-time check of an http target's headers (InvalidRequest naming `target.headers.<name>`)."""
    if isinstance(spec.target, HttpTarget):
        problem = header_problem(spec.target.headers)
        if problem is not None:
            raise InvalidRequest(problem[1], field=f"target.headers.{problem[0]}")


def _connected(address: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP connection to the checked address, without Nagle's delay: http.client writes a request's head and
    body separately, and on a kept-alive connection the body would wait for the server's delayed ACK of the head
    (40 ms a call, measured on loopback)."""
    sock = socket.create_connection((address, port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a pre-checked address, with SNI and certificate checks for the original host name."""

    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address
        #: The deadline of the call that connects: it covers the TLS handshake too.
        self.watch: CallWatch | None = None

    def connect(self) -> None:
        sock = _connected(self._address, self.port, self.timeout)
        context: ssl.SSLContext = self._context  # type: ignore[attr-defined]
        tls = context.wrap_socket(sock, server_hostname=self.host, do_handshake_on_connect=False)
        if self.watch is not None:  # before the handshake, which a receiver could drip too
            self.watch.attach(tls)
        tls.do_handshake()
        self.sock = tls


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address
        self.watch: CallWatch | None = None

    def connect(self) -> None:
        self.sock = _connected(self._address, self.port, self.timeout)
        if self.watch is not None:
            self.watch.attach(self.sock)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Parse Retry-After: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def host_header(host: str, port: int, scheme: str) -> str:
    """The Host header http.client sends (and signature v2 covers): the port only when it is not the default."""
    name = f"[{host}]" if ":" in host else host
    return name if port == (443 if scheme == "https" else 80) else f"{name}:{port}"


#: How long an idle connection to a target is kept for the next call to the same host at the same checked address:
#: under the 5 s keep-alive of common servers (Node's, for one). One a server closed anyway is replaced (`invoke`).
IDLE_REUSE_SECONDS = 4.0
#: Idle connections kept per host and address: one per record a worker batch runs at once.
IDLE_PER_HOST = 10
#: What a reused connection raises when the server had closed it while it was idle: no response byte came back.
_CLOSED_WHILE_IDLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)

_Connection = http.client.HTTPConnection
_Key = tuple[str, str, int, str]


class TargetConnections:
    """Keep-alive connections to http targets, by scheme, host, port and the address the SSRF
    guard checked for this very call: a connection is reused only to the address just checked, so DNS rebinding
    cannot reach through a pooled connection either. A reused HTTPS connection keeps its TLS session (no handshake:
    its CPU and two round trips). Thread-safe: a worker batch's records call at once."""

    def __init__(
        self,
        idle_seconds: float = IDLE_REUSE_SECONDS,
        per_host: int = IDLE_PER_HOST,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_seconds = idle_seconds
        self.per_host = per_host
        self.monotonic = monotonic
        self._idle: dict[_Key, list[tuple[float, _Connection]]] = {}
        self._lock = threading.Lock()

    def take(self, key: _Key) -> _Connection | None:
        """The most recently used idle connection for `key`, or None; those idle too long are closed."""
        expired: list[_Connection] = []
        found = None
        with self._lock:
            idle = self._idle.get(key, [])
            now = self.monotonic()
            while idle and now - idle[0][0] > self.idle_seconds:  # oldest first
                expired.append(idle.pop(0)[1])
            if idle:
                found = idle.pop()[1]
            if not idle:
                self._idle.pop(key, None)
        for connection in expired:
            connection.close()
        return found

    def give(self, key: _Key, connection: _Connection) -> None:
        """Keep `connection` (its last response read to the end) for the next call to `key`."""
        dropped = None
        with self._lock:
            idle = self._idle.setdefault(key, [])
            idle.append((self.monotonic(), connection))
            if len(idle) > self.per_host:
                dropped = idle.pop(0)[1]
        if dropped is not None:
            dropped.close()


class _StaleConnection(Exception):
    """A reused connection was closed by the server before the request reached it."""


@dataclass(eq=False)
class HttpTargetInvoker:
    """Signs with signature v2 under every key of the job (`keys`: every root, at the job's key version and, during
    a rotation's overlap, the version it replaced), and with v1 under the tenant's key derived from `v1_secret` when
    that is given (the migration window). `now` is the wall clock the signature's timestamp and the overlap's end
    are read on."""

    guard: AddressGuard
    keys: KeyRing
    v1_secret: str | None = None
    #: A call may not outlast the worker's own deadline (so its outcome is always recorded).
    max_timeout: float = 900
    connections: TargetConnections = field(default_factory=TargetConnections)
    #: `TargetConnectionsOpened` (a call that reused none) and `TargetConnectionsStale` (one the server had
    #: closed while idle, replaced): with the fires, how well connections are reused.
    metrics: Metrics = field(default_factory=NullMetrics)
    #: Opens the job's sealed header values to send them (scheduler.core.jobs.secrecy).
    sealer: SecretSealer | None = None
    now: Callable[[], float] = time.time
    deadlines: CallDeadlines = field(default_factory=CallDeadlines)

    def invoke(self, call: TargetCall) -> str | None:
        target = call.job.spec.target
        assert isinstance(target, HttpTarget)
        try:
            job_headers = headers_to_send(call.job, self.sealer)
        except SealFailed as exc:  # never sent with a placeholder in place of its secret
            raise TargetFailure("permanent", f"not sent: {exc}") from exc
        except Exception as exc:  # the key service failed (throttled, unreachable): nothing was sent, try again
            raise TargetFailure("retryable", f"not sent: its header values could not be opened: {exc}") from exc
        problem = header_problem(job_headers)
        if problem is not None:  # a job stored before the rule: refused before anything is sent
            raise TargetFailure("permanent", f"not sent: {problem[1]}")
        insecure = self.guard.scheme_refusal(str(target.url))
        if insecure is not None:  # a job stored before https was required, or moved to a stricter deployment
            raise TargetFailure("permanent", f"not sent: {insecure}")
        # `timeout_seconds` bounds the whole call, from resolving the host to the response's last byte.
        timeout = min(float(target.timeout_seconds), self.max_timeout)
        watch = self.deadlines.watch(timeout)
        try:
            return self._call(call, target, job_headers, watch, timeout)
        finally:
            watch.finish()

    def _call(
        self, call: TargetCall, target: HttpTarget, job_headers: dict[str, str], watch: CallWatch, timeout: float
    ) -> str | None:
        url = str(target.url)
        left = watch.deadline - self.deadlines.monotonic()  # the lookup is the call's first step: within its deadline
        try:
            host, port, addresses = self.guard.addresses(url, max(left, 0.0), tenant=call.job.tenant)
        except BlockedAddress as exc:
            raise TargetFailure("permanent", str(exc)) from exc
        except TimeoutError as exc:
            raise TargetFailure("retryable", f"not sent: {exc} (timeout_seconds is {timeout:g})") from exc
        except LookupsBusy as exc:
            raise TargetFailure("retryable", f"not sent: {exc}") from exc
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        body = json.dumps(call.job.spec.payload, separators=(",", ":")).encode()
        signed = SignedCall(
            method=target.method,
            host=host_header(host, port, parts.scheme),
            path=path,
            occurrence_key=call.occurrence_key,
            fencing_token=call.fencing_token,
            scheduled_for=rfc3339(call.scheduled_for),
            attempt=call.attempt,
        )
        v1_key = tenant_key(self.v1_secret, call.job.tenant) if self.v1_secret is not None else None
        headers = {
            # The scheduler's headers win, whatever the case of a job's header of the same name.
            **{k: v for k, v in job_headers.items() if k.lower() not in SCHEDULER_HEADERS},
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            OCCURRENCE_KEY_HEADER: signed.occurrence_key,
            "X-Scheduler-Job-Id": call.job.job_id,
            SCHEDULED_FOR_HEADER: signed.scheduled_for,
            ATTEMPT_HEADER: str(signed.attempt),
            FENCING_TOKEN_HEADER: str(signed.fencing_token),
            SIGNATURE_HEADER: self._signature(call.job, signed, body, v1_key),
        }
        key = (parts.scheme, host, port, addresses[0])
        # An at-most-once job's call always goes on a new connection: on a reused one, a server that closed it
        # while idle and one that died after taking the request look alike, and the second must not be retried.
        reuse = call.job.spec.delivery == "at_least_once"
        pooled = self.connections.take(key) if reuse else None
        if pooled is not None:
            try:
                response = self._exchange(pooled, watch, target.method, path, body, headers, fresh=False)
            except _StaleConnection:
                # The server closed it while it was idle (or, rarely, died with the request): an at-least-once
                # job's call goes again at once on a new connection, with the same key and fencing token.
                self.metrics.count("TargetConnectionsStale")
            else:
                return self._verdict(response, key, pooled, reuse)
        connection_type = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
        connection = connection_type(host, addresses[0], port, timeout)
        self.metrics.count("TargetConnectionsOpened")
        response = self._exchange(connection, watch, target.method, path, body, headers, fresh=True)
        return self._verdict(response, key, connection, reuse)

    def _signature(self, job: Job, signed: SignedCall, body: bytes, v1_key: str | None) -> str:
        now = self.now()
        versions = signing_versions(job.key_version, job.previous_key_until, datetime.fromtimestamp(now, UTC))
        return sign_v2(self.keys.signing_keys(job.job_id, versions), signed, body, int(now), v1_key=v1_key)

    def _exchange(
        self,
        connection: _Connection,
        watch: CallWatch,
        method: str,
        path: str,
        body: bytes,
        headers: dict[str, str],
        *,
        fresh: bool,
    ) -> http.client.HTTPResponse:
        """One request and its response, read (up to 64 KiB), by the call's deadline (`watch`). On a failure the
        connection is closed: before the request left, nothing happened (retryable); after, the effect may have
        happened (ambiguous) - the deadline's cut is a timeout like a socket's. A reused connection that the
        server had closed while it was idle raises `_StaleConnection` instead."""
        sent = False
        remaining = watch.deadline - self.deadlines.monotonic()
        try:
            if remaining <= 0:
                raise TimeoutError("the deadline passed before the request was sent")
            # Each blocking step still has a socket timeout (no longer than what is left); the deadline bounds them
            # all together.
            connection.timeout = remaining
            if fresh:
                assert isinstance(connection, _PinnedHTTPConnection | _PinnedHTTPSConnection)
                connection.watch = watch
                connection.connect()
            elif connection.sock is not None:
                connection.sock.settimeout(remaining)
                watch.attach(connection.sock)
            connection.request(method, path, body=body, headers=headers)
            sent = True
            response = connection.getresponse()
            response.read(64 * 1024)
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            cut = watch.detach()
            connection.close()
            if cut:  # whatever the interrupted step raised, the call timed out
                message = self._timed_out(watch, f"cut: {type(exc).__name__}")
                raise TargetFailure("ambiguous" if sent else "retryable", message) from exc
            if not fresh and isinstance(exc, _CLOSED_WHILE_IDLE):
                raise _StaleConnection from exc
            message = f"{type(exc).__name__}: {exc}"
            raise TargetFailure("ambiguous" if sent else "retryable", message) from exc
        if watch.detach():
            # A shut socket reads as the end of the response, so what was read may be cut short (a truncated body
            # or header block): the call timed out, even if the response happened to end just in time.
            connection.close()
            raise TargetFailure("ambiguous", self._timed_out(watch, "while the response was read"))
        return response

    @staticmethod
    def _timed_out(watch: CallWatch, detail: str) -> str:
        return f"TimeoutError: the call did not finish within its timeout of {watch.seconds:g} s ({detail})"

    def _verdict(
        self, response: http.client.HTTPResponse, key: _Key, connection: _Connection, reuse: bool
    ) -> str | None:
        # Kept only when its response was read to the end and the server keeps it open.
        if reuse and response.isclosed() and not response.will_close:
            self.connections.give(key, connection)
        else:
            connection.close()
        verdict = classify_http_status(response.status)
        if verdict == "ok":
            return f"HTTP {response.status}"
        if verdict == "retryable":
            raise TargetFailure(
                "retryable",
                f"HTTP {response.status}",
                retry_after_seconds(response.getheader("Retry-After")),
                status=response.status,
            )
        if 300 <= response.status < 400:
            # A redirect may carry a token of its own (a pre-signed URL): shown like the target's URL.
            location = redact_url(response.getheader("Location") or "") or "no Location"
            raise TargetFailure(
                "permanent",
                f"HTTP {response.status} to {location} (not retried: redirects are not followed, because the "
                "redirected call would go to an address the SSRF guard never checked, carrying the signed request; "
                "point the job at the final URL)",
            )
        raise TargetFailure("permanent", f"HTTP {response.status} (not retried: the request itself was refused)")
