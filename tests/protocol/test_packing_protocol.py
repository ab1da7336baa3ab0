"""Messages that carry several occurrences (scheduler.core.execution.packing), against both backends: a sweep packs the
occurrences one tenant has due in the same instant into one message; the worker runs each, sends again on its own
any it keeps (here: one whose target failed retryably, so it waits for its backoff), and only then acknowledges
the message. A worker that dies before or after any step - a claim, a target call, a finish, the send of what it
keeps, the acknowledgement - loses nothing: the message comes back after the batch's hold, and every occurrence
takes effect exactly once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from crashable import SHARDS, Crash, CrashableCore, CrashAt
from test_execute_protocol import due_occurrences

from scheduler.adapters.memory import MemoryBatchVisibility, MemoryMessage
from scheduler.core.execution.executor import Why
from scheduler.core.execution.packing import PackingConfig
from scheduler.core.model.job import RunState
from scheduler.core.model.keys import shard_of
from scheduler.core.ports import TargetCall, TargetFailure

OCCURRENCES = 4


def herd(world: CrashableCore) -> list[str]:
    """Four one-shot jobs of one tenant due at the same instant, swept, their time come: one message per bucket
    (shard) that has any, since this sweep sends each bucket's page at once; a sweep that lands its pages sends a
    minute's buckets' messages together)."""
    world.queue.packing = PackingConfig()  # as deployed
    return due_occurrences(world, OCCURRENCES)


class FailsOnce:
    """The sink, failing the first call for `key` retryably (the occurrence waits for its backoff)."""

    def __init__(self, world: CrashableCore, key: str) -> None:
        self.world, self.key, self.failed = world, key, False

    def invoke(self, call: TargetCall) -> str | None:
        if call.occurrence_key == self.key and not self.failed:
            self.failed = True
            raise TargetFailure("retryable", "503 from the target")
        return self.world.sink.invoke(call)


def drain(world: CrashableCore, target: Any, until: float = 900) -> None:
    """Fault-free workers poll every second until the queue is empty (or `until` seconds have passed)."""
    end = world.clock.now() + timedelta(seconds=until)
    while world.clock.now() < end and world.queue.messages:
        world.clock.advance(1)
        messages = world.queue.receive(10)
        if messages:
            world.work_batch(world.runner("rescuer", target=target), messages)


def test_a_sweep_sends_one_tenants_occurrences_of_one_instant_in_one_message(world: CrashableCore) -> None:
    keys = herd(world)

    messages = world.queue.receive(10)

    # One message a bucket, however many occurrences it has due at that instant
    assert sorted(d.key for m in messages for d in m.dispatches) == sorted(keys)
    assert len(messages) == len({shard_of(d.job_id, SHARDS) for m in messages for d in m.dispatches})
    assert len(messages) < OCCURRENCES
    world.work_batch(world.runner(), messages)
    world.assert_exactly_once(keys)
    assert not world.queue.messages


def test_an_occurrence_the_worker_keeps_is_sent_again_alone_before_the_message_is_acknowledged(
    world: CrashableCore,
) -> None:
    keys = herd(world)
    messages = world.queue.receive(10)
    message = max(messages, key=lambda m: len(m.dispatches))
    assert len(message.dispatches) > 1
    target = FailsOnce(world, message.dispatches[-1].key)

    outcome = world.runner(target=target).run(message.dispatches, MemoryMessage(world.queue, message))

    # The message is settled: the others recorded, one waiting for its retry in a message of its own, due at its
    # backoff
    assert outcome.ack and outcome.why == Why.SETTLED
    world.queue.delete(message)
    [again] = [m for m in world.queue.messages.values() if m.message_id not in {n.message_id for n in messages}]
    assert [d.key for d in again.dispatches] == [message.dispatches[-1].key]
    waiting = world.ledger.get(message.dispatches[-1].key)
    assert waiting.state == RunState.RETRY_WAIT
    assert again.visible_at >= waiting.next_attempt_at
    assert world.metrics.counts["OccurrencesSentAgain"] == 1
    drain(world, target)
    world.assert_exactly_once(keys)


CRASHES = [
    pytest.param("ledger", "claim", "after", 2, id="after-the-second-claim"),
    pytest.param("ledger", "finish", "before", 3, id="before-the-third-finish"),
    pytest.param("target", "invoke", "after", 4, id="after-the-last-target-call"),
    pytest.param("queue", "send", "before", 1, id="before-sending-the-kept-one-again"),
    pytest.param("queue", "send", "after", 1, id="after-sending-the-kept-one-again"),
    pytest.param("visibility", "hold", "after", 1, id="after-the-hold"),
]


@pytest.mark.parametrize(("port", "method", "when", "nth"), CRASHES)
def test_a_worker_that_dies_at_any_step_of_a_message_loses_nothing_and_repeats_nothing(
    world: CrashableCore, port: str, method: str, when: str, nth: int
) -> None:
    keys = herd(world)
    messages = world.queue.receive(10)
    # The target fails the second occurrence of the biggest message once, so the worker keeps it and sends it again
    biggest = max(messages, key=lambda m: len(m.dispatches))
    target: Any = FailsOnce(world, biggest.dispatches[1].key)
    ledger: Any = world.ledger
    queue: Any = world.queue
    visibility: Any = MemoryBatchVisibility(world.queue, messages)
    if port == "ledger":
        ledger = CrashAt(ledger, method, when, nth)
    elif port == "queue":
        queue = CrashAt(queue, method, when, nth)
    elif port == "visibility":
        visibility = CrashAt(visibility, method, when, nth)
    else:
        target = CrashAt(target, method, when, nth)

    # When the worker dies at that step, before acknowledging the message
    with pytest.raises(Crash):
        world.work_batch(world.runner(ledger=ledger, queue=queue, target=target), messages, visibility)
    assert all(m.message_id in world.queue.messages for m in messages)

    # Then the message is back within the hold time (or the lease, for what it had claimed), and once fault-free
    # workers have drained the queue every occurrence took effect exactly once
    drain(world, FailsOnce(world, "none"))
    world.assert_exactly_once(keys)
