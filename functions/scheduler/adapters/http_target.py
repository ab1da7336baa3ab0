"""The `http` target: a signed POST carrying the occurrence key as `Idempotency-Key` (docs/security.md).

SSRF guard: the host is resolved and every address checked, and the connection goes to the very address that was
checked, so DNS rebinding between check and call cannot redirect it. The check runs at submit time and again on
every call. Addresses fall in three classes (`classify`):

- **forbidden, in every mode**: link-local (169.254.0.0/16, fe80::/10 - which holds the cloud metadata endpoint
  169.254.169.254), the other known metadata addresses (AWS's IPv6 fd00:ec2::254, Alibaba's 100.100.100.200),
  unspecified (0.0.0.0/8, ::), multicast, broadcast and reserved ranges;
- **private**: loopback, RFC 1918, shared (100.64.0.0/10), unique-local and site-local IPv6 - allowed only where
  the deployment allows private targets (the local stack);
- **public**: everything else.

An IPv6 address that embeds an IPv4 one (IPv4-mapped `::ffff:a.b.c.d`, IPv4-compatible `::a.b.c.d`, 6to4
`2002:AABB:CCDD::/16`, Teredo `2001::/32`, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`) is judged by the IPv4
address it embeds; a host spelled as a number the way `inet_aton` reads it (`2852039166`,
`0251.0376.0251.0376`, `0xa9fea9fe`, `169.254.43518`) is that IPv4 address. Redirects are never followed (a 3xx
fails the occurrence): following one would send the signed call to an address nobody checked.

Plain `http://` URLs are taken only in local mode and where private targets are allowed (`AddressGuard.of`): on AWS
the call, its headers and its payload go over https only. `timeout_seconds` bounds the whole call (`CallDeadlines`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import email.utils
import heapq
import http.client
import ipaddress
import itertools
import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal
from urllib.parse import urlsplit

from scheduler.core.errors import InvalidRequest
from scheduler.core.metrics import NullMetrics
from scheduler.core.model import SCHEDULER_HEADERS, HttpTarget, Job, JobSpec, header_problem
from scheduler.core.ports import Metrics, SealFailed, SecretSealer, TargetCall, TargetFailure
from scheduler.core.retry import classify_http_status
from scheduler.core.secrecy import headers_to_send
from scheduler.core.timefmt import rfc3339
from scheduler.settings import Settings
from scheduler.signing import (
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
Resolver = Callable[[str, int], list[str]]
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
AddressClass = Literal["public", "private", "forbidden"]

#: Cloud metadata endpoints outside the link-local ranges.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200", "192.0.0.192", "fd20:ce::254")
)
_FORBIDDEN_V4 = tuple(ipaddress.ip_network(n) for n in ("0.0.0.0/8", "169.254.0.0/16", "255.255.255.255/32"))
_SHARED_V4 = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
#: What inet_aton accepts as an IPv4 address: 1-4 parts, each decimal, octal (0...) or hex (0x...).
_NUMERIC_HOST = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)


class BlockedAddress(Exception):
    pass


def resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one embeds (mapped, compatible, 6to4, NAT64), or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]  # the client's address (de-obfuscated)
    if any(ip in net for net in _NAT64):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    if ip in _IPV4_COMPATIBLE and int(ip) > 1:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def classify(address: str | IpAddress) -> AddressClass:
    """`public`, `private` (loopback and private ranges: allowed where configured) or `forbidden` (never)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0]) if isinstance(address, str) else address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.scope_id is not None:
            ip = ipaddress.IPv6Address(ip.exploded)
        inner = embedded_ipv4(ip)
        if inner is not None:
            return classify(inner)
    if ip in METADATA_ADDRESSES or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
        return "forbidden"
    if ip.is_loopback:  # before "reserved": ::1 lies in the reserved ::/8
        return "private"
    if ip.is_reserved or (isinstance(ip, ipaddress.IPv4Address) and any(ip in net for net in _FORBIDDEN_V4)):
        return "forbidden"
    if ip.is_private or (isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED_V4):
        return "private"
    if isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local:
        return "private"
    return "public"


