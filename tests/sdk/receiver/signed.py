"""Signed calls as punctual's worker makes them (`scheduler.security.signing`), for the receiver kit's tests."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from scheduler.security import signing

NOW = 1_796_112_000
JOB_ID = "job-1"
RING = signing.KeyRing.parse('{"current": "k1", "k1": "root-secret-number-one"}')
KEYS = RING.job_keys(JOB_ID)


@dataclass
class Request:
    method: str
    host: str
    path: str
    headers: dict[str, str]
    body: bytes
    extra: dict[str, Any] = field(default_factory=dict)


def signed_request(
    *,
    key: str = "job-1:2026-12-01T08:00:00Z",
    token: int = 7,
    attempt: int = 1,
    body: Any = None,
    keys: dict[str, str] | None = None,
    timestamp: int = NOW,
    host: str = "receiver.example:8080",
    path: str = "/hooks/pay?x=1",
    job_id: str = JOB_ID,
) -> Request:
    """A request as the worker sends it, signed with `keys` (the job's keys under the test ring by default)."""
    data = json.dumps({"amount": 5} if body is None else body).encode()
    call = signing.SignedCall("POST", host, path, key, token, "2026-12-01T08:00:00Z", attempt)
    headers = {
        "Content-Type": "application/json",
        "Host": host,
        signing.OCCURRENCE_KEY_HEADER: key,
        signing.FENCING_TOKEN_HEADER: str(token),
        signing.SCHEDULED_FOR_HEADER: call.scheduled_for,
        signing.ATTEMPT_HEADER: str(attempt),
        "X-Scheduler-Job-Id": job_id,
        signing.SIGNATURE_HEADER: signing.sign_v2(keys if keys is not None else KEYS, call, data, timestamp=timestamp),
    }
    return Request("POST", host, path, headers, data)
