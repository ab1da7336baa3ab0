"""The local stack's worker pollers: the scaling policy (how many pollers for a backlog) and the concurrent batch
handler (the worker's partial-batch contract with a batch's records handled at once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from scheduler_local.scaling import Backlog, ScalingPolicy
from scheduler_local.worker_poller import ConcurrentBatch, idle_sleep


def test_pollers_grow_with_the_backlog_up_to_the_ceiling_at_once() -> None:
    policy = ScalingPolicy(minimum=2, maximum=6, messages_per_worker=100, idle_seconds=30)
    assert policy.desired(2, Backlog(visible=50), now=0) == 2
    assert policy.desired(2, Backlog(visible=250, in_flight=50), now=1) == 3
    # delayed messages (a herd handed to SQS ahead of its fire time) count: pollers are warm when it falls due
    assert policy.desired(3, Backlog(delayed=1_000), now=2) == 6
    assert policy.desired(6, Backlog(visible=100_000), now=3) == 6


def test_pollers_shrink_one_at_a_time_after_the_queues_were_idle_never_below_the_minimum() -> None:
    policy = ScalingPolicy(minimum=2, maximum=6, messages_per_worker=100, idle_seconds=30)
    assert policy.desired(5, Backlog(), now=100) == 5  # idle from now on
    assert policy.desired(5, Backlog(), now=129) == 5
    assert policy.desired(5, Backlog(), now=130) == 4
    assert policy.desired(4, Backlog(), now=131) == 4  # the next one after another idle period
    assert policy.desired(4, Backlog(in_flight=1), now=170) == 4  # work again: the idle clock restarts
    assert policy.desired(4, Backlog(), now=171) == 4
    assert policy.desired(4, Backlog(), now=201) == 3
    assert policy.desired(3, Backlog(), now=231) == 2
    assert policy.desired(2, Backlog(), now=1_000) == 2


def test_a_backlog_below_the_pollers_it_has_keeps_them_until_idle() -> None:
    policy = ScalingPolicy(minimum=1, maximum=4, messages_per_worker=10, idle_seconds=5)
    assert policy.desired(4, Backlog(visible=1), now=0) == 4


def test_messages_left_waiting_while_every_poller_is_busy_add_one_poller_per_second() -> None:
    # Given two pollers, each busy with a long target call, and a message that falls due meanwhile
    policy = ScalingPolicy(minimum=2, maximum=4, messages_per_worker=100, idle_seconds=30)
    busy = Backlog(visible=1, in_flight=2)
    assert policy.desired(2, busy, now=10.0) == 2  # visible for a moment: a poller may be about to take it
    assert policy.desired(2, busy, now=10.5) == 2
    # When it is still waiting a second later, one poller more; another second, another; never past the ceiling
    assert policy.desired(2, busy, now=11.0) == 3
    assert policy.desired(3, busy, now=11.5) == 3
    assert policy.desired(3, busy, now=12.0) == 4
    assert policy.desired(4, busy, now=13.0) == 4
    # And a message taken at once (not left visible) adds none: the idle clock decides from then on
    policy = ScalingPolicy(minimum=2, maximum=4, messages_per_worker=100, idle_seconds=30)
    for now in (0.0, 1.0, 2.0, 3.0):
        assert policy.desired(2, Backlog(visible=1 if now % 2 == 0 else 0, in_flight=2), now) == 2


@pytest.mark.parametrize("minimum,maximum,per", [(0, 2, 10), (3, 2, 10), (1, 2, 0)])
def test_a_policy_that_cannot_work_is_refused(minimum: int, maximum: int, per: int) -> None:
    with pytest.raises(ValueError, match="worker scaling"):
        ScalingPolicy(minimum=minimum, maximum=maximum, messages_per_worker=per)


def test_from_env_reads_the_settings_and_defaults_the_ceiling_to_twice_the_cores() -> None:
    policy = ScalingPolicy.from_env({"SCHEDULER_LOCAL_WORKERS": "3", "SCHEDULER_LOCAL_MAX_WORKERS": "9"})
    assert (policy.minimum, policy.maximum, policy.messages_per_worker) == (3, 9, 100)
    assert ScalingPolicy.from_env({"SCHEDULER_LOCAL_WORKERS": "1"}).maximum >= 2


class Keep(Exception):
    pass


def record(i: int) -> dict[str, Any]:
    return {"messageId": f"m{i}", "receiptHandle": f"r{i}", "body": str(i), "attributes": {}, "messageAttributes": {}}


def test_a_batch_is_handled_concurrently_and_reports_kept_and_failed_records() -> None:
    # Given a record handler that waits until all ten records of the batch are in it at once
    inside = threading.Barrier(10, timeout=10)
    flushed: list[int] = []

    def handle(rec: Any) -> str:
        inside.wait()
        n = int(rec.body)
        if n == 3:
            raise Keep("early: back in 5s")
        if n == 7:
            raise RuntimeError("target exploded")
        return "done"

    batch = ConcurrentBatch(handle, threads=10, flush=lambda: flushed.append(1), keep=Keep)
    # When the batch is handled
    began = time.monotonic()
    result = batch({"Records": [record(i) for i in range(10)]}, None)
    # Then every record ran at the same time (the barrier let them through), the kept and the failed ones are
    # reported for SQS to keep, and the metrics were flushed once
    assert time.monotonic() - began < 10
    assert sorted(f["itemIdentifier"] for f in result["batchItemFailures"]) == ["m3", "m7"]
    assert flushed == [1]


def test_idle_polls_back_off_to_a_fifth_of_a_second() -> None:
    assert idle_sleep(1) == pytest.approx(0.05)
    assert idle_sleep(2) == pytest.approx(0.1)
    assert idle_sleep(10) == pytest.approx(0.2)


def test_the_batch_is_held_around_all_its_records_as_the_worker_handler_holds_it() -> None:
    # Given a batch handler whose `around` (the worker's hold of the batch) records when it is entered and left
    events: list[str] = []

    @contextmanager
    def around(event: dict[str, Any]) -> Iterator[None]:
        events.append(f"hold {len(event['Records'])}")
        yield
        events.append("release")

    def handle(rec: Any) -> None:
        events.append(f"record {rec.body}")

    # When a batch of three is handled
    ConcurrentBatch(handle, threads=3, around=around)({"Records": [record(i) for i in range(3)]}, None)
    # Then every record ran inside one hold of the whole batch
    assert events[0] == "hold 3" and events[-1] == "release"
    assert sorted(events[1:-1]) == ["record 0", "record 1", "record 2"]
