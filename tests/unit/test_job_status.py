"""An honest job state while an occurrence is in flight: a one-shot job whose occurrence was dispatched
but has not finished reads DISPATCHED, with its last occurrence's state (QUEUED while it has no run), never
COMPLETED with an empty history; COMPLETED means the last occurrence has finished."""

from __future__ import annotations

from datetime import timedelta

from scheduler.core.jobs.status import QUEUED
from scheduler.core.model.job import JobState
from scheduler.core.model.keys import occurrence_key
from tests.unit.fixtures import TENANT, FakeTarget, MemoryCore, retryable

AT = "2026-01-05T09:03:00+00:00"


def shown(world: MemoryCore, job_id: str) -> tuple[str, str | None]:
    status = world.reads.status(world.job(job_id))
    return status.state.value, status.last_run_state


def test_a_one_shot_reads_dispatched_until_its_occurrence_has_finished() -> None:
    world = MemoryCore.build()
    job = world.create({"type": "once", "at": AT})
    key = occurrence_key(job.job_id, job.next_run_at)  # type: ignore[arg-type]
    assert shown(world, job.job_id) == ("ACTIVE", None)

    # The sweeper dispatched it minutes ahead: stored COMPLETED (nothing left to dispatch), shown DISPATCHED
    world.sweep()
    assert world.job(job.job_id).state == JobState.COMPLETED
    assert shown(world, job.job_id) == ("DISPATCHED", QUEUED)
    status = world.reads.status(world.job(job.job_id))
    assert (status.last_run_key, status.last_run_scheduled_for) == (key, job.next_run_at)

    # Its first attempt fails and waits for a retry: still DISPATCHED
    target = FakeTarget(world.clock, retryable(), "ok")
    world.set_time(job.next_run_at)  # type: ignore[arg-type]
    world.deliver(world.executor(target))
    assert shown(world, job.job_id) == ("DISPATCHED", "RETRY_WAIT")

    # Once it has run, the job is COMPLETED, and says how its last occurrence ended
    world.deliver_until(world.now() + timedelta(minutes=1), world.executor(target))
    assert shown(world, job.job_id) == ("COMPLETED", "SUCCEEDED")


def test_a_running_occurrence_is_dispatched_and_other_states_need_no_ledger_read() -> None:
    world = MemoryCore.build()
    job = world.create({"type": "once", "at": AT})
    world.sweep()
    world.set_time(job.next_run_at)  # type: ignore[arg-type]

    seen: list[tuple[str, str | None]] = []
    target = FakeTarget(world.clock)
    original = target.invoke

    def invoke(call: object) -> str | None:
        seen.append(shown(world, job.job_id))
        return original(call)  # type: ignore[arg-type]

    target.invoke = invoke  # type: ignore[method-assign]
    world.deliver(world.executor(target))
    assert seen == [("DISPATCHED", "RUNNING")]

    other = world.create({"type": "cron", "expression": "0 * * * *"})
    world.service.cancel(TENANT, other.job_id)
    assert world.reads.status(world.job(other.job_id)).last_run_key is None


def test_the_list_filters_on_the_shown_state() -> None:
    world = MemoryCore.build()
    done = world.create({"type": "once", "at": AT})
    waiting = world.create({"type": "once", "at": "2026-01-05T09:04:00+00:00"})
    world.sweep()
    world.set_time(done.next_run_at)  # type: ignore[arg-type]
    world.deliver(world.executor())

    def listed(state: JobState | None) -> dict[str, str]:
        page, _ = world.reads.list_shown(TENANT, state, 50, None)
        return {job.job_id: status.state.value for job, status in page}

    assert listed(None) == {done.job_id: "COMPLETED", waiting.job_id: "DISPATCHED"}
    assert listed(JobState.COMPLETED) == {done.job_id: "COMPLETED"}
    assert listed(JobState.DISPATCHED) == {waiting.job_id: "DISPATCHED"}
