"""Messages land just before their fire time on a real SQS (the local emulator): the sweeper's aligned sends
(`Dispatcher.send_landing`) through the real `SqsReadyQueue`, received as soon as they become visible.

Without alignment a message becomes visible up to a second before its time (DelaySeconds is whole seconds) and
the worker waits the rest out inside Lambda, billed; with it, about a tenth of a second at most."""

from __future__ import annotations

import random
import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.clock import SystemClock
from scheduler.adapters.dispatch_message import dispatches_from_body
from scheduler.adapters.memory import RecordingMetrics
from scheduler.adapters.sqs import SqsReadyQueue
from scheduler.core.ports import Dispatch
from scheduler.core.sweep.dispatch import DispatchConfig, Dispatcher

pytestmark = pytest.mark.emulator
KEY = b"landing-test-message-key-0123456"


@pytest.fixture
def queue_url(sqs_client: Any) -> Iterator[str]:
    url: str = sqs_client.create_queue(QueueName=f"landing-{uuid.uuid4().hex[:10]}")["QueueUrl"]
    yield url
    sqs_client.delete_queue(QueueUrl=url)


def arrivals(sqs: Any, url: str, expected: int, timeout: float) -> dict[str, float]:
    """Each message's occurrence key -> when a receiver polling without pause first saw it (epoch seconds)."""
    seen: dict[str, float] = {}

    def poll() -> None:
        deadline = time.time() + timeout
        while len(seen) < expected and time.time() < deadline:
            got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
            at = time.time()
            for message in got.get("Messages", []):
                for dispatch in dispatches_from_body(message["Body"], KEY):
                    seen.setdefault(dispatch.key, at)
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    threads = [threading.Thread(target=poll) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return seen


def due_soon(count: int, seed: int) -> list[Dispatch]:
    rng = random.Random(seed)
    now = datetime.now(UTC)
    out = []
    for i in range(count):
        at = now + timedelta(milliseconds=rng.randint(3_000, 6_000))
        out.append(Dispatch(f"job-{seed}-{i}", "acme", at, at, 1))
    return out


def earliness(dispatches: list[Dispatch], seen: dict[str, float]) -> list[float]:
    return [d.fire_at.timestamp() - seen[d.key] for d in dispatches]


def test_aligned_sends_land_within_a_tenth_of_a_second_and_plain_ones_up_to_a_second_early(
    sqs_client: Any, queue_url: str
) -> None:
    config = DispatchConfig(timedelta(minutes=5), timedelta(seconds=60), timedelta(days=1))
    queue = SqsReadyQueue(queue_url, queue_url, sqs_client, message_key=KEY)
    metrics = RecordingMetrics()
    dispatcher = Dispatcher(None, None, queue, SystemClock(), config, metrics, sleep=time.sleep)  # type: ignore[arg-type]

    # Given 30 occurrences due in 3-6 s at arbitrary milliseconds, sent as a sweep sends a page
    aligned = due_soon(30, seed=1)
    assert config.landing_window is not None
    dispatcher.send_landing(aligned)
    # And 30 more sent at once, as before (a whole-second delay rounded down)
    plain = due_soon(30, seed=2)
    queue.send(plain, datetime.now(UTC))

    # When a receiver polls for them without pause
    seen = arrivals(sqs_client, queue_url, 60, timeout=20)

    # Then every message arrived, none before its time by more than a second (SQS's rounding) ...
    assert len(seen) == 60
    on_time, rounded = earliness(aligned, seen), earliness(plain, seen)
    assert all(-1.0 < e < 1.05 for e in on_time + rounded)
    # ... the aligned ones about a tenth of a second early at most (measured here: -0.05 to 0.10 s, the receive's
    # own latency included; a loaded machine delays a few), the plain ones spread over the second
    shown = [round(e, 3) for e in sorted(on_time)]
    assert statistics.median(on_time) < 0.15, shown
    assert sum(1 for e in on_time if e <= 0.25) >= 25, shown
    assert statistics.mean(rounded) > 0.25, sorted(rounded)
    assert metrics.counts.get("SendsOffWindow", 0) == 0
