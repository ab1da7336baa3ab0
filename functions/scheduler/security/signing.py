"""Signing of HTTP target calls (docs/security.md).

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

This module only signs. Receivers verify with the SDK's receiver kit (`punctual_sdk.receiver.verify_v2`, and the
kit's WSGI, ASGI and Lambda adapters; docs/receiving.md), the one verifier: it compares in constant time and refuses
calls older than a tolerance (replays). The test vectors in `tests/sdk/receiver/vectors.json` pin the wire format
byte for byte on both sides: what this module signs and what the SDK accepts.
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
#: The headers whose values signature v2 covers (the receiver reads them from the request).
OCCURRENCE_KEY_HEADER = "Idempotency-Key"
FENCING_TOKEN_HEADER = "X-Scheduler-Fencing-Token"
SCHEDULED_FOR_HEADER = "X-Scheduler-Scheduled-For"
ATTEMPT_HEADER = "X-Scheduler-Attempt"
V2_PREFIX = "punctual-v2"


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
