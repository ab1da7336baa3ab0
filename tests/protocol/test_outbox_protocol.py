"""Completion events under crashes, against both backends: a worker that dies anywhere between recording a
terminal outcome and clearing its outbox entry never loses the event, and the only duplicates are of the
outcome it was handling (same event id, for consumers to dedupe)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import timedelta

import pytest
from crashable import T0, Crash, CrashableCore, CrashAt

from scheduler.core.execution.events import Outbox
from scheduler.core.model.timefmt import rfc3339

END = T0 + timedelta(minutes=3)


def workload(world: CrashableCore) -> None:
    for seconds in (20, 40, 70, 95):
        world.create({"type": "once", "at": rfc3339(T0 + timedelta(seconds=seconds))})
    world.create({"type": "rate", "every_seconds": 30, "start_at": rfc3339(T0 + timedelta(seconds=10)),
                  "end_at": rfc3339(END)})  # fmt: skip


def assert_every_outcome_published(world: CrashableCore) -> Counter[str]:
    runs = world.runs_by_key()
    assert runs and all(run.state.terminal for run in runs.values())
    published = Counter(e.event_id for e in world.events.published)
    for key, run in runs.items():
        mine = [e for e in world.events.published if e.occurrence_key == key]
        assert mine, f"{key} ({run.state.value}) was never published"
        assert {e.state for e in mine} == {run.state}
        assert run.outbox == [], f"{key} still has unpublished outcomes"
    assert world.ledger.pending_outbox(100) == []
    return published


@pytest.mark.parametrize(
    ("port", "method", "when"),
    [
        ("ledger", "finish", "after"),  # the outcome is recorded, nothing published
        ("events", "publish", "before"),  # the same, seen from the bus
        ("events", "publish", "after"),  # published, not cleared
        ("ledger", "clear_outbox", "before"),
        ("ledger", "clear_outbox", "after"),  # cleared: nothing left to do
    ],
)
@pytest.mark.parametrize("nth", [1, 3])
def test_a_worker_crash_around_the_outbox_loses_no_event(
    world: CrashableCore, port: str, method: str, when: str, nth: int
):
    # Given a workload, and a worker that dies at the nth call of one outbox step
    workload(world)
    world.clock.set(T0 + timedelta(seconds=45))
    sweeper = world.sweeper("s1")
    sweeper.sweep(world.deadline())
    ledger = CrashAt(world.ledger, method, when, nth) if port == "ledger" else world.ledger
    doomed = world.executor("doomed", ledger=ledger)
    if port == "events":
        doomed = replace(
            doomed, outbox=Outbox(world.ledger, CrashAt(world.events, method, when, nth), world.metrics, world.clock)
        )
    crashed = False
    while not crashed and world.clock.now() < END:
        try:
            world.work(doomed)
        except Crash:
            crashed = True
        world.clock.advance(5)
        sweeper.sweep(world.deadline())
    assert crashed

    # When a fault-free system carries on (sweeps drain the outbox; the dead worker's message comes back), sweeping
    # every 15 s of fake time: twice within the outbox's settle time (30 s), eight times within a message's hiding
    # (120 s)
    world.run_until(END + timedelta(minutes=15), step=15)

    # Then every terminal outcome was published, nothing is left in the outbox, and an outcome was published
    # twice at most (only the crashed one can be), always under the same event id
    published = assert_every_outcome_published(world)
    assert all(count <= 2 for count in published.values())
    assert sum(count - 1 for count in published.values()) <= 1


def test_outcomes_recorded_while_the_bus_was_down_are_published_by_the_sweeps_once_it_is_back(world: CrashableCore):
    # Given the bus refuses every event while the workload runs (the workers acknowledge their messages anyway)
    workload(world)
    world.events.failing = True
    world.run_until(END + timedelta(minutes=2), step=15)
    assert world.events.published == []
    assert world.ledger.pending_outbox(100)

    # When it is back, the sweeps (not the workers: their messages are gone) publish every outcome, once
    world.events.failing = False
    world.run_until(END + timedelta(minutes=3), step=15)

    published = assert_every_outcome_published(world)
    assert set(published.values()) == {1}
