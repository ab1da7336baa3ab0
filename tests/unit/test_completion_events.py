"""Completion events: every terminal outcome is published once per outcome, through an outbox written by the same
ledger write that records the outcome; the worker publishes right after its write and the sweeper drains what a
crash or a refusing bus left behind."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from scheduler.core.execution.events import DETAIL_TYPES, OUTBOX_SETTLE, event_detail
from scheduler.core.model.job import RunState
from scheduler.core.ports import Dispatch, OutcomeEvent
from scheduler.core.records import Attempt, Execution
from tests.unit.fixtures import TENANT, FakeTarget, MemoryCore, StubMessage, ambiguous, permanent, retryable


class Crash(BaseException):
    """The worker process dies here (not an Exception: nothing in the core may catch it)."""


class CrashAfter:
    """A ledger proxy whose `method` crashes right after its first call took effect."""

    def __init__(self, inner: Any, method: str) -> None:
        self.inner = inner
        self.method = method
        self.fired = False

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.inner, name)
        if name != self.method:
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            if not self.fired:
                self.fired = True
                raise Crash(f"after {name}")
            return result

        return call


def published(world: MemoryCore, key: str | None = None) -> list[OutcomeEvent]:
    return [e for e in world.events.published if key is None or e.occurrence_key == key]


def outbox_of(world: MemoryCore, key: str) -> list[Any]:
    run = world.ledger.get(key)
    assert run is not None
    return run.outbox


# -- one event per terminal outcome ---------------------------------------------------------------------------


def settle(world: MemoryCore) -> None:
    """Let the newest outcome become old enough for the sweep's drain (a worker publishing it would be done)."""
    world.clock.advance(OUTBOX_SETTLE.total_seconds())


def test_a_succeeded_occurrence_publishes_one_event_right_after_its_write(world: MemoryCore) -> None:
    job, dispatch = world.due(payload={"charge": 42})

    world.executor(FakeTarget(world.clock, "200 OK")).execute(dispatch, StubMessage())

    [event] = published(world)
    assert DETAIL_TYPES[event.state] == "Occurrence Succeeded"
    detail = event_detail(event)
    assert detail["occurrence_key"] == dispatch.key
    assert detail["job_id"] == job.job_id and detail["tenant"] == TENANT
    assert detail["state"] == "SUCCEEDED" and detail["attempts"] == 1 and detail["fencing_token"] == 1
    assert detail["result"] == "200 OK"
    assert detail["scheduled_for"] == "2026-01-05T09:00:10Z"
    assert detail["event_id"] == f"{dispatch.key}/1/SUCCEEDED"
    # And the outbox entry was cleared once the bus accepted it
    assert outbox_of(world, dispatch.key) == []
    assert world.metrics.counts["CompletionEventsPublished"] == 1


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("dead", "Occurrence Dead"),
        ("paused", "Occurrence Skipped"),
        ("cancelled", "Occurrence Cancelled"),
        ("reconciling", "Occurrence Reconciling"),
        ("unknown_job", "Occurrence Cancelled"),
    ],
)
def test_every_terminal_outcome_publishes_its_detail_type(world: MemoryCore, setup: str, expected: str) -> None:
    sched = {"type": "cron", "expression": "* * * * *"}
    job, dispatch = world.due(sched, delivery="at_most_once" if setup == "reconciling" else "at_least_once")
    target = FakeTarget(world.clock, permanent() if setup == "dead" else ambiguous())
    if setup == "paused":
        world.service.pause(TENANT, job.job_id)
    elif setup == "cancelled":
        world.service.cancel(TENANT, job.job_id)
    elif setup == "unknown_job":
        dispatch = Dispatch("no-such-job", TENANT, dispatch.scheduled_for, dispatch.fire_at, 1)

    assert world.executor(target).execute(dispatch, StubMessage()).ack

    [event] = published(world)
    assert DETAIL_TYPES[event.state] == expected
    assert event.occurrence_key == dispatch.key
    assert outbox_of(world, dispatch.key) == []


def test_a_reconciling_run_lost_mid_call_publishes_reconciling(world: MemoryCore) -> None:
    # Given an at-most-once occurrence whose worker claimed it and died mid-run
    _, dispatch = world.due(delivery="at_most_once")
    world.ledger.claim(dispatch, Attempt("worker-1/dead", world.now(), world.now() + timedelta(seconds=60), False))
    world.clock.advance(62)

    world.executor(FakeTarget(world.clock), worker_id="worker-2").execute(dispatch, StubMessage(receive_count=2))

    [event] = published(world)
    assert event.state == RunState.RECONCILING
    assert event.error == "worker lost mid-run; outcome unknown"


