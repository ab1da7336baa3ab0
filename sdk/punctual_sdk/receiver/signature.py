"""Verification of the signature punctual puts on every `http` target call (docs/security.md, "Webhook signatures").

This is punctual's one verifier: the worker only signs (`scheduler.security.signing`), and the test vectors in
`tests/sdk/receiver/vectors.json` pin both sides byte for byte; the main test suite also proves that it accepts what
the worker produces and refuses any change to a signed field.

`X-Scheduler-Signature` is a comma-separated list of `t=<unix seconds>`, one `v2=<key id>:<hex>` per active key of
the job, and during the migration window `v1=<hex>`. v2 is HMAC-SHA256 with the job's key over `canonical_v2`; v1
covers only the timestamp and the body.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping
from dataclasses import dataclass

from punctual_sdk.receiver.errors import InvalidSignature, StaleRequest, UnknownKey

SIGNATURE_HEADER = "X-Scheduler-Signature"
OCCURRENCE_KEY_HEADER = "Idempotency-Key"
FENCING_TOKEN_HEADER = "X-Scheduler-Fencing-Token"
SCHEDULED_FOR_HEADER = "X-Scheduler-Scheduled-For"
ATTEMPT_HEADER = "X-Scheduler-Attempt"
#: Not signed: it only says which job's keys to try (another job's keys verify nothing of this job).
JOB_ID_HEADER = "X-Scheduler-Job-Id"
V2_PREFIX = "punctual-v2"
#: How far the signature's timestamp may be from the receiver's clock, in seconds (both ways).
DEFAULT_TOLERANCE_SECONDS = 300
#: The most items `X-Scheduler-Signature` may have (punctual sends one `v2` per active key, and a `v1`).
MAX_SIGNATURE_ITEMS = 16
#: The longest job id the receiver looks keys up for (punctual's are 32 characters).
MAX_JOB_ID_LENGTH = 128
#: The most digits a number in a signed header may have (a unix time, a fencing token, an attempt): enough for any
#: value punctual sends, few enough that reading it costs nothing and it converts to a float.
MAX_DIGITS = 18


@dataclass(frozen=True)
class SignedCall:
    """What signature v2 covers, besides the timestamp, the key id and the body."""

    method: str
    #: The Host header as received (with `:port` when the URL names a non-default port).
    host: str
    #: The request target: the path, and `?query` when there is one, exactly as received.
    path: str
    occurrence_key: str
    fencing_token: int
    #: RFC 3339, exactly as in X-Scheduler-Scheduled-For.
    scheduled_for: str
    attempt: int


@dataclass(frozen=True)
class VerifiedCall(SignedCall):
    """A call whose signature holds: every field was signed by punctual for this job."""

    timestamp: int
    key_id: str


def canonical_v2(timestamp: int, key_id: str, call: SignedCall, body: bytes) -> bytes:
    """The bytes signature v2 signs: one line per field, in this order (docs/security.md)."""
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


def _hmac_hex(key: str, message: bytes) -> str:
    return hmac.new(key.encode(), message, hashlib.sha256).hexdigest()


def _equal(expected: str, given: str) -> bool:
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "replace"))


def header(headers: Mapping[str, str], name: str) -> str:
    """The one value of header `name` (any case); InvalidSignature when it is missing or repeated."""
    low = name.lower()
    found = [v for k, v in headers.items() if isinstance(k, str) and k.lower() == low]
    if len(found) != 1 or not isinstance(found[0], str):
        raise InvalidSignature(f"the request must carry exactly one {name} header")
    return found[0]


def _number(value: str) -> int | None:
    """`value` as a non-negative integer when it is 1 to MAX_DIGITS ASCII digits, else None (never raises)."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_DIGITS or not value.isascii() or not value.isdigit():
        return None
    return int(value)


def _integer(headers: Mapping[str, str], name: str) -> int:
    value = _number(header(headers, name).strip())
    if value is None:
        raise InvalidSignature(f"{name} is not a number of at most {MAX_DIGITS} digits")
    return value


