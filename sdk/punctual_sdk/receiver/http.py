"""What the WSGI and ASGI middleware share: the recorded answer of a guarded request, and problem+json answers.

A guarded request's answer is recorded (and replayed to every later delivery of the occurrence) when the app
answers with anything punctual's worker does not retry: 2xx, and 4xx other than 408 and 429. A 5xx, 408 or 429
answer, or an exception, releases the in-progress record instead, so the worker's retry runs the app again.
"""

from __future__ import annotations

import base64
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


@dataclass(frozen=True)
class HttpReply:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def to_record(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "headers": [list(h) for h in self.headers],
            "body": base64.b64encode(self.body).decode(),
        }

    @classmethod
    def from_record(cls, record: Any) -> HttpReply:
        headers = tuple((str(k), str(v)) for k, v in record["headers"])
        return cls(int(record["status"]), headers, base64.b64decode(record["body"]))

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
