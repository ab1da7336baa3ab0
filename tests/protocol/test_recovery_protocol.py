"""Bounded recovery under crashes, against both backends: a worker takes a batch, holds it for the
hold time (20 s, one visibility change for the batch), and dies right before or right after the hold, or at a
ledger step or target call of any record. Every message of the batch must be received again within the hold time
of the crash (only a crash before the hold, the window the event source mapping owns on AWS, falls back to the
queue's visibility timeout); an occurrence the dead worker had not started then runs at once, one it had claimed
as soon as its lease ends - within the hold time too, at the deployed lease; each takes effect exactly once."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from crashable import HOLD, LEASE, Crash, CrashableCore, CrashAt
from test_execute_protocol import due_occurrences

from scheduler.adapters.memory import MemoryBatchVisibility, MemoryMessage
from scheduler.core.execution.recovery import HeldBatch
from scheduler.core.ports import TargetCall

MARGIN = 2  # the executor hides a message it finds under someone else's live lease until the lease ends + 2 s
BATCH = 4


class CrashingTarget:
    """The sink, with a crash right before the `nth` call or right after its effect."""

    def __init__(self, world: CrashableCore, when: str, nth: int) -> None:
        self.world, self.when, self.left = world, when, nth

    def invoke(self, call: TargetCall) -> str | None:
        self.left -= 1
        if self.left == 0 and self.when == "before":
            raise Crash("before the target call")
        result = self.world.sink.invoke(call)
        if self.left == 0:
            raise Crash("after the target's effect")
        return result


def recover(world: CrashableCore, keys: list[str], crashed_at: datetime, until: float = 300) -> dict[str, float]:
    """Fault-free workers poll every second until every occurrence is done; returns, per key, how long after the
    crash it was received again."""
    back: dict[str, float] = {}
    end = crashed_at + timedelta(seconds=until)
    while world.clock.now() < end and not all(
        (run := world.ledger.get(k)) is not None and run.state.terminal for k in keys
    ):
        world.clock.advance(1)
        messages = world.queue.receive(10)
        for message in messages:
            back.setdefault(message.dispatch.key, (world.clock.now() - crashed_at).total_seconds())
        if messages:
            world.work_batch(world.runner("rescuer"), messages)
    return back


CRASHES = [
    pytest.param("visibility", "hold", "after", 1, id="after-the-hold"),
    pytest.param("ledger", "claim", "before", 1, id="before-the-first-claim"),
    pytest.param("ledger", "claim", "after", 1, id="after-the-first-claim"),
    pytest.param("ledger", "claim", "after", 3, id="after-the-third-claim"),
    pytest.param("ledger", "finish", "before", 2, id="before-the-second-finish"),
    pytest.param("ledger", "finish", "after", 2, id="after-the-second-finish"),
    pytest.param("target", "invoke", "before", 2, id="before-the-second-target-call"),
    pytest.param("target", "invoke", "after", 4, id="after-the-last-effect"),
]


@pytest.mark.parametrize(("port", "method", "when", "nth"), CRASHES)
def test_every_occurrence_a_dead_worker_held_restarts_within_the_hold_time(
    world: CrashableCore, port: str, method: str, when: str, nth: int
) -> None:
    keys = due_occurrences(world, BATCH)
    messages = world.queue.receive(10)
    assert len(messages) == BATCH
    visibility: Any = MemoryBatchVisibility(world.queue, messages)
    ledger: Any = world.ledger
    target: Any = None
    if port == "visibility":
        visibility = CrashAt(visibility, method, when, nth)
    elif port == "ledger":
        ledger = CrashAt(world.ledger, method, when, nth)
    else:
        target = CrashingTarget(world, when, nth)

    with pytest.raises(Crash):
        world.work_batch(world.runner("doomed", ledger=ledger, target=target), messages, visibility)
    crashed_at = world.clock.now()

    back = recover(world, keys, crashed_at)
    assert set(back) == set(keys)  # every message of the batch came back (the settled ones are absorbed)
    slowest = max(back.values())
    assert slowest <= HOLD.hold_seconds + 1, back
    # ... and every occurrence is done once the dead worker's lease has ended, not after the visibility timeout: at
    # the deployed lease, by the time the held messages are back (the lease and its margin are shorter than the hold)
    assert LEASE.total_seconds() + MARGIN <= HOLD.hold_seconds
    assert (world.clock.now() - crashed_at).total_seconds() <= HOLD.hold_seconds + 2
    world.assert_exactly_once(keys)


def test_a_crash_before_the_hold_falls_back_to_the_queue_visibility_timeout(world: CrashableCore) -> None:
    """The window between the receive and the handler's first instruction: on AWS the event source mapping's. Nothing
    is lost; it comes back after the queue's visibility timeout (the local poller receives with the hold time)."""
    keys = due_occurrences(world, BATCH)
    messages = world.queue.receive(10)
    doomed = CrashAt(MemoryBatchVisibility(world.queue, messages), "hold", "before")
    with pytest.raises(Crash):
        world.work_batch(world.runner("doomed"), messages, doomed)
    back = recover(world, keys, world.clock.now(), until=world.queue.visibility_timeout + 30)
    assert set(back.values()) == {world.queue.visibility_timeout}
    world.assert_exactly_once(keys)


def test_a_long_batch_that_renews_its_hold_is_not_received_twice(world: CrashableCore) -> None:
    """The renewal keeps the records the worker has not reached yet hidden: no other worker takes them early."""
    keys = due_occurrences(world, BATCH)
    messages = world.queue.receive(10)
    slow = CrashingTarget(world, "never", 0)
    held = HeldBatch(MemoryBatchVisibility(world.queue, messages), dict.fromkeys(m.message_id for m in messages),
                     HOLD, world.metrics)  # fmt: skip
    with held:
        for message in messages:
            world.clock.advance(HOLD.hold_seconds - 2)  # each record waits behind a slow one
            assert world.queue.receive(10) == []
            held.renew()  # the heartbeat, every lease / 3 in the handler
            outcome = world.executor("slow", target=slow).execute(message.dispatch, MemoryMessage(world.queue, message))
            assert outcome.ack
            held.release(message.message_id)
            world.queue.delete(message)
    world.assert_exactly_once(keys)
