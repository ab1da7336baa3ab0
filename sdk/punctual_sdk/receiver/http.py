"""What the WSGI and ASGI middleware share: the recorded answer of a guarded request, and problem+json answers.

A guarded request's answer is recorded (and replayed to every later delivery of the occurrence) when the app
answers with anything punctual's worker does not retry: 2xx, and 4xx other than 408 and 429. A 5xx, 408 or 429
answer, or an exception, releases the in-progress record instead, so the worker's retry runs the app again.

The record keeps the answer's body only up to `max_answer_bytes` (and its headers up to MAX_HEADER_BYTES): past
that it keeps the status, the body's size and SHA-256, and a replay answers with the status, an empty body and
`X-Punctual-Body-Not-Kept: sha256=<hex>; bytes=<size>`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from punctual_sdk.receiver.errors import ReceiverError, RequestTooLarge
from punctual_sdk.receiver.signature import MAX_DIGITS

PROBLEM_TYPE = "https://punctual.dev/problems/receiver"
#: The largest request body the middleware reads: punctual's payloads are at most 64 KiB, with room to spare.
DEFAULT_MAX_BODY_BYTES = 256 * 1024
#: Added to a replayed answer, so a reader of the receiver's logs sees the handler did not run again.
DUPLICATE_HEADER = "X-Punctual-Duplicate"
#: Added to a replayed answer whose body the record did not keep: the body's SHA-256 and size.
BODY_NOT_KEPT_HEADER = "X-Punctual-Body-Not-Kept"
#: The largest answer body a record keeps (the body is kept base64, a third larger).
DEFAULT_MAX_ANSWER_BYTES = 64 * 1024
#: The most an answer's headers may take in a record (as JSON); more, and none are kept.
MAX_HEADER_BYTES = 16 * 1024
#: Headers that describe the body as sent: a replay without the body leaves them out.
_BODY_HEADERS = frozenset({"content-length", "content-encoding", "transfer-encoding", "content-md5"})


@dataclass(frozen=True)
class HttpReply:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def to_record(self, max_body_bytes: int = DEFAULT_MAX_ANSWER_BYTES) -> dict[str, Any]:
        """The answer as a record keeps it: the body only up to `max_body_bytes`, the headers only up to
        MAX_HEADER_BYTES (see the module docstring)."""
        headers = [list(h) for h in self.headers]
        if len(json.dumps(headers)) > MAX_HEADER_BYTES:
            headers = []
        if len(self.body) > max_body_bytes:
            return {**self.minimal_record(), "headers": headers}
        return {"status": self.status, "headers": headers, "body": base64.b64encode(self.body).decode()}

    def minimal_record(self) -> dict[str, Any]:
        """The least a record keeps of the answer: its status, and the body's size and digest."""
        return {
            "status": self.status,
            "headers": [],
            "body": "",
            "body_kept": False,
            "body_bytes": len(self.body),
            "body_sha256": hashlib.sha256(self.body).hexdigest(),
        }

    @classmethod
    def from_record(cls, record: Any) -> HttpReply:
        headers = tuple((str(k), str(v)) for k, v in record["headers"])
        if record.get("body_kept", True):
            return cls(int(record["status"]), headers, base64.b64decode(record["body"]))
        about = f"sha256={record.get('body_sha256', '')}; bytes={record.get('body_bytes', '')}"
        kept = tuple((k, v) for k, v in headers if k.lower() not in _BODY_HEADERS)
        return cls(int(record["status"]), (*kept, ("Content-Length", "0"), (BODY_NOT_KEPT_HEADER, about)), b"")

    def replayed(self) -> HttpReply:
        return HttpReply(self.status, (*self.headers, (DUPLICATE_HEADER, "true")), self.body)


def retried_by_punctual(status: int) -> bool:
    """Whether punctual's worker retries an answer with this status (its `http` target's classification)."""
    return status in (408, 429) or 500 <= status < 600


def problem(exc: ReceiverError) -> HttpReply:
    """The problem+json answer to a refused delivery, with Retry-After when the same delivery may succeed later."""
    body = {"type": PROBLEM_TYPE, "title": type(exc).__name__, "status": exc.status, "detail": exc.detail}
    headers: list[tuple[str, str]] = [("Content-Type", "application/problem+json")]
    if exc.retry_after is not None:
        headers.append(("Retry-After", str(max(1, round(exc.retry_after)))))
    data = json.dumps(body).encode()
    headers.append(("Content-Length", str(len(data))))
    return HttpReply(exc.status, tuple(headers), data)


def guarded(path: str, paths: tuple[str, ...] | None) -> bool:
    """Whether the middleware guards a request to `path` (all of them when `paths` is None)."""
    return paths is None or any(path == p or path.startswith(p.rstrip("/") + "/") for p in paths)


def declared_length(value: object) -> int | None:
    """A Content-Length header's value as a number of bytes, or None when it is absent or not one (never raises)."""
    text = value.strip() if isinstance(value, str) else ""
    if not 0 < len(text) <= MAX_DIGITS or not text.isascii() or not text.isdigit():
        return None
    return int(text)


def too_large(size: int | None, limit: int) -> RequestTooLarge:
    said = f"{size} bytes" if size is not None else "more"
    return RequestTooLarge(f"the request body is {said}; this receiver accepts at most {limit} bytes")