@dataclass(frozen=True)
class SignatureHeader:
    """`X-Scheduler-Signature`, parsed: the timestamp, the v2 signatures as (key id, hex), the v1 signatures."""

    timestamp: int
    v2: tuple[tuple[str, str], ...]
    v1: tuple[str, ...]

    @classmethod
    def parse(cls, value: str | None) -> SignatureHeader:
        if not value or not isinstance(value, str):
            raise InvalidSignature(f"missing {SIGNATURE_HEADER} header")
        parts = value.split(",", MAX_SIGNATURE_ITEMS)
        if len(parts) > MAX_SIGNATURE_ITEMS:
            raise InvalidSignature(f"malformed {SIGNATURE_HEADER}: more than {MAX_SIGNATURE_ITEMS} items")
        items = [(n.strip(), v.strip()) for n, sep, v in (p.partition("=") for p in parts) if sep]
        stamps = [_number(v) for n, v in items if n == "t"]
        timestamp = stamps[0] if len(stamps) == 1 else None
        if timestamp is None:
            raise InvalidSignature(f"malformed {SIGNATURE_HEADER}: one 't=<unix seconds>' is required")
        v2 = tuple((kid, sig) for kid, sep, sig in (v.partition(":") for n, v in items if n == "v2") if sep)
        return cls(timestamp, v2, tuple(v for n, v in items if n == "v1"))

    def well_formed_v2(self) -> tuple[tuple[str, str], ...]:
        """The v2 signatures that could be punctual's: a key id and 64 lower-case hex digits (an HMAC-SHA256)."""
        return tuple(
            (kid, sig) for kid, sig in self.v2 if kid and len(sig) == 64 and all(c in "0123456789abcdef" for c in sig)
        )

    def check_time(self, tolerance: float, now: float | None) -> None:
        current = time.time() if now is None else now
        if abs(current - self.timestamp) > tolerance:
            raise StaleRequest(
                f"the signature's timestamp is {int(current - self.timestamp)} s from this receiver's clock, "
                f"more than the tolerance of {tolerance:g} s: a replayed call, or a clock to synchronise"
            )


def job_id_of(headers: Mapping[str, str]) -> str:
    """The job id the call names (`X-Scheduler-Job-Id`, unsigned: it only says whose keys to try); InvalidSignature
    when it is missing, repeated, longer than MAX_JOB_ID_LENGTH or not printable ASCII without spaces."""
    job_id = header(headers, JOB_ID_HEADER)
    if not 0 < len(job_id) <= MAX_JOB_ID_LENGTH or not job_id.isascii() or not job_id.isprintable() or " " in job_id:
        raise InvalidSignature(f"{JOB_ID_HEADER} is not a job id")
    return job_id


def signed_call(method: str, host: str, path: str, headers: Mapping[str, str]) -> SignedCall:
    """The values signature v2 covers, read from the request as received."""
    return SignedCall(
        method=str(method),
        host=str(host),
        path=str(path),
        occurrence_key=header(headers, OCCURRENCE_KEY_HEADER),
        fencing_token=_integer(headers, FENCING_TOKEN_HEADER),
        scheduled_for=header(headers, SCHEDULED_FOR_HEADER),
        attempt=_integer(headers, ATTEMPT_HEADER),
    )


def verify_v2(
    keys: Mapping[str, str],
    method: str,
    host: str,
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> VerifiedCall:
    """Check a v2 signature against the job's keys (key id -> key, as `GET /v1/jobs/{id}/signing-keys` returns
    them) and the request as received: `host` is the Host header, `path` the request target (path and query).

    Raises StaleRequest (timestamp outside `tolerance`), UnknownKey (no v2 signature under a key id in `keys`:
    fetch the keys again) or InvalidSignature (anything else); never another exception, whatever the input."""
    try:
        parsed = SignatureHeader.parse(header(headers, SIGNATURE_HEADER))
        parsed.check_time(tolerance, now)
        call = signed_call(method, host, path, headers)
        if not parsed.v2:
            raise InvalidSignature("no v2 signature (a v1-only signer? use verify_v1 during the migration window)")
        known = [(kid, given) for kid, given in parsed.v2 if keys.get(kid) is not None]
        if not known:
            ids = ", ".join(sorted({kid for kid, _ in parsed.v2}))
            raise UnknownKey(f"the call is signed with key id(s) {ids}, none of which this receiver holds")
        for kid, given in known:
            if _equal(_hmac_hex(keys[kid], canonical_v2(parsed.timestamp, kid, call, bytes(body))), given):
                return VerifiedCall(**call.__dict__, timestamp=parsed.timestamp, key_id=kid)
    except InvalidSignature:
        raise
    except (TypeError, ValueError, ArithmeticError, AttributeError, UnicodeError) as exc:
        raise InvalidSignature(f"unreadable signature input: {type(exc).__name__}") from exc
    raise InvalidSignature("the signature does not match the request (altered in transit, or not from punctual)")


def verify_v1(
    key: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance: float = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> int:
    """Check a v1 signature (the tenant's v1 key over `"<t>.<body>"`); returns its timestamp. v1 covers neither
    the occurrence key, nor the fencing token, nor the URL: verify v2 wherever the scheduler sends it."""
    try:
        parsed = SignatureHeader.parse(header(headers, SIGNATURE_HEADER))
        parsed.check_time(tolerance, now)
        if not parsed.v1:
            raise InvalidSignature(f"malformed {SIGNATURE_HEADER}: no v1 signature")
        expected = _hmac_hex(key, f"{parsed.timestamp}.".encode() + bytes(body))
        if any(_equal(expected, given) for given in parsed.v1):
            return parsed.timestamp
    except InvalidSignature:
        raise
    except (TypeError, ValueError, ArithmeticError, AttributeError, UnicodeError) as exc:
        raise InvalidSignature(f"unreadable signature input: {type(exc).__name__}") from exc
    raise InvalidSignature("the v1 signature does not match the body")
