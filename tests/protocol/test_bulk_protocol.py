"""Bulk actions (scheduler.core.jobs.bulk) under crashes, against both backends: a request that dies right before or
right after any write of the operation or of a job, then the same request again until DONE, must leave every
matching job in the requested state or reported, none half-changed, each changed once, no other job touched, and
count every job once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from crashable import Crash, CrashableCore, CrashAt

from scheduler.adapters.dynamodb import DynamoOperationStore
from scheduler.adapters.memory import MemoryOperationStore
from scheduler.core.errors import IdempotencyConflict, InvalidRequest
from scheduler.core.jobs.bulk import BulkAction, BulkOperation, BulkService, OperationState
from scheduler.core.model.job import JobState

LABEL = {"customer": "42"}
PAGE = 3
FAR = timedelta(hours=1)


def operations_of(world: CrashableCore) -> Any:
    if world.backend == "memory":
        return MemoryOperationStore()
    return DynamoOperationStore(world.jobs.table, world.jobs.client)


def bulk(world: CrashableCore, operations: Any, jobs: Any = None, **options: Any) -> BulkService:
    service = world.core(jobs=jobs).job_service()
    return BulkService(service, operations, world.clock, page_size=PAGE, **options)


def labelled_world(world: CrashableCore) -> tuple[list[str], str, str, list[str]]:
    """Seven labelled jobs (five ACTIVE, one PAUSED, one CANCELLED) and two unlabelled ACTIVE ones: (the active
    labelled, the paused, the cancelled, the unlabelled)."""
    every_minute = {"type": "rate", "every_seconds": 60}
    active = [world.create(every_minute, labels=LABEL) for _ in range(5)]
    paused = world.create(every_minute, labels={**LABEL, "tier": "gold"})
    world.service().pause("tenant", paused)
    cancelled = world.create(every_minute, labels=LABEL)
    world.service().cancel("tenant", cancelled)
    others = [world.create(every_minute, labels={"customer": "43"}), world.create(every_minute)]
    return active, paused, cancelled, others


def finish(service: BulkService, action: BulkAction = BulkAction.PAUSE) -> BulkOperation:
    operation = service.run("tenant", "key-1", action, LABEL, service.clock.now() + FAR)
    assert operation.state == OperationState.DONE
    return operation


def assert_paused_once(
    world: CrashableCore, operation: BulkOperation, jobs: tuple[list[str], str, str, list[str]]
) -> None:
    active, paused, cancelled, others = jobs
    for job_id in active:
        job = world.jobs.get(job_id)
        assert (job.state, job.version) == (JobState.PAUSED, 2), job_id  # created at 1, paused once
    assert world.jobs.get(paused).state == JobState.PAUSED
    assert world.jobs.get(paused).version == 2  # paused before the operation, not again
    assert world.jobs.get(cancelled).state == JobState.CANCELLED
    for job_id in others:
        assert (world.jobs.get(job_id).state, world.jobs.get(job_id).version) == (JobState.ACTIVE, 1)
    assert (operation.matched, operation.changed, operation.unchanged) == (7, 5, 1)
    assert [f.job_id for f in operation.failed] == [cancelled]
    assert "CANCELLED" in operation.failed[0].reason


def test_a_bulk_pause_pauses_every_labelled_job_and_reports_the_rest(world: CrashableCore) -> None:
    # Given
    jobs = labelled_world(world)
    operations = operations_of(world)
    # When
    operation = finish(bulk(world, operations))
    # Then
    assert_paused_once(world, operation, jobs)
    assert operations.get("tenant", operation.operation_id) == operation
    assert operations.get("other-tenant", operation.operation_id) is None
    # And the same request again answers the same report, changing nothing
    assert finish(bulk(world, operations)) == operation


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("nth", [1, 2, 3, 4, 6])
def test_a_crash_around_a_checkpoint_then_a_retry_counts_every_job_once(
    world: CrashableCore, when: str, nth: int
) -> None:
    """Writes of the operation: 1 and 2 begin and end page 1, 3 and 4 page 2, 6 ends page 3 (the last)."""
    jobs = labelled_world(world)
    operations = operations_of(world)
    crash = CrashAt(operations, "save", when, nth)

    with pytest.raises(Crash):
        finish(bulk(world, crash))
    assert crash.fired

    assert_paused_once(world, finish(bulk(world, operations)), jobs)


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("nth", [1, 2, 4])
def test_a_crash_around_a_jobs_change_then_a_retry_changes_it_once(world: CrashableCore, when: str, nth: int) -> None:
    """The nth write of a job: 1 and 2 on page 1 (its first and second job), 4 on page 2."""
    jobs = labelled_world(world)
    operations = operations_of(world)
    crash = CrashAt(world.jobs, "replace", when, nth)

    with pytest.raises(Crash):
        finish(bulk(world, operations, jobs=crash))
    assert crash.fired

    assert_paused_once(world, finish(bulk(world, operations)), jobs)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_crash_around_the_operations_creation_then_a_retry_starts_it_once(world: CrashableCore, when: str) -> None:
    jobs = labelled_world(world)
    operations = operations_of(world)
    crash = CrashAt(operations, "create", when)
    with pytest.raises(Crash):
        finish(bulk(world, crash))
    assert_paused_once(world, finish(bulk(world, operations)), jobs)


def test_a_request_out_of_time_answers_running_and_the_next_goes_on(world: CrashableCore) -> None:
    # Given a request that has time for one page only (each page moves the clock past its stop)
    jobs = labelled_world(world)
    operations = operations_of(world)
    service = bulk(world, operations, on_page=lambda operation: world.clock.advance(10))
    # When
    first = service.run("tenant", "key-1", BulkAction.PAUSE, LABEL, world.clock.now() + timedelta(seconds=5))
    # Then it stopped after one page, and the same request finishes the rest
    assert (first.state, first.processed, first.matched) == (OperationState.RUNNING, PAGE, 7)
    assert_paused_once(world, finish(bulk(world, operations)), jobs)


def test_a_bulk_resume_then_cancel_take_every_labelled_job_there(world: CrashableCore) -> None:
    active, paused, cancelled, _ = labelled_world(world)
    operations = operations_of(world)
    service = bulk(world, operations)
    service.run("tenant", "pause", BulkAction.PAUSE, LABEL, world.clock.now() + FAR)

    resumed = service.run("tenant", "resume", BulkAction.RESUME, LABEL, world.clock.now() + FAR)
    assert (resumed.changed, resumed.unchanged, len(resumed.failed)) == (6, 0, 1)
    assert all(world.jobs.get(j).state == JobState.ACTIVE for j in [*active, paused])

    gone = service.run("tenant", "cancel", BulkAction.CANCEL, LABEL, world.clock.now() + FAR)
    assert (gone.changed, gone.unchanged, gone.failed) == (6, 1, ())
    assert all(world.jobs.get(j).state == JobState.CANCELLED for j in [*active, paused, cancelled])


def test_a_key_reused_for_another_request_is_refused(world: CrashableCore) -> None:
    labelled_world(world)
    service = bulk(world, operations_of(world))
    finish(service)
    with pytest.raises(IdempotencyConflict):
        service.run("tenant", "key-1", BulkAction.CANCEL, LABEL, world.clock.now() + FAR)


def test_more_matching_jobs_than_one_operation_takes_are_refused_before_any_change(world: CrashableCore) -> None:
    active, *_ = labelled_world(world)
    operations = operations_of(world)
    with pytest.raises(InvalidRequest, match="more than 6 jobs"):
        finish(bulk(world, operations, max_jobs=6))
    assert all(world.jobs.get(j).state == JobState.ACTIVE for j in active)
    assert operations.get("tenant", "anything") is None


def test_an_empty_selector_is_refused(world: CrashableCore) -> None:
    service = bulk(world, operations_of(world))
    with pytest.raises(InvalidRequest, match="at least one label"):
        service.run("tenant", "key-1", BulkAction.PAUSE, {}, world.clock.now() + FAR)
