"""The execution protocol (docs/design.md §3.4): claim, run with a fencing token, record; retries, dead letters,
at-most-once reconciliation, leases, heartbeats and fencing."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from scheduler.core.errors import LeaseLost
from scheduler.core.execution.executor import ExecuteConfig, Why
from scheduler.core.execution.retry import backoff
from scheduler.core.model.job import JobSpec, RetryPolicy, RunState
from scheduler.core.ports import AttemptEnd, Dispatch, TargetCall
from scheduler.core.records import Attempt, Execution
from tests.unit.fixtures import (
    LEASE,
    TENANT,
    FakeTarget,
    MemoryCore,
    StubMessage,
    ambiguous,
    at,
    permanent,
    retryable,
)

FAST_RETRY = {"max_attempts": 3, "initial_backoff_seconds": 2, "max_backoff_seconds": 10}


def states(world: MemoryCore, dispatch: Dispatch) -> list[str]:
    run = world.ledger.get(dispatch.key)
    assert run is not None
    return [h.state.value for h in run.history]


def assert_acknowledged_unrun(world: MemoryCore, dispatch: Dispatch, recorded: RunState) -> Execution:
    """Executing `dispatch` acknowledges its message without calling the target and records the run `recorded`."""
    target = FakeTarget(world.clock)

    outcome = world.executor(target).execute(dispatch, StubMessage())

    assert outcome.ack
    assert target.calls == []
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == recorded, run
    return run


# -- the happy path and early or duplicate messages ---------------------------------------------------------


def test_success_records_succeeded_and_acknowledges(world: MemoryCore) -> None:
    job, dispatch = world.due()
    target = FakeTarget(world.clock, "200 OK")

    outcome = world.executor(target).execute(dispatch, StubMessage())

    assert outcome.ack
    run = world.ledger.get(dispatch.key)
    assert run is not None
    assert (run.state, run.attempts, run.epoch, run.result) == (RunState.SUCCEEDED, 1, 1, "200 OK")
    assert run.finished_at == world.now()
    # And the target got the occurrence key and the fencing token
    [call] = target.calls
    assert (call.key, call.token, call.attempt) == (dispatch.key, 1, 1)
    assert call.key == f"{job.job_id}:2026-01-05T09:00:10Z"


def test_early_message_is_hidden_until_its_fire_time(world: MemoryCore) -> None:
    _, dispatch = world.due()
    world.clock.advance(-30.4)  # the message arrives 30.4 s early
    target = FakeTarget(world.clock)

    outcome = world.executor(target).execute(dispatch, StubMessage())

    # Then it is hidden (rounded up, so it returns at or after the fire time) and nothing ran or was written
    assert not outcome.ack
    assert outcome.hide_seconds == 31
    assert target.calls == []
    assert world.ledger.get(dispatch.key) is None


def test_slightly_early_message_waits_and_then_runs_never_before_fire_time(world: MemoryCore) -> None:
    _, dispatch = world.due()
    world.clock.advance(-0.7)
    target = FakeTarget(world.clock)

    outcome = world.executor(target).execute(dispatch, StubMessage())

    assert outcome.ack
    [call] = target.calls
    assert call.at >= dispatch.fire_at


def test_early_message_through_the_queue_runs_once_at_its_fire_time(world: MemoryCore) -> None:
    _, dispatch = world.due()
    world.set_time(dispatch.fire_at - timedelta(minutes=3))
    world.queue.send([dispatch], world.now() - timedelta(minutes=20))  # e.g. sent with too short a delay
    target = FakeTarget(world.clock)

    world.deliver_until(dispatch.fire_at + timedelta(seconds=5), world.executor(target))

    assert [c.at >= dispatch.fire_at for c in target.calls] == [True]
    assert world.queue.messages == {}


def test_duplicate_of_a_finished_occurrence_is_acknowledged_without_running(world: MemoryCore) -> None:
    _, dispatch = world.due()
    target = FakeTarget(world.clock)
    executor = world.executor(target)
    executor.execute(dispatch, StubMessage())

    again = executor.execute(dispatch, StubMessage(receive_count=2))

    assert again.ack
    assert "SUCCEEDED" in again.reason
    assert len(target.calls) == 1


def test_duplicate_while_another_worker_holds_a_live_lease_is_hidden_until_the_lease_ends(world: MemoryCore) -> None:
    # Given worker 1 is running the occurrence when a duplicate of its message arrives 5 s in
    _, dispatch = world.due()
    duplicate = []

    def running(call: TargetCall) -> str:
        world.clock.advance(5)
        duplicate.append(world.executor(FakeTarget(world.clock), worker_id="worker-2").execute(dispatch, StubMessage()))
        return "ok"

    target = FakeTarget(world.clock, running)
    world.executor(target, worker_id="worker-1").execute(dispatch, StubMessage())

    # Then the duplicate is not acknowledged (it may be the holder's own message) but hidden until the lease
    # has ended (all but 5 s of it left) plus a margin; it did not run
    [outcome] = duplicate
    assert not outcome.ack
    assert outcome.hide_seconds == LEASE.total_seconds() - 5 + 2
    assert len(target.calls) == 1
    # And when it returns, the occurrence is finished, so it is acknowledged
    world.clock.advance(outcome.hide_seconds)
    assert world.executor(FakeTarget(world.clock)).execute(dispatch, StubMessage()).ack


def test_unknown_job_is_recorded_cancelled_and_acknowledged(world: MemoryCore) -> None:
    _, dispatch = world.due()
    ghost = Dispatch("no-such-job", TENANT, dispatch.scheduled_for, dispatch.fire_at, 1)

    assert_acknowledged_unrun(world, ghost, RunState.CANCELLED)


def test_a_message_naming_another_tenant_does_not_run_the_job(world: MemoryCore) -> None:
    job, dispatch = world.due()
    forged = Dispatch(job.job_id, "globex", dispatch.scheduled_for, dispatch.fire_at, 1)
    target = FakeTarget(world.clock)

    assert world.executor(target).execute(forged, StubMessage()).ack
    assert target.calls == []


# -- leases, fencing, heartbeats ----------------------------------------------------------------------------


def test_lease_expiry_lets_another_worker_take_over_and_the_stale_completion_is_fenced(world: MemoryCore) -> None:
    # Given worker 1 stalls past its 60 s lease, and meanwhile worker 2 takes the redelivered message over
    _, dispatch = world.due()
    taken_over = []

    def stalls(call: TargetCall) -> str:
        world.clock.advance(61)
        taken_over.append(worker_2.execute(dispatch, StubMessage(receive_count=2)))
        return "late result"

    target = FakeTarget(world.clock, stalls, "fresh result")
    worker_1 = world.executor(target, worker_id="worker-1")
    worker_2 = world.executor(target, worker_id="worker-2")

    # When worker 1 finally finishes
    outcome = worker_1.execute(dispatch, StubMessage())

    # Then worker 2 completed with a higher epoch, and worker 1's write was rejected
    assert taken_over[0].ack
    assert not outcome.ack
    assert outcome.reason == "fenced"
    assert world.metrics.counts["FencedWrites"] == 1
    # The target saw the same key twice, with different fencing tokens
    assert [(c.key, c.token) for c in target.calls] == [(dispatch.key, 1), (dispatch.key, 2)]
    # And the ledger holds one outcome: worker 2's
    run = world.ledger.get(dispatch.key)
    assert run is not None
    assert (run.state, run.epoch, run.attempts, run.result) == (RunState.SUCCEEDED, 2, 2, "fresh result")
    assert states(world, dispatch) == ["SUCCEEDED"]


def test_heartbeat_extends_the_lease_and_the_message_visibility(world: MemoryCore) -> None:
    _, dispatch = world.due()
    duplicate = []

    def long_job(call: TargetCall) -> str:
        world.clock.advance(LEASE.total_seconds() - 5)
        call.heartbeat()
        world.clock.advance(LEASE.total_seconds() - 5)  # past the first lease, inside the extended one
        duplicate.append(world.executor(FakeTarget(world.clock), worker_id="worker-2").execute(dispatch, StubMessage()))
        return "done"

    message = StubMessage()
    outcome = world.executor(FakeTarget(world.clock, long_job)).execute(dispatch, message)

    assert outcome.ack
    assert message.extensions == [LEASE.total_seconds() + 2]
    assert not duplicate[0].ack  # the lease was still live: no takeover
    run = world.ledger.get(dispatch.key)
    assert run is not None and (run.state, run.epoch) == (RunState.SUCCEEDED, 1)


def test_heartbeat_that_finds_the_lease_lost_aborts_without_writing(world: MemoryCore) -> None:
    # Given worker 1 stalls past its lease, worker 2 takes over and succeeds, then worker 1 heartbeats
    _, dispatch = world.due()

    def stalls_then_heartbeats(call: TargetCall) -> str:
        world.clock.advance(61)
        worker_2.execute(dispatch, StubMessage(receive_count=2))
        call.heartbeat()
        return "must never be recorded"

    target = FakeTarget(world.clock, stalls_then_heartbeats, "fresh result")
    worker_1 = world.executor(target, worker_id="worker-1")
    worker_2 = world.executor(target, worker_id="worker-2")

    outcome = worker_1.execute(dispatch, StubMessage())

    # Then worker 1 aborts: no write at all (not even a fenced attempt), the message is kept
    assert not outcome.ack
    assert outcome.reason == "lease lost"
    assert world.metrics.counts["LeaseLost"] == 1
    assert "FencedWrites" not in world.metrics.counts
    run = world.ledger.get(dispatch.key)
    assert run is not None
    assert (run.state, run.result, run.epoch) == (RunState.SUCCEEDED, "fresh result", 2)
    assert states(world, dispatch) == ["SUCCEEDED"]


def test_crashed_worker_is_taken_over_after_its_lease(world: MemoryCore) -> None:
    # Given worker 1 claimed the occurrence and crashed
    _, dispatch = world.due()
    world.ledger.claim(dispatch, Attempt("worker-1/dead", world.now(), world.now() + timedelta(seconds=60), True))
    target = FakeTarget(world.clock)

    # When the message comes back after the lease
    world.clock.advance(61)
    outcome = world.executor(target, worker_id="worker-2").execute(dispatch, StubMessage(receive_count=2))

    assert outcome.ack
    assert [c.token for c in target.calls] == [2]
    run = world.ledger.get(dispatch.key)
    assert run is not None and (run.state, run.attempts) == (RunState.SUCCEEDED, 2)


# -- failures and retries -----------------------------------------------------------------------------------


def test_retryable_failure_waits_with_backoff_then_succeeds(world: MemoryCore) -> None:
    _, dispatch = world.due(retry=FAST_RETRY)
    world.queue.send([dispatch], world.now())
    target = FakeTarget(world.clock, retryable(), "ok")
    expected = backoff(RetryPolicy(**FAST_RETRY), 1, dispatch.key)

    [first] = world.deliver(world.executor(target))

    # Then attempt 1 is recorded RETRY_WAIT and its message hidden for the backoff
    assert not first.outcome.ack
    assert first.outcome.hide_seconds == math.ceil(expected.total_seconds())
    run = world.ledger.get(dispatch.key)
    assert run is not None
    assert run.state == RunState.RETRY_WAIT
    assert run.next_attempt_at == world.now() + expected
    assert "attempt 1: retryable: 503" in (run.last_error or "")

    # When the message comes back
    world.deliver_until(world.now() + timedelta(seconds=30), world.executor(target))

    # Then attempt 2 ran no sooner than the backoff, with a new fencing token, and succeeded
    assert [c.attempt for c in target.calls] == [1, 2]
    assert [c.token for c in target.calls] == [1, 2]
    assert target.calls[1].at >= target.calls[0].at + expected
    assert states(world, dispatch) == ["RETRY_WAIT", "SUCCEEDED"]
    assert world.queue.messages == {}
    assert world.metrics.counts["Retries"] == 1


def test_retry_is_not_claimed_before_it_is_due(world: MemoryCore) -> None:
    _, dispatch = world.due(retry=FAST_RETRY)
    target = FakeTarget(world.clock, retryable(), "ok")
    world.executor(target).execute(dispatch, StubMessage())
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.next_attempt_at is not None

    # When a duplicate arrives before the retry is due
    outcome = world.executor(target).execute(dispatch, StubMessage())

    assert not outcome.ack
    assert outcome.hide_seconds == math.ceil((run.next_attempt_at - world.now()).total_seconds())
    assert len(target.calls) == 1


def test_always_failing_target_goes_dead_after_max_attempts_with_its_history(world: MemoryCore) -> None:
    _, dispatch = world.due(retry=FAST_RETRY)
    world.queue.send([dispatch], world.now())
    target = FakeTarget(world.clock, retryable("500 Internal Server Error"))

    world.deliver_until(world.now() + timedelta(minutes=2), world.executor(target))

    # Then it ran max_attempts (3) times, and is DEAD
    assert [c.attempt for c in target.calls] == [1, 2, 3]
    run = world.ledger.get(dispatch.key)
    assert run is not None
    assert (run.state, run.attempts, run.dead_lettered) == (RunState.DEAD, 3, True)
    # And it was dead-lettered once, with its attempt history, and its message acknowledged
    [(dead_dispatch, dead_run)] = world.queue.dead
    assert dead_dispatch == dispatch
    assert dead_run is not None
    assert [h.state.value for h in dead_run.history] == ["RETRY_WAIT", "RETRY_WAIT", "DEAD"]
    assert all("500 Internal Server Error" in (h.error or "") for h in dead_run.history)
    assert world.queue.messages == {}
    assert world.metrics.counts["DeadLetters"] == 1


def test_permanent_failure_is_dead_at_once(world: MemoryCore) -> None:
    _, dispatch = world.due(retry=FAST_RETRY)
    target = FakeTarget(world.clock, permanent("404 Not Found"), "ok")

    outcome = world.executor(target).execute(dispatch, StubMessage())

    assert outcome.ack
    assert len(target.calls) == 1
    run = world.ledger.get(dispatch.key)
    assert run is not None and (run.state, run.attempts) == (RunState.DEAD, 1)
    assert len(world.queue.dead) == 1


def test_retry_after_is_honoured(world: MemoryCore) -> None:
    _, dispatch = world.due(retry=FAST_RETRY)
    target = FakeTarget(world.clock, retryable("429 Too Many Requests", retry_after=120), "ok")

    outcome = world.executor(target).execute(dispatch, StubMessage())

    # Then we come back no sooner than the target asked (our own backoff would be ~2 s)
    assert not outcome.ack
    assert outcome.hide_seconds == 120
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.next_attempt_at == world.now() + timedelta(seconds=120)


def test_no_retry_beyond_the_maximum_event_age(world: MemoryCore) -> None:
    _, dispatch = world.due(retry={"max_attempts": 10, "max_event_age_seconds": 60})
    target = FakeTarget(world.clock, retryable(retry_after=120))

    outcome = world.executor(target).execute(dispatch, StubMessage())

    # Then the retry would land after the occurrence is 60 s old: it is DEAD now
    assert outcome.ack
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.DEAD


def test_a_crashing_handler_is_retried_like_a_transient_failure(world: MemoryCore) -> None:
    _, dispatch = world.due(retry=FAST_RETRY)
    target = FakeTarget(world.clock, ZeroDivisionError("division by zero"))

    outcome = world.executor(target).execute(dispatch, StubMessage())

    assert not outcome.ack
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.RETRY_WAIT
    assert "ZeroDivisionError" in (run.last_error or "")


def test_a_target_type_without_an_adapter_is_dead_at_once() -> None:
    world = MemoryCore.build()
    body = {"schedule": {"type": "once", "delay_seconds": 10}, "target": {"type": "lambda", "function_name": "f"}}
    job = world.service.create(TENANT, JobSpec.model_validate(body), None, body).job
    world.set_time(at("2026-01-05T09:00:10"))
    dispatch = Dispatch(job.job_id, TENANT, at("2026-01-05T09:00:10"), at("2026-01-05T09:00:10"), 1)

    outcome = world.executor().execute(dispatch, StubMessage())

    assert outcome.ack
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.DEAD
    assert "no target adapter for type 'lambda'" in (run.last_error or "")


def test_dead_recorded_by_a_worker_that_died_before_the_dlq_send_is_dead_lettered_by_the_next(
    world: MemoryCore,
) -> None:
    # Given a worker recorded DEAD and crashed before sending to the DLQ
    _, dispatch = world.due()
    claimed = world.ledger.claim(dispatch, Attempt("w1/x", world.now(), world.now() + timedelta(seconds=60), True))
    world.ledger.finish(dispatch.key, "w1/x", claimed.epoch, world.now(), AttemptEnd(RunState.DEAD, error="boom"))

    # When its message is redelivered
    outcome = world.executor().execute(dispatch, StubMessage(receive_count=2))

    assert outcome.ack
    assert len(world.queue.dead) == 1
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.dead_lettered


# -- at most once -------------------------------------------------------------------------------------------


def test_at_most_once_ambiguous_failure_goes_to_reconciling_without_retry(world: MemoryCore) -> None:
    _, dispatch = world.due(delivery="at_most_once", retry=FAST_RETRY)
    world.queue.send([dispatch], world.now())
    target = FakeTarget(world.clock, ambiguous(), "ok")

    world.deliver_until(world.now() + timedelta(minutes=2), world.executor(target))

    assert len(target.calls) == 1
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.RECONCILING
    assert world.queue.messages == {}
    assert world.queue.dead == []


def test_at_least_once_ambiguous_failure_is_retried(world: MemoryCore) -> None:
    _, dispatch = world.due(retry=FAST_RETRY)
    target = FakeTarget(world.clock, ambiguous(), "ok")

    outcome = world.executor(target).execute(dispatch, StubMessage())

    assert not outcome.ack
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.RETRY_WAIT


def test_at_most_once_retryable_failure_is_still_retried(world: MemoryCore) -> None:
    # A failure known to have had no effect (e.g. 503 before processing) is safe to retry
    _, dispatch = world.due(delivery="at_most_once", retry=FAST_RETRY)

    world.executor(FakeTarget(world.clock, retryable())).execute(dispatch, StubMessage())

    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.RETRY_WAIT


def test_at_most_once_expired_lease_of_a_crashed_worker_goes_to_reconciling(world: MemoryCore) -> None:
    # Given an at-most-once occurrence whose worker claimed it and crashed mid-run
    _, dispatch = world.due(delivery="at_most_once")
    world.ledger.claim(dispatch, Attempt("worker-1/dead", world.now(), world.now() + timedelta(seconds=60), False))
    target = FakeTarget(world.clock)

    # While the lease is live, a duplicate waits
    early = world.executor(target, worker_id="worker-2").execute(dispatch, StubMessage(receive_count=2))
    assert not early.ack

    # When the message comes back after the lease: the outcome is unknown, so no blind re-run
    world.clock.advance(62)
    outcome = world.executor(target, worker_id="worker-2").execute(dispatch, StubMessage(receive_count=3))

    assert outcome.ack
    assert target.calls == []
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.RECONCILING
    assert world.metrics.counts["Reconciling"] == 1


def test_reconciling_resolved_to_retry_runs_once_more(world: MemoryCore) -> None:
    job, dispatch = world.due(delivery="at_most_once")
    target = FakeTarget(world.clock, ambiguous(), "ok")
    executor = world.executor(target)
    executor.execute(dispatch, StubMessage())

    # When the operator decides it did not take effect
    world.resolution.resolve(TENANT, job.job_id, dispatch.key, RunState.RETRY_WAIT, "checked: no effect")
    world.deliver_until(world.now() + timedelta(seconds=5), executor)

    assert [c.key for c in target.calls] == [dispatch.key, dispatch.key]
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.SUCCEEDED


# -- the job changed since dispatch -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "recorded", "why"),
    [("cancel", RunState.CANCELLED, "job cancelled"), ("pause", RunState.SKIPPED, "job paused")],
)
def test_a_job_cancelled_or_paused_since_dispatch_records_why_and_calls_nothing(
    world: MemoryCore, change: str, recorded: RunState, why: str
) -> None:
    job, dispatch = world.due({"type": "cron", "expression": "* * * * *"})
    getattr(world.service, change)(TENANT, job.job_id)

    assert assert_acknowledged_unrun(world, dispatch, recorded).last_error == why


class _ClockAhead:
    """A worker's clock that runs `seconds` ahead of the world's (within the clock-skew allowance)."""

    def __init__(self, world: MemoryCore, seconds: float) -> None:
        self.world, self.ahead = world, timedelta(seconds=seconds)

    def now(self) -> datetime:
        return self.world.now() + self.ahead


@pytest.mark.parametrize(("policy", "runs"), [("run_all", True), ("skip", False)])
def test_a_retry_skipped_while_paused_runs_once_when_the_resume_sends_it_again(
    world: MemoryCore, policy: str, runs: bool
) -> None:
    # Given a job every minute whose 09:01 occurrence a worker (its clock 2 s ahead) tried a moment before the pause
    # took effect at 09:00:59, and the target throttled: the occurrence waits to retry
    every_minute = {"type": "cron", "expression": "* * * * *"}
    job = world.create(every_minute, misfire_policy=policy, retry=FAST_RETRY, events=True)
    first = Dispatch.of(world.pending_timers(job.job_id)[0])
    assert first.scheduled_for == at("2026-01-05T09:01")
    target = FakeTarget(world.clock, retryable("429 Too Many Requests"), "ok")
    ahead = replace(world.executor(target), clock=_ClockAhead(world, 2))
    world.set_time(at("2026-01-05T09:00:58.500"))
    assert not ahead.execute(first, StubMessage()).ack
    world.set_time(at("2026-01-05T09:00:59"))
    world.service.pause(TENANT, job.job_id)

    # When its retry comes while the job is paused: it is recorded SKIPPED, unrun
    world.set_time(at("2026-01-05T09:01:10"))
    skipped = world.executor(target).execute(first, StubMessage())
    assert skipped.ack and len(target.calls) == 1
    run = world.ledger.get(first.key)
    assert run is not None and (run.state, run.last_error, run.paused_version) == (RunState.SKIPPED, "job paused", 2)

    # And the job is resumed at 09:03:30, past the misfire grace for 09:01, and the old message comes again
    world.set_time(at("2026-01-05T09:03:30"))
    world.service.resume(TENANT, job.job_id)
    again = world.executor(target).execute(first, StubMessage(receive_count=2))
    assert (again.ack, again.why) == (True, Why.ALREADY)
    world.sweep()
    world.deliver(world.executor(target))

    # Then what the resume's policy runs, runs once: the resumed chain's message reopens the skip (run_all), and under
    # `skip` it stays skipped; the old message never reopens it
    run = world.ledger.get(first.key)
    assert run is not None
    calls = [c for c in target.calls if c.key == first.key]
    if runs:
        assert [(c.token, c.version) for c in calls] == [(1, 1), (3, 3)]
        assert (run.state, run.epoch, run.attempts, run.paused_version) == (RunState.SUCCEEDED, 3, 2, None)
        assert [h.state for h in run.history] == [RunState.RETRY_WAIT, RunState.SKIPPED, RunState.SUCCEEDED]
    else:
        assert len(calls) == 1
        assert (run.state, run.epoch) == (RunState.SKIPPED, 2)
    # And its completion events tell the skip, then what became of it
    published = [(e.state, e.fencing_token) for e in world.events.published if e.occurrence_key == first.key]
    assert published == [(RunState.SKIPPED, 2)] + ([(RunState.SUCCEEDED, 3)] if runs else [])


def test_superseded_occurrence_records_skipped(world: MemoryCore) -> None:
    # Given the 09:01 occurrence was dispatched, then the schedule moved to every 5 minutes
    job, dispatch = world.due({"type": "cron", "expression": "* * * * *"})
    assert dispatch.scheduled_for == at("2026-01-05T09:01")
    world.service.update(TENANT, job.job_id, {"schedule": {"expression": "*/5 * * * *"}}, if_match=1)

    run = assert_acknowledged_unrun(world, dispatch, RunState.SKIPPED)
    assert "superseded" in (run.last_error or "")


def test_edit_that_keeps_the_occurrence_runs_it_with_the_new_definition(world: MemoryCore) -> None:
    job, dispatch = world.due({"type": "cron", "expression": "* * * * *"}, payload={"v": 1})
    world.service.update(TENANT, job.job_id, {"payload": {"v": 2}}, if_match=1)
    target = FakeTarget(world.clock)

    outcome = world.executor(target).execute(dispatch, StubMessage())

    assert outcome.ack
    [call] = target.calls
    assert (call.version, call.payload) == (2, {"v": 2})


def test_manual_trigger_runs_even_after_a_schedule_change(world: MemoryCore) -> None:
    job = world.create({"type": "cron", "expression": "0 * * * *"})
    world.sweep()
    timer = world.service.trigger(TENANT, job.job_id)
    world.service.update(TENANT, job.job_id, {"schedule": {"expression": "30 * * * *"}}, if_match=None)
    target = FakeTarget(world.clock)

    world.deliver(world.executor(target))

    assert [c.key for c in target.calls] == [timer.key]


# -- the background heartbeat (real threads, short real waits, bounded by polling) ------------------------------


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_background_heartbeat_extends_the_lease_while_the_target_runs(world: MemoryCore) -> None:
    _, dispatch = world.due()
    message = StubMessage()
    config = ExecuteConfig(lease=timedelta(seconds=0.3), heartbeat_fraction=0.1)  # a beat every 30 ms

    def slow(call: TargetCall) -> str:
        assert wait_until(lambda: len(message.extensions) >= 2)
        return "ok"

    outcome = world.executor(FakeTarget(world.clock, slow), config=config).execute(dispatch, message)

    assert outcome.ack
    run = world.ledger.get(dispatch.key)
    assert run is not None and (run.state, run.epoch) == (RunState.SUCCEEDED, 1)


def test_background_heartbeat_that_loses_the_lease_aborts_without_writing(
    world: MemoryCore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, dispatch = world.due()
    lost: list[str] = []
    taken_over = threading.Event()
    heartbeat = world.ledger.heartbeat

    def recording_heartbeat(key: str, owner: str, epoch: int, lease_until: datetime) -> None:
        # Beats wait until worker 2 has taken over, so none can renew worker 1's lease just before that
        taken_over.wait(timeout=5)
        try:
            heartbeat(key, owner, epoch, lease_until)
        except LeaseLost:
            lost.append(owner)
            raise

    monkeypatch.setattr(world.ledger, "heartbeat", recording_heartbeat)
    config = ExecuteConfig(lease=LEASE, heartbeat_fraction=0.03 / LEASE.total_seconds())  # a beat every 30 ms

    def stalls(call: TargetCall) -> str:
        world.clock.advance(LEASE.total_seconds() + 1)
        worker_2.execute(dispatch, StubMessage(receive_count=2))
        taken_over.set()
        assert wait_until(lambda: bool(lost))
        return "must never be recorded"

    target = FakeTarget(world.clock, stalls, "fresh result")
    worker_1 = world.executor(target, worker_id="worker-1", config=config)
    worker_2 = world.executor(target, worker_id="worker-2")

    outcome = worker_1.execute(dispatch, StubMessage())

    assert (outcome.ack, outcome.reason) == (False, "lease lost")
    assert states(world, dispatch) == ["SUCCEEDED"]
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.result == "fresh result"


def test_a_worker_paused_before_its_claim_holds_a_lease_from_when_it_claims(world: MemoryCore) -> None:
    # Given a worker that pauses 90 s between receiving the message and claiming it (a
    # preemption while it reads the job), with a 60 s lease
    _, dispatch = world.due()
    leases: list[Any] = []

    def record_the_lease(call: TargetCall) -> str:
        held = world.ledger.get(call.occurrence_key)
        leases.append((held.lease_until if held else None, world.now()))
        return "ok"

    executor = world.executor(FakeTarget(world.clock, record_the_lease))
    jobs = executor.jobs

    class SlowRead:
        def get(self, job_id: str) -> Any:
            world.clock.advance(90)
            return jobs.get(job_id)

    executor = replace(executor, jobs=SlowRead())

    # When it handles the message
    outcome = executor.execute(dispatch, StubMessage())

    # Then the lease it held while its target ran was not already over: it counts from the claim, not the receipt
    assert outcome.ack
    [(lease_until, called_at)] = leases
    assert lease_until is not None and lease_until > called_at