def is_public(address: str) -> bool:
    return classify(address) == "public"


def literal_address(host: str) -> IpAddress | None:
    """The IP address a URL host spells, in any form a resolver would read it; None for a name."""
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare.split("%", 1)[0])
    except ValueError:
        pass
    if _NUMERIC_HOST.fullmatch(bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


_REFUSED = {
    "forbidden": "a link-local, cloud-metadata, unspecified, multicast or reserved address, which no target may reach",
    "private": "a private or loopback address; such targets are refused unless the deployment allows them",
}


class AddressGuard:
    """Decides which addresses an `http` target may reach, and whether over plain `http://`."""

    def __init__(self, allow_private: bool, resolver: Resolver = resolve, *, allow_http: bool | None = None) -> None:
        self.allow_private = allow_private
        self.resolver = resolver
        #: Plain http carries the signed call, its headers (an Authorization one too) and its payload in clear text,
        #: so only a deployment that calls receivers on its own machine or network takes it. Left out: as
        #: `allow_private` (a guard for such a deployment).
        self.allow_http = allow_private if allow_http is None else allow_http

    @classmethod
    def of(cls, settings: Settings) -> AddressGuard:
        """The guard of a deployment: private addresses where it allows them; plain http in local mode (the local
        stack, the tests) and where private targets are allowed (receivers on the deployment's own network, such as
        the emulated deployment's on 127.0.0.1) - never on AWS, whose stack sets both to false."""
        allow_private = settings.allow_private_targets
        return cls(allow_private, allow_http=allow_private or settings.local_mode)

    def scheme_refusal(self, url: str) -> str | None:
        """Why `url`'s scheme may not be called, or None."""
        if self.allow_http or urlsplit(url).scheme == "https":
            return None
        return (
            f"target url '{url}' uses plain http; this deployment calls http targets over https only, because the "
            "signed call, its headers and its payload would cross the network in clear text - use an https:// URL"
        )

    def refusal(self, address: str | IpAddress) -> str | None:
        """Why `address` may not be called, or None."""
        kind = classify(address)
        if kind == "public" or (kind == "private" and self.allow_private):
            return None
        return _REFUSED[kind]

    def addresses(self, url: str, timeout: float | None = None) -> tuple[str, int, list[str]]:
        """Resolve the URL's host and return (host, port, allowed addresses); BlockedAddress if any is refused.
        With `timeout`, a resolution that takes longer raises TimeoutError (the resolver goes on, on its thread)."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        literal = literal_address(host)
        if literal is not None:
            found = [str(literal)]
        else:
            try:
                if timeout is None:
                    found = self.resolver(host, port)
                else:
                    try:
                        found = _RESOLVING.submit(self.resolver, host, port).result(timeout)
                    except concurrent.futures.TimeoutError:
                        raise TimeoutError(f"resolving host '{host}' took over {timeout:.1f} s") from None
            except TimeoutError:
                raise
            except OSError as exc:
                raise BlockedAddress(f"cannot resolve host '{host}': {exc}") from exc
            if not found:
                raise BlockedAddress(f"host '{host}' has no address")
        for address in found:
            why = self.refusal(address)
            if why is not None:
                raise BlockedAddress(f"host '{host}' resolves to {address}, {why}")
        return host, port, found

    def check_spec(self, spec: JobSpec) -> None:
        """Submit-time check of a job's target (raises InvalidRequest, HTTP 422)."""
        if not isinstance(spec.target, HttpTarget):
            return
        url = str(spec.target.url)
        insecure = self.scheme_refusal(url)
        if insecure is not None:
            raise InvalidRequest(insecure, field="target.url")
        host = (urlsplit(url).hostname or "").rstrip(".")
        literal = literal_address(host)
        if literal is not None:
            why = self.refusal(literal)
            if why is not None:
                raise InvalidRequest(f"target url '{url}' points at {literal}, {why}", field="target.url")
            return
        if host == "localhost" or host.endswith((".localhost", ".internal", ".local")):
            if not self.allow_private:
                raise InvalidRequest(f"target url '{url}' points at a local host name", field="target.url")
            return
        try:
            self.addresses(url)
        except BlockedAddress as exc:
            if "cannot resolve" in str(exc) or "no address" in str(exc):
                return  # DNS can change; the call-time check decides. Refuse only what is known to be internal.
            raise InvalidRequest(str(exc), field="target.url") from exc


def check_headers(spec: JobSpec) -> None:
    """Submit-time check of an http target's headers (InvalidRequest naming `target.headers.<name>`)."""
    if isinstance(spec.target, HttpTarget):
        problem = header_problem(spec.target.headers)
        if problem is not None:
            raise InvalidRequest(problem[1], field=f"target.headers.{problem[0]}")


#: Where a call's host is resolved when the call has a deadline: getaddrinfo cannot be interrupted, so the call
#: stops waiting for it instead (a resolver stuck past its own timeouts holds one of these threads, not a call).
_RESOLVING = concurrent.futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="target-resolve")


