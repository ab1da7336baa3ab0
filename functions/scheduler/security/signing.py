"""Signing of HTTP target calls, and the functions a receiver uses to verify them (docs/security.md).

Every call carries `X-Scheduler-Signature`, a comma-separated list of `name=value` items:

- `t=<unix seconds>`: when the call was signed;
- `v2=<key id>:<hex HMAC-SHA256>`, once per active key of the job: the signature v2, over the timestamp, the key id,
  the method, the host and the request target (path and query), the occurrence key, the fencing token, the
  scheduled instant, the attempt and the SHA-256 of the body (`canonical_v2`). The key is the job's own key
  (`job_key`), which the job's tenant fetches from `GET /v1/jobs/{job_id}/signing-keys`. A job's key has versions
  (`versioned_key_id`): rotating it (`POST /v1/jobs/{job_id}/signing-keys/rotate`) makes the next version current,
  and the replaced one keeps signing, as a second `v2` item, until its overlap ends (`signing_versions`);
- `v1=<hex HMAC-SHA256>` over `"<t>.<raw body>"` with the tenant's v1 key, during the migration window only
  (`SCHEDULER_SIGNATURE_V1`). v1 does not cover the occurrence key, the token or the URL: verify v2.

A receiver checks v2 with `verify_v2` (or its own code following docs/security.md), compares in constant time and
refuses calls older than a tolerance (replays):

    from scheduler.security.signing import verify_v2
    call = verify_v2(keys, request.method, request.headers["Host"], request.full_path, request.headers, body)
    # raises InvalidSignature; `call.occurrence_key`, `call.fencing_token`, ... are the signed values

`verify` and `verify_v2` raise InvalidSignature and nothing else for any input a caller may hand them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

SIGNATURE_HEADER = "X-Scheduler-Signature"
DEFAULT_TOLERANCE_SECONDS = 300
#: The headers whose values signature v2 covers (the receiver reads them from the request).
OCCURRENCE_KEY_HEADER = "Idempotency-Key"
FENCING_TOKEN_HEADER = "X-Scheduler-Fencing-Token"
SCHEDULED_FOR_HEADER = "X-Scheduler-Scheduled-For"
ATTEMPT_HEADER = "X-Scheduler-Attempt"
V2_PREFIX = "punctual-v2"


class InvalidSignature(Exception):
    """The signature is missing, malformed, wrong, or too old."""


def _hmac_hex(key: str, message: bytes) -> str:
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def tenant_key(master_secret: str, tenant: str) -> str:
    """The per-tenant v1 signing key (hex), derived from the master secret."""
    return _hmac_hex(master_secret, f"tenant:{tenant}".encode())


def job_key(root_secret: str, key_id: str, job_id: str) -> str:
    """The v2 signing key (hex) of one job under one root key: only that job's signatures verify with it. `key_id`
    is the root's id for the job's first key version, `versioned_key_id` for a later one."""
    return _hmac_hex(root_secret, f"job:{key_id}:{job_id}".encode())


def versioned_key_id(root_key_id: str, version: int) -> str:
    """The key id of version `version` of a job's key under one root: the root's own id for version 1 (the key every
    job had before keys had versions, so existing receivers keep verifying), `<root id>.<version>` after. A root id
    is alphanumeric, so a later version's id (and the key `job_key` derives for it) is never another root's."""
    if version < 1:
        raise ValueError(f"a key version is 1 or more, not {version}")
    return root_key_id if version == 1 else f"{root_key_id}.{version}"


def signing_versions(current: int, previous_until: datetime | None, now: datetime) -> list[int]:
    """The versions of a job's key that sign a call at `now`: the current one, and the one it replaced while that
    one's overlap lasts (until `previous_until`, exclusive). A revoke (an overlap of 0) leaves the current one."""
    if current > 1 and previous_until is not None and now < previous_until:
        return [current, current - 1]
    return [current]


@dataclass(frozen=True)
class KeyRing:
    """The v2 root keys by key id, and which one is current (`SCHEDULER_SIGNING_KEYS`:
    `{"current": "<kid>", "<kid>": "<secret>", ...}`). Every root in the ring signs (the current one first), so a
    rotation adds a key, lets receivers fetch it, makes it current, and finally removes the old one."""

    current: str
    roots: Mapping[str, str]

    @classmethod
    def parse(cls, text: str) -> KeyRing:
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"signing keys are not JSON: {exc}") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("current"), str):
            raise ValueError('signing keys must be a JSON object {"current": "<kid>", "<kid>": "<secret>", ...}')
        roots = {k: v for k, v in raw.items() if k != "current"}
        for kid, secret in roots.items():
            if not isinstance(secret, str) or len(secret) < 16 or not kid.isascii() or not kid.isalnum():
                raise ValueError(f"signing key '{kid}': the id must be alphanumeric and the secret 16+ characters")
        if raw["current"] not in roots:
            raise ValueError(f"the current signing key '{raw['current']}' is not in the ring")
        return cls(raw["current"], roots)

    def key_ids(self) -> list[str]:
        """Every key id, the current one first."""
        return [self.current, *sorted(k for k in self.roots if k != self.current)]

    def job_keys(self, job_id: str, version: int = 1) -> dict[str, str]:
        """Version `version` of the job's key under every root, by key id (the current root first)."""
        return {
            versioned_key_id(kid, version): job_key(self.roots[kid], versioned_key_id(kid, version), job_id)
            for kid in self.key_ids()
        }

    def signing_keys(self, job_id: str, versions: list[int]) -> dict[str, str]:
        """The keys a call of the job is signed with, by key id: every version in `versions` (`signing_versions`,
        the current one first) under every root."""
        return {kid: key for version in versions for kid, key in self.job_keys(job_id, version).items()}


