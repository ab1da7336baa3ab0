"""Scenario `emulator`: how the local SQS emulators answer as a queue fills - the reason the local stack runs on
ministack rather than moto (`scheduler_local.emulators`).

Each emulator is started here on its own (127.0.0.1, a free port), whatever endpoints the rest of the run uses.
For each queue depth: fill a fresh standard queue to that depth with SendMessageBatch (10 a call, in a few
threads), then time, one call after another, ReceiveMessage of 10 messages (all attributes, as the worker poller
asks), SendMessageBatch of 10 and a single SendMessage. Receives hide their messages (a long visibility timeout),
so the depth stays within a few dozen of its target while it is measured. Medians and p90 of `samples` calls.

moto's receive scans the whole queue: filling it to 10,000 takes tens of minutes here, so it is measured at the
depths in `moto_depths` (the 10,000 row only when asked for).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from scheduler_local import emulators

FILL_THREADS = 4
BODY = '{"job_id":"j0000000000","tenant":"burst1","scheduled_for":"2030-01-07T09:00:00Z","token":1}'


@dataclass(frozen=True)
class EmulatorLatencyConfig:
    ministack_depths: tuple[int, ...] = (0, 1_000, 10_000)
    moto_depths: tuple[int, ...] = (0, 1_000, 2_000)
    samples: int = 15
    log_dir: Path = emulators.ROOT / ".local" / "logs"


def _client(endpoint: str) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="local",
        aws_secret_access_key="local",
        config=Config(retries={"max_attempts": 2, "mode": "standard"}, max_pool_connections=FILL_THREADS * 2),
    )


def _timed(call: Callable[[], Any], samples: int) -> dict[str, float]:
    took = []
    for _ in range(samples):
        began = time.perf_counter()
        call()
        took.append(1000 * (time.perf_counter() - began))
    ordered = sorted(took)
    return {
        "median_ms": statistics.median(took),
        "p90_ms": ordered[max(0, int(0.9 * len(ordered)) - 1)],
        "max_ms": ordered[-1],
    }


def _entries(n: int) -> list[dict[str, Any]]:
    return [
        {
            "Id": str(i),
            "MessageBody": BODY,
            "MessageGroupId": f"burst{i}",
            "MessageAttributes": {"occurrence_key": {"DataType": "String", "StringValue": f"j{i}#2030"}},
        }
        for i in range(n)
    ]


def _fill(sqs: Any, url: str, depth: int) -> float:
    """Send `depth` messages; returns the seconds it took."""
    began = time.perf_counter()
    with ThreadPoolExecutor(FILL_THREADS) as pool:
        list(
            pool.map(
                lambda start: sqs.send_message_batch(QueueUrl=url, Entries=_entries(min(10, depth - start))),
                range(0, depth, 10),
            )
        )
    return time.perf_counter() - began


def measure(
    endpoint: str, depths: Sequence[int], samples: int, log: Callable[[str], None], name: str
) -> list[dict[str, Any]]:
    sqs = _client(endpoint)
    rows = []
    for depth in depths:
        url = sqs.create_queue(QueueName=f"lat-{uuid.uuid4().hex[:10]}", Attributes={"VisibilityTimeout": "900"})[
            "QueueUrl"
        ]
        try:
            fill_seconds = _fill(sqs, url, depth)

            def receive(queue: str = url) -> None:
                sqs.receive_message(
                    QueueUrl=queue,
                    MaxNumberOfMessages=10,
                    WaitTimeSeconds=0,
                    AttributeNames=["All"],
                    MessageAttributeNames=["All"],
                )

            def send_batch(queue: str = url) -> None:
                sqs.send_message_batch(QueueUrl=queue, Entries=_entries(10))

            def send_one(queue: str = url) -> None:
                sqs.send_message(QueueUrl=queue, MessageBody=BODY)

            # Sends first at this depth (each adds, receives take away: the depth stays near its target)
            row: dict[str, Any] = {
                "depth": depth,
                "fill_seconds": fill_seconds,
                "send_message_batch_10": _timed(send_batch, samples),
                "send_message": _timed(send_one, samples),
                "receive_message_10": _timed(receive, samples),
            }
            rows.append(row)
            log(
                f"emulator: {name} depth {depth:,}: receive {row['receive_message_10']['median_ms']:.1f} ms, "
                f"send batch {row['send_message_batch_10']['median_ms']:.1f} ms (filled in {fill_seconds:.1f}s)"
            )
        finally:
            sqs.delete_queue(QueueUrl=url)
    return rows


def run(config: EmulatorLatencyConfig, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {"samples": config.samples, "emulators": {}}
    for kind, depths, version in (
        ("ministack", config.ministack_depths, emulators.MINISTACK_VERSION),
        ("moto", config.moto_depths, _moto_version()),
    ):
        if not depths:
            continue
        started = emulators.Emulators("", "", "")
        try:
            _, endpoint = emulators.start_aws_emulator(kind, config.log_dir, started.processes)
            out["emulators"][kind] = {
                "version": version,
                "depths": measure(endpoint, depths, config.samples, log, kind),
            }
        finally:
            started.stop()
    return out


def _moto_version() -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version("moto")
    except importlib.metadata.PackageNotFoundError:
        return None
