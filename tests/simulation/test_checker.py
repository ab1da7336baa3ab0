"""The checker must be able to fail: each invariant check, fed a tampered end state, reports its violation."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from scheduler.core.execution.events import outbox_entry
from scheduler.core.model.job import BackfillState, JobState, RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.ports import Backfill
from scheduler.core.sweep.backfill import occurrences_in
from scheduler_sim import FaultProfile, Simulation
from scheduler_sim.checker import check
from scheduler_sim.records import Published
from scheduler_sim.simulation import Abandoned, InvalidOutcome


@pytest.fixture
def finished() -> Simulation:
    """A calm run that passes, to tamper with. Seed 4 has recurring jobs still ACTIVE at the end, jobs with
    completion events on and off, and a backfill."""
    sim = Simulation(4, profile=FaultProfile.calm())
    result = sim.run()
    assert result.ok
    assert any(job.state == JobState.ACTIVE for job in sim.jobs.jobs.values())
    return sim


def _invariants(sim: Simulation) -> set[int]:
    return {v.invariant for v in check(sim.observed())}


def test_an_occurrence_left_running_is_lost(finished: Simulation) -> None:
    item = next(iter(finished.ledger.items.values()))
    item.state = RunState.RUNNING
    assert 1 in _invariants(finished)


def test_a_recurring_job_without_a_live_timer_is_lost(finished: Simulation) -> None:
    active = {job.job_id for job in finished.jobs.jobs.values() if job.state == JobState.ACTIVE}
    for items in finished.timers.timer_items.values():
        for slot in [s for s, timer in items.items() if timer.job_id in active]:
            del items[slot]
    assert 1 in _invariants(finished)


def test_a_second_accepted_effect_is_a_duplicate(finished: Simulation) -> None:
    effects = next(iter(finished.sink.effects.values()))
    effects.append(replace(effects[0], key=effects[0].key, token=effects[0].token + 1))
    assert 2 in _invariants(finished)


def test_an_at_most_once_occurrence_that_reached_the_target_twice_is_a_duplicate(finished: Simulation) -> None:
    call = finished.sink.calls[0]
    twice = replace(call, delivery="at_most_once", reached=True)
    finished.sink.calls += [twice, replace(twice)]
    assert 2 in _invariants(finished)


def test_a_write_from_a_stale_epoch_is_reported(finished: Simulation) -> None:
    key = next(iter(finished.ledger.items))
    finished.ledger_claimed(key, 7)
    finished.ledger_write("finish SUCCEEDED", key, 6, "worker-9/old")
    assert 3 in _invariants(finished)


def test_a_call_after_a_cancellation_was_acknowledged_and_seen_is_reported(finished: Simulation) -> None:
    record = finished.records[0]
    assert record.job_id is not None
    acked = finished.clock.now()
    record.cancel_acked = acked
    # A worker read the job after the cancellation was acknowledged, and still called the target.
    late = replace(
        finished.sink.calls[0],
        job_id=record.job_id,
        job_read_at=acked + timedelta(milliseconds=500),
        at=acked + timedelta(seconds=1),
    )
    finished.sink.calls.append(late)
    assert 4 in _invariants(finished)


def test_a_missed_occurrence_without_a_misfire_decision_is_reported(finished: Simulation) -> None:
    ran = [item for item in finished.ledger.items.values() if item.state == RunState.SUCCEEDED]
    job_ids = {job.job_id for job in finished.jobs.jobs.values() if job.state == JobState.ACTIVE}
    victim = next(item for item in ran if item.job_id in job_ids)
    del finished.ledger.items[victim.key]
    finished.first_send.pop(victim.key, None)
    assert 5 in _invariants(finished)


def test_bad_input_that_changed_state_is_reported(finished: Simulation) -> None:
    finished.invalid_outcomes.append(InvalidOutcome("payload-too-large", "accepted", True, True))
    assert 6 in _invariants(finished)


def test_a_message_a_dead_worker_held_that_comes_back_late_is_reported(finished: Simulation) -> None:
    message_id, receives = next(iter(finished.queue.receives.items()))
    died = receives[-1] - timedelta(seconds=finished.hold_config.hold_seconds + 60)
    finished.abandoned.append(Abandoned(died, "worker-1", (message_id,), ("job:key",)))
    assert 10 in _invariants(finished)
    finished.abandoned[-1] = Abandoned(receives[-1] - timedelta(seconds=15), "worker-1", (message_id,), ("job:key",))
    assert 10 not in _invariants(finished)


def _announced(sim: Simulation) -> list[Published]:
    """The published completion events of the run's events-on jobs."""
    events = [p for p in sim.bus.published if sim.jobs.jobs[p.event.job_id].spec.events is True]
    assert events
    return events


def test_a_terminal_outcome_of_an_events_on_job_never_published_is_reported(finished: Simulation) -> None:
    lost = _announced(finished)[0].event.event_id
    finished.bus.published = [p for p in finished.bus.published if p.event.event_id != lost]
    assert 11 in _invariants(finished)


def test_an_event_published_for_a_job_with_events_off_is_reported(finished: Simulation) -> None:
    quiet = next(job for job in finished.jobs.jobs.values() if job.spec.events is not True)
    event = replace(_announced(finished)[0].event, job_id=quiet.job_id)
    finished.bus.published.append(Published(finished.clock.now(), "worker-1", event))
    assert 11 in _invariants(finished)


def test_an_outcome_left_in_the_outbox_is_reported(finished: Simulation) -> None:
    item = finished.ledger.items[_announced(finished)[0].event.occurrence_key]
    item.outbox = [outbox_entry(item.key, item.epoch, item.state, finished.clock.now())]
    assert 11 in _invariants(finished)


def _backfill(sim: Simulation) -> Backfill:
    """The run's completed backfill (seed 4 backfills 8 occurrences in 2 waves)."""
    return next(b for b in sim.backfills.items.values() if b.state == BackfillState.COMPLETED)


def test_a_backfill_left_running_is_reported(finished: Simulation) -> None:
    backfill = _backfill(finished)
    finished.backfills.items[backfill.backfill_id] = replace(backfill, state=BackfillState.RUNNING)
    assert 12 in _invariants(finished)


def test_a_backfilled_occurrence_that_never_ran_is_reported(finished: Simulation) -> None:
    backfill = _backfill(finished)
    first = occurrences_in(backfill.plan, None, backfill.range_from, backfill.range_to, 1)[0]
    del finished.ledger.items[occurrence_key(backfill.job_id, first)]
    assert 12 in _invariants(finished)


def test_a_message_received_late_behind_a_backlog_is_not_a_slow_restart(finished: Simulation) -> None:
    # Given a message a dead worker held, received again well after the hold time
    message_id, receives = next(iter(finished.queue.receives.items()))
    died = receives[-1] - timedelta(seconds=finished.hold_config.hold_seconds + 60)
    finished.abandoned.append(Abandoned(died, "worker-1", (message_id,), ("job:key",)))
    # When every receive meanwhile came back full (more visible messages than the workers took)
    meanwhile = [died + timedelta(seconds=s) for s in range(15, 75, 5)]
    finished.queue.polls = [(at, True) for at in meanwhile]
    # Then the workers were behind, not the recovery
    assert 10 not in _invariants(finished)
    # But one receive that came back short would have taken it, had it been visible
    finished.queue.polls[4] = (meanwhile[4], False)
    assert 10 in _invariants(finished)
