"""The SSRF guard of the `http` target: which addresses a call may reach (docs/security.md).

The host is resolved and every address checked; the `http` target then connects to the very address that was
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
`0251.0376.0251.0376`, `0xa9fea9fe`, `169.254.43518`) is that IPv4 address.

Plain `http://` URLs are taken only in local mode and where private targets are allowed (`AddressGuard.of`): on AWS
the call, its headers and its payload go over https only.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from typing import Literal
from urllib.parse import urlsplit

from scheduler.adapters.host_lookups import HostLookups, Resolver
from scheduler.core.errors import InvalidRequest
from scheduler.core.jobs.secrecy import redact_url
from scheduler.core.model.job import HttpTarget, JobSpec
from scheduler.settings import Settings

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
        #: Where a call with a deadline resolves its host (`addresses(..., timeout)`), shared fairly by the tenants.
        self.lookups = HostLookups(resolver)
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
            f"target url '{redact_url(url)}' uses plain http; this deployment calls http targets over https only, "
            "because the signed call, its headers and its payload would cross the network in clear text - use an "
            "https:// URL"
        )

    def refusal(self, address: str | IpAddress) -> str | None:
        """Why `address` may not be called, or None."""
        kind = classify(address)
        if kind == "public" or (kind == "private" and self.allow_private):
            return None
        return _REFUSED[kind]

    def addresses(self, url: str, timeout: float | None = None, *, tenant: str = "") -> tuple[str, int, list[str]]:
        """Resolve the URL's host and return (host, port, allowed addresses); BlockedAddress if any is refused.
        With `timeout` (what is left of a call's deadline), the lookup is one of `tenant`'s on the guard's lookup
        threads (scheduler.adapters.host_lookups): one that takes longer raises TimeoutError (the resolver goes on,
        on its thread), and LookupsBusy when no thread is free."""
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
                    found = self.lookups.resolve(tenant, host, port, timeout)
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
                raise InvalidRequest(f"target url '{redact_url(url)}' points at {literal}, {why}", field="target.url")
            return
        if host == "localhost" or host.endswith((".localhost", ".internal", ".local")):
            if not self.allow_private:
                raise InvalidRequest(f"target url '{redact_url(url)}' points at a local host name", field="target.url")
            return
        try:
            self.addresses(url)
        except BlockedAddress as exc:
            if "cannot resolve" in str(exc) or "no address" in str(exc):
                return  # DNS can change; the call-time check decides. Refuse only what is known to be internal.
            raise InvalidRequest(str(exc), field="target.url") from exc
