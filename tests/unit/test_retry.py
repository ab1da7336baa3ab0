"""Retry decisions: exponential backoff with equal jitter, Retry-After floors, limits, HTTP classification."""

from __future__ import annotations

from datetime import timedelta

import pytest

from scheduler.core.execution.retry import MAX_HIDE_SECONDS, backoff, classify_http_status, may_retry
from scheduler.core.model.job import RetryPolicy
from tests.unit.fixtures import at

KEY = "job42:2026-01-05T09:00:00Z"
POLICY = RetryPolicy(max_attempts=10, initial_backoff_seconds=5, max_backoff_seconds=300, max_event_age_seconds=3600)


def seconds(delta: timedelta) -> float:
    return delta.total_seconds()


@pytest.mark.parametrize(("attempt", "base"), [(1, 5), (2, 10), (3, 20), (4, 40), (5, 80), (6, 160), (7, 300)])
def test_backoff_is_equal_jitter_around_an_exponential_capped_base(attempt: int, base: int) -> None:
    # Over many occurrence keys, the delay for one attempt lies in [base/2, base]
    delays = [seconds(backoff(POLICY, attempt, f"job{i}:2026-01-05T09:00:00Z")) for i in range(200)]

    assert all(base / 2 <= d <= base for d in delays)
    # And the jitter half really varies (the herd of retries spreads)
    assert max(delays) - min(delays) > base / 4


def test_backoff_grows_exponentially_until_the_cap() -> None:
    # Two attempts on, the base has quadrupled, so the delay is longer whatever the jitter (until the cap)
    for attempt in range(1, 5):
        assert backoff(POLICY, attempt + 2, KEY) > backoff(POLICY, attempt, KEY)
    # From attempt 7 on the base is capped by max_backoff (300 s): never more, never less than half
    late = [seconds(backoff(POLICY, attempt, KEY)) for attempt in range(7, 21)]
    assert all(150 <= d <= 300 for d in late)


def test_backoff_doubles_on_average() -> None:
    def mean(attempt: int) -> float:
        return sum(seconds(backoff(POLICY, attempt, f"k{i}")) for i in range(400)) / 400

    assert 1.8 < mean(3) / mean(2) < 2.2
    assert 1.8 < mean(4) / mean(3) < 2.2


def test_backoff_is_deterministic_per_key_and_attempt() -> None:
    assert backoff(POLICY, 3, KEY) == backoff(POLICY, 3, KEY)
    assert backoff(POLICY, 3, KEY) != backoff(POLICY, 3, "job42:2026-01-05T10:00:00Z")


def test_backoff_is_at_least_one_second() -> None:
    tiny = RetryPolicy(initial_backoff_seconds=1, max_backoff_seconds=1)

    assert all(seconds(backoff(tiny, 1, f"k{i}")) >= 1.0 for i in range(50))


def test_retry_after_is_a_floor() -> None:
    # Given the target asked us to come back in 120 s, when our own backoff would be ~5 s
    delay = backoff(POLICY, 1, KEY, retry_after=120)

    assert seconds(delay) == 120


def test_retry_after_shorter_than_backoff_does_not_shorten_it() -> None:
    assert backoff(POLICY, 6, KEY, retry_after=1) == backoff(POLICY, 6, KEY)


def test_delay_is_capped_at_twelve_hours() -> None:
    assert MAX_HIDE_SECONDS == 12 * 3600
    assert seconds(backoff(POLICY, 1, KEY, retry_after=7 * 86_400)) == 12 * 3600


def test_may_retry_until_max_attempts() -> None:
    policy = RetryPolicy(max_attempts=3)
    scheduled = at("2026-01-05T09:00")
    soon = scheduled + timedelta(seconds=10)

    assert may_retry(policy, 1, scheduled, soon)
    assert may_retry(policy, 2, scheduled, soon)
    assert not may_retry(policy, 3, scheduled, soon)
    assert not may_retry(policy, 4, scheduled, soon)


def test_may_retry_until_max_event_age() -> None:
    policy = RetryPolicy(max_attempts=20, max_event_age_seconds=3600)
    scheduled = at("2026-01-05T09:00")

    assert may_retry(policy, 1, scheduled, scheduled + timedelta(seconds=3600))
    assert not may_retry(policy, 1, scheduled, scheduled + timedelta(seconds=3601))


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (200, "ok"),
        (201, "ok"),
        (204, "ok"),
        (301, "permanent"),
        (400, "permanent"),
        (401, "permanent"),
        (404, "permanent"),
        (408, "retryable"),
        (409, "permanent"),
        (422, "permanent"),
        (429, "retryable"),
        (500, "retryable"),
        (502, "retryable"),
        (503, "retryable"),
        (504, "retryable"),
    ],
)
def test_classify_http_status(status: int, kind: str) -> None:
    assert classify_http_status(status) == kind
