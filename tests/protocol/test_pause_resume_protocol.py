"""A retry skipped while its job was paused, then reopened by the resume (docs/design.md §3.4 steps 3-4 and §3.5),
under crashes, against both backends: a worker dying right before or right after the finish that records the pause
skip, or the claim that reopens it, must lose nothing - the occurrence the resume's `run_all` sends again runs once,
with one effect at a cooperating target, one call per claim that reached it, and its completion events published
(the skip's, then its outcome's)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from crashable import T0, Crash, CrashableCore, CrashAt

from scheduler.core.model.job import RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.ports import TargetCall, TargetFailure

EVERY_MINUTE = {"type": "cron", "expression": "* * * * *"}
RETRY = {"max_attempts": 3, "initial_backoff_seconds": 1}
#: The occurrence at stake, the pause a second before it, the retry while paused, and the resume past the grace.
FIRST = T0 + timedelta(minutes=1)
PAUSED = FIRST - timedelta(seconds=1)
RETRIED = FIRST + timedelta(seconds=10)
RESUMED = T0 + timedelta(minutes=3, seconds=30)
#: The catch-up the resume sends besides it (run_all: every occurrence that fell due while the job was paused).
CAUGHT_UP = [FIRST + timedelta(minutes=1), FIRST + timedelta(minutes=2)]


class _Message:
    def __init__(self, world: CrashableCore, message: Any) -> None:
        self.world, self.message, self.receive_count = world, message, message.receive_count

    def extend_visibility(self, seconds: int) -> None:
        self.world.queue.change_visibility(self.message, seconds)


class _ClockAhead:
    """A worker's clock running `seconds` ahead of the world's (within the clock-skew allowance)."""

    def __init__(self, world: CrashableCore, seconds: float) -> None:
        self.world, self.ahead = world, timedelta(seconds=seconds)

    def now(self) -> datetime:
        return self.world.clock.now() + self.ahead


class _Throttling:
    """The target answers 429 before anything takes effect."""

    def invoke(self, call: TargetCall) -> str | None:
        raise TargetFailure("retryable", "HTTP 429", status=429)


def throttled_before_the_pause(world: CrashableCore) -> tuple[str, str]:
    """A job every minute (run_all) whose 09:01 occurrence a worker with its clock 2 s ahead tried just before the
    pause took effect at 09:00:59, throttled: it waits to retry, and the job is paused. (job id, the key)."""
    job_id = world.create(EVERY_MINUTE, misfire_policy="run_all", retry=RETRY)
    world.clock.set(T0 + timedelta(seconds=30))
    world.sweeper().sweep(world.deadline())
    key = occurrence_key(job_id, FIRST)
    (message,) = [m for m in world.queue.messages.values() if m.dispatch.key == key]
    ahead = replace(world.executor("ahead", target=_Throttling()), clock=_ClockAhead(world, 2))
    world.clock.set(FIRST - timedelta(seconds=1.5))
    assert not ahead.execute(message.dispatch, _Message(world, message)).ack
    assert world.ledger.get(key).state == RunState.RETRY_WAIT
    world.clock.set(PAUSED)
    world.service().pause("tenant", job_id)
    return job_id, key


def doomed_takes(world: CrashableCore, key: str, version: int, ledger: Any) -> None:
    """The doomed worker (its ledger `ledger`) receives the message of `key` at `version` and dies inside `execute`;
    the other messages it received go back to the queue at once."""
    doomed = world.executor("doomed", ledger=ledger)
    taken = False
    for message in world.queue.receive(10):
        if message.dispatch.key == key and message.dispatch.version == version and not taken:
            taken = True
            with pytest.raises(Crash):
                doomed.execute(message.dispatch, _Message(world, message))
        else:
            world.queue.change_visibility(message, 0)
    assert taken


def assert_ran_once_after_its_skip(world: CrashableCore, job_id: str, key: str) -> None:
    """The occurrence SUCCEEDED once after it was skipped as paused, with one effect and one call per claim that
    reached the target; the catch-up ran too; every completion event published, the skip's before the outcome's."""
    run = world.ledger.get(key)
    assert run is not None and run.state == RunState.SUCCEEDED, run
    assert run.paused_version is None and run.outbox == []
    states = [h.state for h in run.history]
    assert states.count(RunState.SUCCEEDED) == 1 and RunState.SKIPPED in states
    epochs = [h.epoch for h in run.history]
    assert epochs == sorted(epochs)
    assert world.sink.effects[key] == 1
    assert [token for called, token in world.sink.calls if called == key] == [run.epoch]
    for at in CAUGHT_UP:
        assert world.sink.effects[occurrence_key(job_id, at)] == 1
    published = {e.event_id: e for e in world.events.published if e.occurrence_key == key}
    outcomes = sorted(published.values(), key=lambda e: e.fencing_token)
    assert [e.state for e in outcomes] == [RunState.SKIPPED, RunState.SUCCEEDED]
    assert outcomes[-1].fencing_token == run.epoch


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_around_the_finish_that_records_the_pause_skip_loses_nothing(world: CrashableCore, when: str) -> None:
    job_id, key = throttled_before_the_pause(world)

    # The retry comes while the job is paused; its worker dies right before or right after recording the skip
    world.clock.set(RETRIED)
    crash = CrashAt(world.ledger, "finish", when)
    doomed_takes(world, key, 1, crash)
    assert crash.fired
    # Workers and sweeps go on while the job is paused (the message comes back: the skip is recorded or found)
    world.run_until(RESUMED - timedelta(seconds=5), step=10)
    skipped = world.ledger.get(key)
    assert skipped is not None and (skipped.state, skipped.paused_version) == (RunState.SKIPPED, 2)

    world.clock.set(RESUMED)
    world.service().resume("tenant", job_id)
    world.run_until(RESUMED + timedelta(minutes=5), step=10)

    assert_ran_once_after_its_skip(world, job_id, key)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_around_the_claim_that_reopens_the_pause_skip_loses_nothing(world: CrashableCore, when: str) -> None:
    job_id, key = throttled_before_the_pause(world)
    world.clock.set(RETRIED)
    while world.work():
        pass
    assert world.ledger.get(key).state == RunState.SKIPPED

    # The resume sends it again (version 3); the worker that takes it dies right before or right after the claim
    world.clock.set(RESUMED)
    world.service().resume("tenant", job_id)
    world.sweeper().sweep(world.deadline())
    crash = CrashAt(world.ledger, "claim", when)
    doomed_takes(world, key, 3, crash)
    assert crash.fired
    reopened = world.ledger.get(key)
    assert reopened is not None
    assert reopened.state == (RunState.SKIPPED if when == "before" else RunState.RUNNING)
    world.run_until(RESUMED + timedelta(minutes=5), step=10)

    assert_ran_once_after_its_skip(world, job_id, key)