class _Watch:
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
        self._due: list[tuple[float, int, _Watch]] = []
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, seconds: float) -> _Watch:
        """A deadline `seconds` from now; `finish` it when the call is over."""
        watch = _Watch(self.monotonic() + seconds, seconds)
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
        self.watch: _Watch | None = None

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
        self.watch: _Watch | None = None

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
    """Keep-alive connections to http targets (issue 14, item 3), by scheme, host, port and the address the SSRF
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


class HttpTargetInvoker:
    """Signs with signature v2 under every key of the job (`keys`: every root, at the job's key version and, during
    a rotation's overlap, the version it replaced), and with v1 under the tenant's key derived from `v1_secret` when
    that is given (the migration window). `now` is the wall clock the signature's timestamp and the overlap's end
    are read on."""

    def __init__(
        self,
        guard: AddressGuard,
        keys: KeyRing,
        v1_secret: str | None = None,
        max_timeout: float = 900,
        connections: TargetConnections | None = None,
        metrics: Metrics | None = None,
        sealer: SecretSealer | None = None,
        now: Callable[[], float] = time.time,
        deadlines: CallDeadlines | None = None,
    ) -> None:
        self.now = now
        self.guard = guard
        #: Opens the job's sealed header values to send them (scheduler.core.secrecy).
        self.sealer = sealer
        self.keys = keys
        self.v1_secret = v1_secret
        #: A call may not outlast the worker's own deadline (so its outcome is always recorded).
        self.max_timeout = max_timeout
        self.connections = connections or TargetConnections()
        #: `TargetConnectionsOpened` (a call that reused none) and `TargetConnectionsStale` (one the server had
        #: closed while idle, replaced): with the fires, how well connections are reused.
        self.metrics = metrics or NullMetrics()
        self.deadlines = deadlines or CallDeadlines()

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
        self, call: TargetCall, target: HttpTarget, job_headers: dict[str, str], watch: _Watch, timeout: float
    ) -> str | None:
        url = str(target.url)
        try:
            host, port, addresses = self.guard.addresses(url, timeout)
        except BlockedAddress as exc:
            raise TargetFailure("permanent", str(exc)) from exc
        except TimeoutError as exc:
            raise TargetFailure("retryable", f"not sent: {exc} (timeout_seconds is {timeout:g})") from exc
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
        watch: _Watch,
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
    def _timed_out(watch: _Watch, detail: str) -> str:
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
                "retryable", f"HTTP {response.status}", retry_after_seconds(response.getheader("Retry-After"))
            )
        if 300 <= response.status < 400:
            location = response.getheader("Location") or "no Location"
            raise TargetFailure(
                "permanent",
                f"HTTP {response.status} to {location} (not retried: redirects are not followed, because the "
                "redirected call would go to an address the SSRF guard never checked, carrying the signed request; "
                "point the job at the final URL)",
            )
        raise TargetFailure("permanent", f"HTTP {response.status} (not retried: the request itself was refused)")
