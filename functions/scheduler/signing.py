"""Signing of HTTP target calls, and the function a receiver uses to verify them.

Each call carries `X-Scheduler-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256>` computed over
`"<t>.<raw body>"` with the tenant's signing key. A receiver recomputes it with its key, compares in constant
time, and rejects calls older than a tolerance (replays). The tenant's key is derived from the deployment's
master secret, so rotating the master secret rotates every tenant's key.

    from scheduler.signing import verify
    verify(key, request.headers["X-Scheduler-Signature"], raw_body)   # raises InvalidSignature
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "X-Scheduler-Signature"
DEFAULT_TOLERANCE_SECONDS = 300


class InvalidSignature(Exception):
    """The signature is missing, malformed, wrong, or too old."""


def tenant_key(master_secret: str, tenant: str) -> str:
    """The per-tenant signing key (hex), derived from the master secret."""
    return hmac.new(master_secret.encode(), f"tenant:{tenant}".encode(), hashlib.sha256).hexdigest()


def sign(key: str, body: bytes, timestamp: int | None = None) -> str:
    """The signature header value for `body` at `timestamp` (default: now)."""
    ts = int(time.time()) if timestamp is None else timestamp
    digest = hmac.new(key.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={ts},v1={digest}"


def verify(
    key: str, header: str | None, body: bytes, tolerance: int = DEFAULT_TOLERANCE_SECONDS, now: float | None = None
) -> int:
    """Check a signature header; returns its timestamp. Raises InvalidSignature when it does not hold."""
    if not header:
        raise InvalidSignature("missing signature header")
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        ts = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError) as exc:
        raise InvalidSignature("malformed signature header") from exc
    current = time.time() if now is None else now
    if abs(current - ts) > tolerance:
        raise InvalidSignature("signature timestamp outside the tolerance (replay?)")
    expected = sign(key, body, ts).split("v1=", 1)[1]
    if not hmac.compare_digest(expected, given):
        raise InvalidSignature("signature does not match")
    return ts
