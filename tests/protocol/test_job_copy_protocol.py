"""A one-shot occurrence's message carries a copy of its job (Dispatch.job_copy; docs/design.md §3.4), so its worker
does not read the job. Against both backends: the copy is what the sweep's advance wrote; a change of the job after
that advance (cancel, edit) voids the copy in the ledger before the change is written, so the worker reads the job
and judges the occurrence on the change (invariant 4: nothing fires after its cancellation was acknowledged); and a
crash right before or after each new step (the change's void, the worker's refused claim, its read, its second
claim) still leaves the occurrence applied exactly once, or cancelled."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from crashable import Crash, CrashableCore, CrashAt
from test_execute_protocol import DUE, _Message, assert_one_outcome, executor, one_due_occurrence

from scheduler.core.model.job import RunState
from scheduler.core.model.keys import split_occurrence_key
from scheduler.core.sweep.dispatch import COPY_MAX_BYTES

TENANT = "tenant"


class CountedReads:
    """The job store, counting the worker's reads of jobs."""

    def __init__(self, jobs: Any) -> None:
        self.jobs, self.reads = jobs, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.jobs, name)

    def get(self, job_id: str) -> Any:
        self.reads += 1
        return self.jobs.get(job_id)


def queued(world: CrashableCore) -> Any:
    (message,) = world.queue.receive(10)
    world.queue.change_visibility(message, 0)  # back at once: the test's worker takes it next
    return message.dispatch


def work_with_counted_reads(world: CrashableCore) -> CountedReads:
    jobs = CountedReads(world.jobs)
    doomed = executor(world, jobs=jobs)
    for message in world.queue.receive(10):
        outcome = doomed.execute(message.dispatch, _Message(world, message))
        if outcome.ack:
            world.queue.delete(message)
    return jobs


def test_the_sweep_sends_a_one_shot_occurrence_with_its_job_and_the_worker_runs_it_without_reading_it(
    world: CrashableCore,
) -> None:
    key = one_due_occurrence(world)
    job_id, _ = split_occurrence_key(key)

    dispatch = queued(world)
    assert dispatch.job_copy is not None
    assert dispatch.job_copy == world.jobs.get(job_id)  # what the advance wrote (COMPLETED, same version)
    reads = work_with_counted_reads(world)

    assert reads.reads == 0
    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)


def test_a_job_with_a_big_payload_is_read_instead(world: CrashableCore) -> None:
    key = one_due_occurrence(world, payload={"blob": "x" * (COPY_MAX_BYTES + 1)})

    assert queued(world).job_copy is None
    reads = work_with_counted_reads(world)

    assert reads.reads == 1
    assert world.sink.effects[key] == 1


def test_a_job_with_a_secret_bearing_header_is_read_instead(world: CrashableCore) -> None:
    """What a read of the job redacts never travels in a message."""
    target = {"type": "http", "url": "https://example.com/hook", "headers": {"Authorization": "Bearer s3cret"}}
    key = one_due_occurrence(world, target=target)

    assert queued(world).job_copy is None
    reads = work_with_counted_reads(world)

    assert reads.reads == 1
    assert world.sink.effects[key] == 1


def test_a_cancel_after_the_sweep_voids_the_copy_so_the_occurrence_is_recorded_cancelled(world: CrashableCore) -> None:
    key = one_due_occurrence(world)
    job_id, _ = split_occurrence_key(key)
    assert queued(world).job_copy is not None

    world.service().cancel(TENANT, job_id)  # (it sends the completed plan again, without a copy: ensure_sent)
    reads = work_with_counted_reads(world)

    assert world.metrics.counts.get("JobCopiesVoid") == 1  # the claim on the copy was refused
    assert reads.reads >= 1  # so its worker read the job
    assert world.sink.effects[key] == 0
    assert_one_outcome(world, key, RunState.CANCELLED)


def test_a_payload_edit_after_the_sweep_runs_the_occurrence_on_the_edited_job(world: CrashableCore) -> None:
    key = one_due_occurrence(world, payload={"amount": 1})
    job_id, _ = split_occurrence_key(key)
    paid: list[Any] = []
    world.sink.before_effect = lambda call: paid.append(call.job.spec.payload)

    world.service().update(TENANT, job_id, {"payload": {"amount": 2}}, None)
    world.run_until(DUE + timedelta(minutes=2), step=10)

    assert paid == [{"amount": 2}]
    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)


def test_a_schedule_edit_after_the_sweep_skips_the_occurrence_the_copy_was_sent_for(world: CrashableCore) -> None:
    key = one_due_occurrence(world)
    job_id, _ = split_occurrence_key(key)

    later = DUE + timedelta(minutes=3)
    world.service().update(TENANT, job_id, {"schedule": {"type": "once", "at": later.isoformat()}}, None)
    work_with_counted_reads(world)

    assert world.sink.effects[key] == 0
    run = world.ledger.get(key)
    assert run is not None and run.state == RunState.SKIPPED and "superseded" in (run.last_error or "")


@pytest.mark.parametrize("retried", [False, True])
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_around_the_cancels_void_leaves_the_job_uncancelled_until_the_cancel_is_retried(
    world: CrashableCore, when: str, retried: bool
) -> None:
    """The void comes before the change: a cancel that dies after it has changed nothing the worker acts on (the
    worker reads the job, still uncancelled, and runs the occurrence); a cancel that is retried is honoured."""
    key = one_due_occurrence(world)
    job_id, _ = split_occurrence_key(key)
    crash = CrashAt(world.ledger, "void_copies", when)
    with pytest.raises(Crash):
        world.core(ledger=crash).job_service().cancel(TENANT, job_id)
    assert crash.fired
    if retried:
        world.service().cancel(TENANT, job_id)

    world.run_until(DUE + timedelta(minutes=4), step=10)

    if retried:
        assert world.sink.effects[key] == 0
        assert_one_outcome(world, key, RunState.CANCELLED)
    else:
        assert world.sink.effects[key] == 1
        assert_one_outcome(world, key, RunState.SUCCEEDED)


VOID_COPY_STEPS = [
    ("ledger", "claim", 1, "before"),  # the claim on the copy (refused)
    ("jobs", "get", 1, "before"),
    ("jobs", "get", 1, "after"),
    ("ledger", "claim", 2, "before"),  # the claim after the read
    ("ledger", "claim", 2, "after"),
    ("ledger", "finish", 1, "before"),
    ("ledger", "finish", 1, "after"),
]


@pytest.mark.parametrize(("port", "method", "nth", "when"), VOID_COPY_STEPS)
def test_a_worker_crash_on_a_void_copy_still_applies_the_edited_occurrence_once(
    world: CrashableCore, port: str, method: str, nth: int, when: str
) -> None:
    key = one_due_occurrence(world, payload={"amount": 1})
    job_id, _ = split_occurrence_key(key)
    world.service().update(TENANT, job_id, {"payload": {"amount": 2}}, None)
    ports: dict[str, Any] = {"jobs": world.jobs, "ledger": world.ledger, "queue": world.queue}
    ports[port] = crash = CrashAt(ports[port], method, when, nth)
    doomed = executor(world, **ports)
    # The copy's message (the edit re-armed the job, whose own message may be queued beside it): its worker dies
    (message,) = [m for m in world.queue.receive(10) if m.dispatch.job_copy is not None]
    with pytest.raises(Crash):
        doomed.execute(message.dispatch, _Message(world, message))
    assert crash.fired

    world.run_until(DUE + timedelta(minutes=4), step=10)

    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)
