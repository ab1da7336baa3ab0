"""Retry decisions: exponential backoff with deterministic jitter, bounded by attempts and event age."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from scheduler.core.model.job import RetryPolicy

#: SQS cannot hide a message for longer than 12 hours.
MAX_HIDE_SECONDS = 43_200


def backoff(policy: RetryPolicy, attempt: int, key: str, retry_after: float | None = None) -> timedelta:
    """Delay before attempt `attempt + 1`: `initial * 2**(attempt-1)`, capped, with "equal jitter" (half fixed,
    half derived from the occurrence key and attempt, so it is reproducible). A target's Retry-After is a
    floor: we never come back sooner than it asked."""
    base = min(policy.max_backoff_seconds, policy.initial_backoff_seconds * 2 ** max(0, attempt - 1))
    spread = int.from_bytes(hashlib.sha256(f"{key}#{attempt}".encode()).digest()[:4], "big") / 2**32
    seconds = base / 2 + spread * base / 2
    if retry_after is not None:
        seconds = max(seconds, retry_after)
    return timedelta(seconds=min(max(1.0, seconds), MAX_HIDE_SECONDS))


def may_retry(policy: RetryPolicy, attempts: int, scheduled_for: datetime, retry_at: datetime) -> bool:
    """Whether another attempt is allowed: attempts left and the retry still inside `max_event_age`."""
    if attempts >= policy.max_attempts:
        return False
    return retry_at - scheduled_for <= timedelta(seconds=policy.max_event_age_seconds)


def classify_http_status(status: int) -> str:
    """`ok`, `retryable` (5xx, 408, 429) or `permanent` (other 4xx and anything else unexpected)."""
    if 200 <= status < 300:
        return "ok"
    if status in (408, 429) or 500 <= status < 600:
        return "retryable"
    return "permanent"