def test_retries_publish_nothing_until_the_final_outcome(world: MemoryCore) -> None:
    _, dispatch = world.due(retry={"max_attempts": 3, "initial_backoff_seconds": 1, "max_backoff_seconds": 2})
    executor = world.executor(FakeTarget(world.clock, retryable(), retryable(), "ok"))

    world.queue.send([dispatch], world.now())
    world.deliver_until(world.now() + timedelta(seconds=30), executor)

    [event] = published(world)
    assert (event.state, event.attempts, event.fencing_token) == (RunState.SUCCEEDED, 3, 3)


def test_a_duplicate_message_publishes_nothing_more(world: MemoryCore) -> None:
    _, dispatch = world.due()
    executor = world.executor()
    executor.execute(dispatch, StubMessage())

    assert executor.execute(dispatch, StubMessage(receive_count=2)).ack

    assert len(published(world)) == 1


# -- the outbox: a refusing bus, a crash between the write and the publish ----------------------------------


def test_a_refusing_bus_does_not_fail_the_occurrence_and_the_sweep_publishes_later(world: MemoryCore) -> None:
    # Given the bus refuses everything
    _, dispatch = world.due()
    world.events.failing = True

    outcome = world.executor().execute(dispatch, StubMessage())

    # Then the outcome stands, and its event waits in the outbox
    assert outcome.ack
    assert world.ledger.get(dispatch.key).state == RunState.SUCCEEDED  # type: ignore[union-attr]
    assert published(world) == []
    assert len(outbox_of(world, dispatch.key)) == 1
    assert world.metrics.counts["CompletionEventFailures"] == 1

    # And a sweep while the bus still refuses keeps it
    report = world.sweep()
    assert (report.outbox_backlog, report.events_published) == (1, 0)
    assert len(outbox_of(world, dispatch.key)) == 1

    # When the bus is back, the next sweep once the outcome has settled publishes it, once
    world.events.failing = False
    settle(world)
    report = world.sweep()
    assert (report.outbox_backlog, report.events_published) == (1, 1)
    [event] = published(world)
    assert event.state == RunState.SUCCEEDED
    assert outbox_of(world, dispatch.key) == []
    assert world.sweep().outbox_backlog == 0


@pytest.mark.parametrize("method", ["finish", "record_unclaimed", "expire_to"])
def test_a_worker_that_dies_after_recording_the_outcome_still_gets_its_event_out(
    world: MemoryCore, method: str
) -> None:
    # Given a worker that dies right after the ledger write that records a terminal outcome
    if method == "expire_to":
        _, dispatch = world.due(delivery="at_most_once")
        world.ledger.claim(dispatch, Attempt("worker-0/dead", world.now(), world.now() + timedelta(seconds=60), False))
        world.clock.advance(62)
    else:
        _, dispatch = world.due()
    if method == "record_unclaimed":
        dispatch = Dispatch("no-such-job", TENANT, dispatch.scheduled_for, dispatch.fire_at, 1)
    doomed = world.executor()
    doomed = replace(doomed, ledger=CrashAfter(world.ledger, method))

    with pytest.raises(Crash):
        doomed.execute(dispatch, StubMessage())

    # Then the outcome is recorded and nothing was published...
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state.terminal
    assert published(world) == []
    assert len(run.outbox) == 1

    # ...and a sweep leaves it while its worker might still be publishing it; the next after that publishes it, once
    assert world.sweep().events_published == 0
    settle(world)
    assert world.sweep().events_published == 1
    [event] = published(world)
    assert (event.occurrence_key, event.state) == (dispatch.key, run.state)
    assert outbox_of(world, dispatch.key) == []
    world.sweep()
    assert len(published(world)) == 1


def test_the_redelivered_message_of_a_dead_worker_publishes_without_waiting_for_the_sweep(world: MemoryCore) -> None:
    _, dispatch = world.due()
    doomed = world.executor()
    doomed = replace(doomed, ledger=CrashAfter(world.ledger, "finish"))
    with pytest.raises(Crash):
        doomed.execute(dispatch, StubMessage())

    # When its message comes back to another worker
    outcome = world.executor(worker_id="worker-2").execute(dispatch, StubMessage(receive_count=2))

    assert outcome.ack
    [event] = published(world)
    assert event.state == RunState.SUCCEEDED
    assert outbox_of(world, dispatch.key) == []


