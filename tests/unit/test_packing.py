"""Several occurrences in one ready-queue message (scheduler.core.execution.packing): how a send packs them, and how the
worker settles such a message. The body that carries them is the adapter's (tests/adapters/test_dispatch_message.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from scheduler.adapters.memory import FakeClock, MemoryMessage, MemoryQueue, RecordingMetrics
from scheduler.core.execution.executor import Outcome, Why
from scheduler.core.execution.packing import MessageRunner, PackingConfig, pack
from scheduler.core.ports import Dispatch
from scheduler.core.runtime.tasks import InOrder

NOW = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def herd(count: int, at: datetime = NOW, tenant: str = "acme", priority: str = "normal") -> list[Dispatch]:
    return [Dispatch(f"{tenant}-{priority}-{i}", tenant, at, at, 1, "scheduled", priority) for i in range(count)]  # type: ignore[arg-type]


def test_a_herd_of_one_tenant_and_instant_is_packed_ten_to_a_message() -> None:
    messages = pack(herd(25), PackingConfig())
    assert [len(m) for m in messages] == [10, 10, 5]
    assert sorted(d.job_id for m in messages for d in m) == sorted(d.job_id for d in herd(25))


def test_one_occurrence_a_message_when_configured_so() -> None:
    assert [len(m) for m in pack(herd(3), PackingConfig(occurrences=1))] == [1, 1, 1]
    with pytest.raises(ValueError):
        PackingConfig(occurrences=0)


def test_tenants_and_lanes_never_share_a_message() -> None:
    mixed = herd(3) + herd(2, tenant="other") + herd(2, priority="high")
    messages = pack(mixed, PackingConfig())
    assert sorted(len(m) for m in messages) == [2, 2, 3]
    assert all(len({(d.tenant, d.priority) for d in m}) == 1 for m in messages)


def test_a_message_spans_at_most_the_spread_from_its_first_and_is_delayed_for_its_earliest() -> None:
    # Release instants 0, 60, 100, 101 and 150 ms: the first three share a message, the rest start another
    offsets = [150, 0, 101, 60, 100]
    dispatches = [replace(d, fire_at=NOW + timedelta(milliseconds=ms)) for d, ms in zip(herd(5), offsets, strict=True)]
    messages = pack(dispatches, PackingConfig())
    assert [[int((d.fire_at - NOW).total_seconds() * 1000) for d in m] for m in messages] == [[0, 60, 100], [101, 150]]


def test_a_budgets_later_release_decides_where_an_occurrence_goes() -> None:
    on_time, held_back = herd(2)
    messages = pack([on_time, held_back.deferred_to(NOW + timedelta(seconds=5))], PackingConfig())
    assert [[d.job_id for d in m] for m in messages] == [[on_time.job_id], [held_back.job_id]]


class Scripted:
    """An executor whose outcome per job id is scripted (an exception is raised)."""

    def __init__(self, clock: FakeClock, outcomes: dict[str, Outcome | Exception]) -> None:
        self.clock, self.outcomes, self.ran = clock, outcomes, []

    def execute(self, dispatch: Dispatch, message: object) -> Outcome:
        self.ran.append(dispatch.job_id)
        outcome = self.outcomes.get(dispatch.job_id, Outcome.acknowledge(Why.RECORDED))
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


class Received:
    """The message the occurrences came in (its visibility is the caller's to change)."""

    receive_count = 1

    def extend_visibility(self, seconds: int) -> None:
        raise AssertionError("a message of several occurrences is acknowledged or left to come back, never hidden")


def runner(outcomes: dict[str, Outcome | Exception]) -> tuple[MessageRunner, MemoryQueue, Scripted]:
    clock = FakeClock(NOW)
    queue = MemoryQueue(clock)
    executor = Scripted(clock, outcomes)
    return MessageRunner(executor, queue, clock, RecordingMetrics(), InOrder()), queue, executor  # type: ignore[arg-type]


def test_a_message_of_one_occurrence_keeps_its_outcome() -> None:
    [one] = herd(1)
    run, queue, _ = runner({one.job_id: Outcome.hide(30, Why.RETRY_NOT_DUE)})
    queue.send([one], NOW)
    [message] = queue.receive()
    outcome = run.run([one], MemoryMessage(queue, message))
    assert not outcome.ack and outcome.hide_seconds == 30
    assert len(queue.messages) == 1  # nothing sent again: the caller hides this message instead


def test_what_the_executor_would_keep_is_sent_again_released_no_sooner_and_the_message_acknowledged() -> None:
    a, b, c = herd(3)
    run, queue, executor = runner(
        {b.job_id: Outcome.hide(30, Why.RETRY_NOT_DUE), c.job_id: Outcome.hide(1, Why.RUNNING_ELSEWHERE)}
    )

    outcome = run.run([a, b, c], Received())

    assert outcome.ack and outcome.why == Why.SETTLED
    assert executor.ran == [a.job_id, b.job_id, c.job_id]
    visible = {m.dispatch.job_id: m.visible_at for m in queue.messages.values()}
    assert visible == {b.job_id: NOW + timedelta(seconds=31), c.job_id: NOW + timedelta(seconds=2)}
    assert run.metrics.counts["OccurrencesSentAgain"] == 2  # type: ignore[attr-defined]


def test_an_occurrence_that_raises_leaves_the_whole_message_to_come_back() -> None:
    a, b = herd(2)
    run, queue, _ = runner({a.job_id: Outcome.hide(30, Why.RETRY_NOT_DUE), b.job_id: RuntimeError("DynamoDB down")})
    with pytest.raises(RuntimeError):
        run.run([a, b], Received())
    assert queue.messages == {}  # nothing sent again: the message itself comes back after the batch's hold
