"""The test scheduler's virtual clock, and moto's SQS on that clock.

Every part of the scheduler reads time from one `VirtualClock`: the API (a job's first fire time), the sweeper
(which buckets are due), the worker (is the occurrence due, when does its lease end) and the scheduler's waits (a
worker waiting out a sub-second remainder moves the clock instead of sleeping). moto's SQS keeps a message's delay
and visibility timeout on the wall clock, so `sqs_on(clock)` patches the two time functions moto's SQS model reads
(`moto.sqs.models.unix_time` and `unix_time_millis`): a message sent with DelaySeconds=300 becomes visible when
the virtual clock has moved 300 s, a retry's visibility timeout runs out on the virtual clock, and receive counts,
the redrive policy and the 12-hour visibility limit behave as on SQS. Nothing else of moto is patched.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from unittest import mock

from punctual_sdk.errors import InvalidArgument


def aware(when: datetime, name: str) -> datetime:
    """`when` in UTC; a naive datetime is refused (its zone would be a guess)."""
    if not isinstance(when, datetime):
        raise InvalidArgument(f"{name} is a datetime with a time zone, not {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidArgument(f"{name} must be timezone-aware (e.g. datetime(2026, 3, 1, 9, 0, tzinfo=UTC))")
    return when.astimezone(UTC)


class VirtualClock:
    """The core's Clock port on a time the test moves. It only moves forward."""

    def __init__(self, start: datetime) -> None:
        self._now = aware(start, "start")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return self._now

    def set(self, when: datetime) -> None:
        """Move to `when` (never back: a scheduler's clock does not go backwards)."""
        when = aware(when, "when")
        with self._lock:
            if when > self._now:
                self._now = when

    def sleep(self, seconds: float) -> None:
        """What the scheduler's waits do here: the clock moves by `seconds`, at once."""
        if seconds > 0:
            with self._lock:
                self._now += timedelta(seconds=seconds)


@contextmanager
def sqs_on(clock: VirtualClock) -> Iterator[None]:
    """moto's SQS (delays, visibility timeouts, receive timestamps) on `clock` while the block runs."""
    import moto.sqs.models as sqs_model

    missing = [name for name in ("unix_time", "unix_time_millis") if not hasattr(sqs_model, name)]
    if missing:
        raise RuntimeError(
            f"this moto ({getattr(sqs_model, '__name__', 'moto')}) has no {', '.join(missing)} in its SQS model: the "
            'test scheduler needs moto>=5.1.10,<6 (pip install "punctual-sdk[testing]")'
        )

    def unix_time(when: datetime | None = None) -> float:
        return (clock.now() if when is None else when.replace(tzinfo=when.tzinfo or UTC)).timestamp()

    def unix_time_millis(when: datetime | None = None) -> float:
        return unix_time(when) * 1000.0

    with (
        mock.patch.object(sqs_model, "unix_time", unix_time),
        mock.patch.object(sqs_model, "unix_time_millis", unix_time_millis),
    ):
        yield