def test_a_crash_after_the_publish_and_before_the_clear_publishes_again_with_the_same_event_id(
    world: MemoryCore,
) -> None:
    _, dispatch = world.due()
    doomed = world.executor()
    real_clear = world.ledger.clear_outbox

    def die(*args: Any) -> bool:
        raise Crash("before clear_outbox")

    world.ledger.clear_outbox = die  # type: ignore[method-assign]
    with pytest.raises(Crash):
        doomed.execute(dispatch, StubMessage())
    world.ledger.clear_outbox = real_clear  # type: ignore[method-assign]

    settle(world)
    world.sweep()

    first, second = published(world)
    assert first.event_id == second.event_id  # consumers dedupe on it
    assert outbox_of(world, dispatch.key) == []


def test_a_sweep_does_not_publish_again_what_a_live_worker_is_publishing(world: MemoryCore) -> None:
    # Given a worker that recorded an outcome and has not published it yet (its write and its publish are apart)
    _, dispatch = world.due()
    worker = world.executor()
    assert worker.outbox is not None
    publishing: list[Execution | None] = []
    flush, worker.outbox.flush = worker.outbox.flush, publishing.append  # type: ignore[method-assign,assignment]
    assert worker.execute(dispatch, StubMessage()).ack
    assert len(outbox_of(world, dispatch.key)) == 1

    # When a sweep drains the outbox in that moment, and then the worker publishes
    report = world.sweep()
    [recorded] = publishing
    assert flush(recorded)

    # Then the outcome was published once: the sweep counted it but left it to its worker
    assert (report.outbox_backlog, report.events_published) == (1, 0)
    settle(world)
    assert world.sweep().outbox_backlog == 0
    assert len(published(world)) == 1


# -- several outcomes of one occurrence --------------------------------------------------------------------


def test_a_resolved_reconciling_run_publishes_both_outcomes_with_distinct_ids(world: MemoryCore) -> None:
    job, dispatch = world.due(delivery="at_most_once")
    world.executor(FakeTarget(world.clock, ambiguous())).execute(dispatch, StubMessage())

    # When the operator resolves it through the API, its outcome is published at once (no sweep needed)
    world.resolution.resolve(TENANT, job.job_id, dispatch.key, RunState.SUCCEEDED, "the bank shows the charge")

    states = [e.state for e in published(world)]
    assert states == [RunState.RECONCILING, RunState.SUCCEEDED]
    assert len({e.event_id for e in published(world)}) == 2
    assert published(world)[-1].error == "the bank shows the charge"
    assert outbox_of(world, dispatch.key) == []
    world.sweep()  # and the drain has nothing left to publish
    assert len(published(world)) == 2


def test_an_outcome_recorded_while_an_earlier_one_is_unpublished_publishes_both(world: MemoryCore) -> None:
    # Given the RECONCILING event was never published (bus down), and the run is then resolved
    job, dispatch = world.due(delivery="at_most_once")
    world.events.failing = True
    world.executor(FakeTarget(world.clock, ambiguous())).execute(dispatch, StubMessage())
    world.resolution.resolve(TENANT, job.job_id, dispatch.key, RunState.SUCCEEDED, "resolved")
    world.events.failing = False

    settle(world)
    world.sweep()

    assert [e.state for e in published(world)] == [RunState.RECONCILING, RunState.SUCCEEDED]
    assert outbox_of(world, dispatch.key) == []


def test_clearing_never_drops_an_outcome_appended_after_the_publish(world: MemoryCore) -> None:
    job, dispatch = world.due(delivery="at_most_once")
    world.events.failing = True
    world.executor(FakeTarget(world.clock, ambiguous())).execute(dispatch, StubMessage())
    seen = world.ledger.get(dispatch.key)
    assert seen is not None and len(seen.outbox) == 1

    # When another outcome is appended between a drain's read and its clear
    world.resolution.resolve(TENANT, job.job_id, dispatch.key, RunState.SUCCEEDED, "resolved")

    assert not world.ledger.clear_outbox(dispatch.key, seen.outbox)
    assert len(outbox_of(world, dispatch.key)) == 2
