"""The `http` target: a signed POST carrying the occurrence key as `Idempotency-Key`.

SSRF guard: the host is resolved and every address checked (private, loopback, link-local - which includes the
instance metadata address -, multicast, reserved and unspecified ranges are refused unless configured), and
the connection goes to the very address that was checked, so DNS rebinding between check and call cannot
redirect it. The check runs at submit time and again on every call.
"""

from __future__ import annotations

import email.utils
import http.client
import ipaddress
import json
import socket
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

from scheduler.core.errors import InvalidRequest
from scheduler.core.model import HttpTarget, JobSpec
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.core.retry import classify_http_status
from scheduler.core.timefmt import rfc3339
from scheduler.signing import SIGNATURE_HEADER, sign, tenant_key

USER_AGENT = "punctual-scheduler/0.1"
Resolver = Callable[[str, int], list[str]]


class BlockedAddress(Exception):
    pass


def resolve(host: str, port: int) -> list[str]:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def is_public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return not (
        ip.is_private
        or ip.is_loopback
        or ip.is_link_local
        or ip.is_multicast
        or ip.is_reserved
        or ip.is_unspecified
        or (isinstance(ip, ipaddress.IPv4Address) and ip in ipaddress.ip_network("100.64.0.0/10"))
    )


class AddressGuard:
    """Decides which addresses an `http` target may reach."""

    def __init__(self, allow_private: bool, resolver: Resolver = resolve) -> None:
        self.allow_private = allow_private
        self.resolver = resolver

    def addresses(self, url: str) -> tuple[str, int, list[str]]:
        """Resolve the URL's host and return (host, port, allowed addresses); BlockedAddress if any is refused."""
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            found = self.resolver(host, port)
        except OSError as exc:
            raise BlockedAddress(f"cannot resolve host '{host}': {exc}") from exc
        if not found:
            raise BlockedAddress(f"host '{host}' has no address")
        if not self.allow_private:
            for address in found:
                if not is_public(address):
                    raise BlockedAddress(
                        f"host '{host}' resolves to {address}, a private, loopback, link-local or reserved address; "
                        "such targets are refused unless the deployment allows them"
                    )
        return host, port, found

    def check_spec(self, spec: JobSpec) -> None:
        """Submit-time check of a job's target (raises InvalidRequest, HTTP 422)."""
        if not isinstance(spec.target, HttpTarget):
            return
        url = str(spec.target.url)
        parts = urlsplit(url)
        host = parts.hostname or ""
        try:
            literal = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            literal = None
        if literal is not None:
            if not self.allow_private and not is_public(str(literal)):
                raise InvalidRequest(
                    f"target url '{url}' points at a private, loopback, link-local or reserved address",
                    field="target.url",
                )
            return
        if host == "localhost" or host.endswith(".localhost") or host.endswith(".internal"):
            if not self.allow_private:
                raise InvalidRequest(f"target url '{url}' points at a local host name", field="target.url")
            return
        try:
            self.addresses(url)
        except BlockedAddress as exc:
            if "cannot resolve" in str(exc) or "no address" in str(exc):
                return  # DNS can change; the call-time check decides. Refuse only what is known to be internal.
            raise InvalidRequest(str(exc), field="target.url") from exc


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS to a pre-checked address, with SNI and certificate checks for the original host name."""

    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


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


class HttpTargetInvoker:
    def __init__(self, guard: AddressGuard, signing_secret: str) -> None:
        self.guard = guard
        self.signing_secret = signing_secret

    def invoke(self, call: TargetCall) -> str | None:
        target = call.job.spec.target
        assert isinstance(target, HttpTarget)
        url = str(target.url)
        try:
            host, port, addresses = self.guard.addresses(url)
        except BlockedAddress as exc:
            raise TargetFailure("permanent", str(exc)) from exc
        parts = urlsplit(url)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        body = json.dumps(call.job.spec.payload, separators=(",", ":")).encode()
        headers = {
            **target.headers,
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Idempotency-Key": call.occurrence_key,
            "X-Scheduler-Job-Id": call.job.job_id,
            "X-Scheduler-Scheduled-For": rfc3339(call.scheduled_for),
            "X-Scheduler-Attempt": str(call.attempt),
            "X-Scheduler-Fencing-Token": str(call.fencing_token),
            SIGNATURE_HEADER: sign(tenant_key(self.signing_secret, call.job.tenant), body),
        }
        connection_type = _PinnedHTTPSConnection if parts.scheme == "https" else _PinnedHTTPConnection
        connection = connection_type(host, addresses[0], port, float(target.timeout_seconds))
        sent = False
        try:
            connection.connect()
            connection.request(target.method, path, body=body, headers=headers)
            sent = True
            response = connection.getresponse()
            response.read(64 * 1024)
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            # Before the request left, nothing happened: retry. After, the effect may have happened: ambiguous.
            message = f"{type(exc).__name__}: {exc}"
            raise TargetFailure("ambiguous" if sent else "retryable", message) from exc
        finally:
            connection.close()
        verdict = classify_http_status(response.status)
        if verdict == "ok":
            return f"HTTP {response.status}"
        if verdict == "retryable":
            raise TargetFailure(
                "retryable", f"HTTP {response.status}", retry_after_seconds(response.getheader("Retry-After"))
            )
        raise TargetFailure("permanent", f"HTTP {response.status} (not retried: the request itself was refused)")