@dataclass(frozen=True)
class SignedCall:
    """What signature v2 covers, besides the timestamp, the key id and the body."""

    method: str
    #: The Host header as sent: the URL's host, with `:port` when the URL names a non-default port.
    host: str
    #: The request target: the path, and `?query` when there is one.
    path: str
    occurrence_key: str
    fencing_token: int
    #: RFC 3339, exactly as in X-Scheduler-Scheduled-For.
    scheduled_for: str
    attempt: int


@dataclass(frozen=True)
class VerifiedCall(SignedCall):
    timestamp: int
    key_id: str


def canonical_v2(timestamp: int, key_id: str, call: SignedCall, body: bytes) -> bytes:
    """The bytes signature v2 signs: one line per field, in this order."""
    lines = [
        V2_PREFIX,
        str(timestamp),
        key_id,
        call.method.upper(),
        call.host.lower(),
        call.path,
        call.occurrence_key,
        str(call.fencing_token),
        call.scheduled_for,
        str(call.attempt),
        hashlib.sha256(body).hexdigest(),
    ]
    return "\n".join(lines).encode()


def sign(key: str, body: bytes, timestamp: int | None = None) -> str:
    """The v1 signature header value for `body` at `timestamp` (default: now)."""
    ts = int(time.time()) if timestamp is None else timestamp
    return f"t={ts},v1={_hmac_hex(key, f'{ts}.'.encode() + body)}"


def sign_v2(
    keys: Mapping[str, str],
    call: SignedCall,
    body: bytes,
    timestamp: int | None = None,
    v1_key: str | None = None,
) -> str:
    """The signature header: `t`, one `v2` per key (key id -> job key), and `v1` when `v1_key` is given."""
    ts = int(time.time()) if timestamp is None else timestamp
    items = [f"t={ts}"]
    if v1_key is not None:
        items.append(f"v1={_hmac_hex(v1_key, f'{ts}.'.encode() + body)}")
    items += [f"v2={kid}:{_hmac_hex(key, canonical_v2(ts, kid, call, body))}" for kid, key in keys.items()]
    return ",".join(items)


def _items(header: str | None) -> list[tuple[str, str]]:
    if not header or not isinstance(header, str):
        raise InvalidSignature("missing signature header")
    return [(name.strip(), value.strip()) for name, _, value in (p.partition("=") for p in header.split(",")) if _]


def _timestamp(items: list[tuple[str, str]], tolerance: float, now: float | None) -> int:
    given = [value for name, value in items if name == "t"]
    if len(given) != 1 or not given[0].isascii() or not given[0].isdigit():
        raise InvalidSignature("malformed signature header: one 't=<unix seconds>' is required")
    ts = int(given[0])
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance:
        raise InvalidSignature("signature timestamp outside the tolerance (replay?)")
    return ts


def _equal(expected: str, given: str) -> bool:
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def verify(
    key: str, header: str | None, body: bytes, tolerance: int = DEFAULT_TOLERANCE_SECONDS, now: float | None = None
) -> int:
    """Check a v1 signature; returns its timestamp. Raises InvalidSignature when it does not hold."""
    items = _items(header)
    ts = _timestamp(items, tolerance, now)
    given = [value for name, value in items if name == "v1"]
    if not given:
        raise InvalidSignature("malformed signature header: no v1 signature")
    expected = _hmac_hex(key, f"{ts}.".encode() + bytes(body))
    if not any(_equal(expected, value) for value in given):
        raise InvalidSignature("signature does not match")
    return ts


def _header(headers: Mapping[str, str], name: str) -> str:
    low = name.lower()
    found = [v for k, v in headers.items() if isinstance(k, str) and k.lower() == low]
    if len(found) != 1 or not isinstance(found[0], str):
        raise InvalidSignature(f"the request must carry exactly one {name} header")
    return found[0]


def _integer(headers: Mapping[str, str], name: str) -> int:
    value = _header(headers, name).strip()
    if not value.isascii() or not value.isdigit():
        raise InvalidSignature(f"{name} is not a number")
    return int(value)


def verify_v2(
    keys: Mapping[str, str] | str,
    method: str,
    host: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> VerifiedCall:
    """Check a v2 signature against the job's keys (key id -> key, as `GET /v1/jobs/{id}/signing-keys` returns
    them; or one key, tried for every key id) and the request as received. Returns the signed values; raises
    InvalidSignature when no v2 signature holds."""
    try:
        items = _items(_header(headers, SIGNATURE_HEADER))
        ts = _timestamp(items, tolerance, now)
        call = SignedCall(
            method=str(method),
            host=str(host),
            path=str(path),
            occurrence_key=_header(headers, OCCURRENCE_KEY_HEADER),
            fencing_token=_integer(headers, FENCING_TOKEN_HEADER),
            scheduled_for=_header(headers, SCHEDULED_FOR_HEADER),
            attempt=_integer(headers, ATTEMPT_HEADER),
        )
        candidates = [value.partition(":") for name, value in items if name == "v2"]
        if not candidates:
            raise InvalidSignature("no v2 signature (a v1-only signer? verify v1 during the migration window)")
        for kid, _, given in candidates:
            key = keys if isinstance(keys, str) else keys.get(kid)
            if key is not None and _equal(_hmac_hex(key, canonical_v2(ts, kid, call, bytes(body))), given):
                return VerifiedCall(**call.__dict__, timestamp=ts, key_id=kid)
    except InvalidSignature:
        raise
    except (TypeError, ValueError, AttributeError, UnicodeError) as exc:
        raise InvalidSignature(f"unreadable signature input: {type(exc).__name__}") from exc
    raise InvalidSignature("no v2 signature matches the job's keys")
