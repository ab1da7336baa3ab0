"""JobService with the in-memory adapters: create, idempotency, quota, edit, cancel, pause/resume, trigger, seal."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.core import errors
from scheduler.core.jobs.service import Created, JobService, Submission
from scheduler.core.jobs.signing_keys import DEFAULT_KEY_OVERLAP, MAX_KEY_OVERLAP
from scheduler.core.model.job import MAX_PAYLOAD_BYTES, JobState, RunState
from scheduler.core.model.keys import occurrence_key
from tests.unit.fixtures import TENANT, FakeTarget, MemoryCore, ambiguous, at, job_spec, spec_body

HOURLY = {"type": "cron", "expression": "0 * * * *"}


def sweep_at(world: MemoryCore, *times: str) -> None:
    """A sweep at each of `times`, in turn."""
    for when in times:
        world.set_time(at(when))
        world.sweep()


def stored_nothing(world: MemoryCore) -> bool:
    return not world.jobs.jobs and not world.pending_timers() and not world.timers.late and not world.jobs.idempotency


# -- create -------------------------------------------------------------------------------------------------


def test_create_returns_version_1_active_with_first_occurrence(world: MemoryCore) -> None:
    # When a daily 09:30 job is created at 09:00
    job = world.create({"type": "cron", "expression": "30 9 * * *"}, name="report")

    # Then it is stored ACTIVE at version 1, due at 09:30 today
    assert job.version == 1
    assert job.state == JobState.ACTIVE
    assert job.next_run_at == at("2026-01-05T09:30")
    assert world.job(job.job_id) == job
    # And its first timer waits in the 09:30 bucket, at version 1
    [timer] = world.pending_timers(job.job_id)
    assert (timer.scheduled_for, timer.version, timer.kind) == (at("2026-01-05T09:30"), 1, "scheduled")
    assert world.timers.bucket_of(timer).minute == at("2026-01-05T09:30")


def test_create_with_the_same_idempotency_key_and_body_returns_the_same_job(world: MemoryCore) -> None:
    body = spec_body(HOURLY, name="a")
    first = world.service.create(TENANT, job_spec(HOURLY, name="a"), "key-1", body)

    # When the client retries the same request a minute later
    world.clock.advance(60)
    again = world.service.create(TENANT, job_spec(HOURLY, name="a"), "key-1", body)

    # Then it gets the same job back, marked as a replay, and nothing new was stored
    assert not first.replayed
    assert again.replayed
    assert again.job == first.job
    assert list(world.jobs.jobs) == [first.job.job_id]
    assert len(world.pending_timers()) == 1


def test_create_with_the_same_key_and_a_different_body_conflicts(world: MemoryCore) -> None:
    world.service.create(TENANT, job_spec(HOURLY, name="a"), "key-1", spec_body(HOURLY, name="a"))

    with pytest.raises(errors.IdempotencyConflict):
        world.service.create(TENANT, job_spec(HOURLY, name="b"), "key-1", spec_body(HOURLY, name="b"))

    assert len(world.jobs.jobs) == 1
    assert len(world.pending_timers()) == 1


def test_idempotency_key_expires_after_24_hours(world: MemoryCore) -> None:
    body = spec_body(HOURLY)
    first = world.service.create(TENANT, job_spec(HOURLY), "key-1", body)

    # When the same key comes back just after 24 hours
    world.clock.advance(24 * 3600 + 1)
    later = world.service.create(TENANT, job_spec(HOURLY), "key-1", body)

    # Then it is a new request: a new job
    assert not later.replayed
    assert later.job.job_id != first.job.job_id
    assert len(world.jobs.jobs) == 2


def test_idempotency_keys_are_per_tenant(world: MemoryCore) -> None:
    body = spec_body(HOURLY)
    mine = world.service.create("acme", job_spec(HOURLY), "key-1", body)
    theirs = world.service.create("globex", job_spec(HOURLY), "key-1", body)

    assert not theirs.replayed
    assert theirs.job.job_id != mine.job.job_id
    assert theirs.job.tenant == "globex"


def test_quota_exceeded_stores_nothing() -> None:
    world = MemoryCore.build(max_active_jobs=2)
    world.create(HOURLY)
    world.create(HOURLY)
    before_jobs, before_timers = dict(world.jobs.jobs), list(world.pending_timers())

    with pytest.raises(errors.QuotaExceeded):
        world.create(HOURLY, key="third")

    assert world.jobs.jobs == before_jobs
    assert world.pending_timers() == before_timers
    assert not world.jobs.idempotency
    assert not world.timers.late


def test_replay_is_answered_even_at_quota() -> None:
    world = MemoryCore.build(max_active_jobs=1)
    body = spec_body(HOURLY)
    first = world.service.create(TENANT, job_spec(HOURLY), "key-1", body)

    again = world.service.create(TENANT, job_spec(HOURLY), "key-1", body)

    assert again.replayed and again.job.job_id == first.job.job_id


def test_quota_counts_only_jobs_that_can_still_fire() -> None:
    world = MemoryCore.build(max_active_jobs=1)
    job = world.create(HOURLY)
    with pytest.raises(errors.QuotaExceeded):
        world.create(HOURLY)

    # When the job is cancelled, its slot is free again
    world.service.cancel(TENANT, job.job_id)

    assert world.create(HOURLY).state == JobState.ACTIVE


def test_quota_is_per_tenant() -> None:
    world = MemoryCore.build(max_active_jobs=1)
    world.create(HOURLY, tenant="acme")

    assert world.create(HOURLY, tenant="globex").tenant == "globex"


def test_payload_over_64_kib_is_refused_and_stores_nothing(world: MemoryCore) -> None:
    # A JSON string of n characters is n + 2 bytes of JSON
    too_big = "x" * (MAX_PAYLOAD_BYTES - 1)

    with pytest.raises(errors.PayloadTooLarge, match="the limit is 65536 bytes"):
        world.create(HOURLY, payload=too_big, key="big")

    assert stored_nothing(world)


def test_payload_of_exactly_64_kib_is_accepted(world: MemoryCore) -> None:
    job = world.create(HOURLY, payload="x" * (MAX_PAYLOAD_BYTES - 2))

    assert world.job(job.job_id).spec.payload == "x" * (MAX_PAYLOAD_BYTES - 2)


def test_schedule_without_a_future_occurrence_is_refused(world: MemoryCore) -> None:
    with pytest.raises(errors.InvalidRequest) as caught:
        world.create({"type": "cron", "expression": "0 * * * *", "end_at": "2026-01-05T08:00:00Z"})

    assert caught.value.field == "schedule"
    assert stored_nothing(world)


@pytest.mark.parametrize(
    ("expression", "field"),
    [
        ("? * * * *", "minute"),
        ("0 ? * * *", "hour"),
        ("0 9 * ? *", "month"),
        ("0,? 9 * * *", "minute"),
        ("?/5 * * * *", "minute"),
    ],
)
def test_a_question_mark_outside_the_day_fields_is_refused_naming_the_field(
    world: MemoryCore, expression: str, field: str
) -> None:
    # `?` means "no specific value" in the day fields only (EventBridge, Quartz): `? * * * *` would run every minute
    with pytest.raises(errors.InvalidRequest) as caught:
        world.create({"type": "cron", "expression": expression}, key="q")

    assert caught.value.field == "schedule.expression"
    assert caught.value.detail.startswith(f"{field} field ")
    assert "only in the day-of-month and day-of-week fields" in caught.value.detail
    assert stored_nothing(world)


@pytest.mark.parametrize("expression", ["0 9 ? * MON", "0 9 1 * ?", "0 9 ? * ?", "0 9 ?/2 * *"])
def test_a_question_mark_in_a_day_field_is_accepted(world: MemoryCore, expression: str) -> None:
    job = world.create({"type": "cron", "expression": expression})

    assert world.job(job.job_id).spec.schedule == job.spec.schedule


def test_a_question_mark_is_refused_by_a_change_of_the_schedule_not_by_other_changes(world: MemoryCore) -> None:
    # Given a job stored with `?` in its minute field before the rule (the parser still reads it, as `*`)
    job = world.create(HOURLY)
    stored = job.model_copy(update={"spec": job_spec({"type": "cron", "expression": "? 9 * * *"})})
    world.jobs.jobs[job.job_id] = stored

    # When its schedule is changed to another with `?` there, it is refused and nothing changes
    with pytest.raises(errors.InvalidRequest, match="minute field '\\?'"):
        world.service.update(TENANT, job.job_id, {"schedule": {"expression": "? 10 * * *"}}, if_match=1)
    assert world.job(job.job_id) == stored

    # ... while a change of anything else keeps the stored schedule as it is
    changed = world.service.update(TENANT, job.job_id, {"payload": {"n": 2}}, if_match=1)
    assert changed.spec.schedule == stored.spec.schedule and changed.version == 2


def test_another_tenants_job_is_not_found(world: MemoryCore) -> None:
    job = world.create(HOURLY, tenant="acme")

    with pytest.raises(errors.JobNotFound):
        world.reads.get("globex", job.job_id)
    with pytest.raises(errors.JobNotFound):
        world.service.cancel("globex", job.job_id)
    assert world.job(job.job_id).state == JobState.ACTIVE


def test_next_runs_previews_the_coming_occurrences(world: MemoryCore) -> None:
    job = world.create(HOURLY)

    assert world.reads.next_runs(job, 3) == [at("2026-01-05T10:00"), at("2026-01-05T11:00"), at("2026-01-05T12:00")]


# -- update -------------------------------------------------------------------------------------------------


def test_update_with_a_stale_if_match_conflicts_and_changes_nothing(world: MemoryCore) -> None:
    job = world.create(HOURLY, payload={"n": 1})
    world.service.update(TENANT, job.job_id, {"payload": {"n": 2}}, if_match=1)

    with pytest.raises(errors.VersionConflict) as caught:
        world.service.update(TENANT, job.job_id, {"payload": {"n": 3}}, if_match=1)

    assert caught.value.current is not None and caught.value.current.version == 2
    assert world.job(job.job_id).spec.payload == {"n": 2}


def test_update_bumps_the_version_and_applies_to_the_next_occurrence(world: MemoryCore) -> None:
    job = world.create(HOURLY, payload={"n": 1})

    # When the payload changes before 10:00
    changed = world.service.update(TENANT, job.job_id, {"payload": {"n": 2}}, if_match=1)

    # Then the version is bumped, the next run is unchanged, and 10:00 goes out at the new version
    assert changed.version == 2
    assert changed.next_run_at == at("2026-01-05T10:00")
    sweep_at(world, "2026-01-05T09:56")
    [dispatch] = world.sent(job.job_id)
    assert (dispatch.scheduled_for, dispatch.version) == (at("2026-01-05T10:00"), 2)


def test_update_of_the_schedule_skips_the_old_timer(world: MemoryCore) -> None:
    job = world.create(HOURLY)

    # When the schedule moves to half past the hour
    changed = world.service.update(TENANT, job.job_id, {"schedule": {"expression": "30 * * * *"}}, if_match=None)
    assert changed.next_run_at == at("2026-01-05T09:30")

    # Then sweeping minute by minute to 10:49 dispatches 09:30 and 10:30 only, at version 2: the old 10:00 timer
    # is skipped
    world.set_time(at("2026-01-05T09:20"))
    for _ in range(90):
        world.sweep()
        world.clock.advance(60)
    assert world.sent_for(job.job_id) == [at("2026-01-05T09:30"), at("2026-01-05T10:30")]
    assert {d.version for d in world.sent(job.job_id)} == {2}
    assert world.metrics.counts["OccurrencesSkipped"] == 1


def _edit_after_a_look_ahead_dispatch(world: MemoryCore, expression: str, minutes: int) -> Any:
    """An hourly job whose 10:00 the sweeper dispatched ahead of time (at 09:56), moved to `expression` at 09:57,
    then swept every minute for `minutes` minutes."""
    job = world.create(HOURLY)
    sweep_at(world, "2026-01-05T09:56")
    world.service.update(TENANT, job.job_id, {"schedule": {"expression": expression}}, if_match=None)
    for _ in range(minutes):
        world.clock.advance(60)
        world.sweep()
    return job


def test_update_of_the_schedule_right_after_a_look_ahead_dispatch(world: MemoryCore) -> None:
    # Given 10:00 was dispatched ahead of time, when the schedule moves to a quarter past
    job = _edit_after_a_look_ahead_dispatch(world, "15 * * * *", 120)

    # Then the new chain runs (the queued 10:00 message is skipped by the worker as superseded). The edit sent
    # nothing again: the old plan's next timer (11:00) was stored, which proves that plan was sent.
    assert world.sent_for(job.job_id) == [at("2026-01-05T10:00"), at("2026-01-05T10:15"), at("2026-01-05T11:15")]
    assert [d.version for d in world.sent(job.job_id)] == [1, 2, 2]


def test_update_to_an_earlier_minute_after_a_look_ahead_dispatch_keeps_the_chain(world: MemoryCore) -> None:
    # Given 10:00 was dispatched ahead of time, when the schedule moves to :58 - its next run (09:58) is before it
    job = _edit_after_a_look_ahead_dispatch(world, "58 * * * *", 150)

    # Then the job keeps running at :58 every hour
    sent = world.sent_for(job.job_id)
    assert at("2026-01-05T10:58") in sent
    assert at("2026-01-05T11:58") in sent


def test_an_invalid_update_changes_nothing(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    timers_before = world.pending_timers(job.job_id)

    with pytest.raises(ValidationError, match="minute must be 0-59, not 61"):
        world.service.update(TENANT, job.job_id, {"schedule": {"expression": "61 * * * *"}}, if_match=1)
    with pytest.raises(ValidationError):
        world.service.update(TENANT, job.job_id, {"no_such_field": 1}, if_match=1)
    with pytest.raises(errors.PayloadTooLarge):
        world.service.update(TENANT, job.job_id, {"payload": "x" * MAX_PAYLOAD_BYTES}, if_match=1)

    assert world.job(job.job_id) == job
    assert world.pending_timers(job.job_id) == timers_before


@pytest.mark.parametrize(
    "schedule",
    [
        {"expression": "0 0 30 2 *"},  # February has no 30th
        {"end_at": "2026-01-05T08:00:00Z"},  # the schedule ended before now
    ],
)
def test_update_to_a_schedule_that_never_runs_again_is_refused_and_changes_nothing(
    world: MemoryCore, schedule: dict[str, Any]
) -> None:
    job = world.create(HOURLY)
    timers_before = world.pending_timers(job.job_id)

    with pytest.raises(errors.InvalidRequest, match="the schedule has no occurrence in the future") as caught:
        world.service.update(TENANT, job.job_id, {"schedule": schedule}, if_match=1)

    assert caught.value.field == "schedule"
    assert world.job(job.job_id) == job
    assert world.pending_timers(job.job_id) == timers_before


def test_update_of_the_payload_of_a_finished_cron_job_is_not_refused(world: MemoryCore) -> None:
    # Given a cron job whose window is over
    job = world.create({**HOURLY, "end_at": "2026-01-05T10:30:00Z"})
    world.run(at("2026-01-05T11:00"), world.executor(FakeTarget(world.clock)))
    assert world.job(job.job_id).state == JobState.COMPLETED

    # When only its payload changes, then the unchanged schedule's end is no reason to refuse it
    changed = world.service.update(TENANT, job.job_id, {"payload": {"n": 2}}, if_match=None)

    assert (changed.spec.payload, changed.state) == ({"n": 2}, JobState.COMPLETED)


def test_update_of_a_cancelled_job_is_refused(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    world.service.cancel(TENANT, job.job_id)

    with pytest.raises(errors.InvalidState, match="cancelled"):
        world.service.update(TENANT, job.job_id, {"payload": 1}, if_match=None)


# -- cancel -------------------------------------------------------------------------------------------------


def test_cancel_is_idempotent(world: MemoryCore) -> None:
    job = world.create(HOURLY)

    first = world.service.cancel(TENANT, job.job_id)
    second = world.service.cancel(TENANT, job.job_id)

    assert first.state == second.state == JobState.CANCELLED
    assert first.version == second.version == 2
    assert first.next_run_at is None


def test_a_cancelled_job_cannot_be_paused_resumed_or_triggered(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    world.service.cancel(TENANT, job.job_id)

    for change in (world.service.pause, world.service.resume, world.service.trigger):
        with pytest.raises(errors.InvalidState):
            change(TENANT, job.job_id)
    assert world.job(job.job_id).version == 2


def test_a_cancelled_job_never_fires(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    world.service.cancel(TENANT, job.job_id)

    sweep_at(world, "2026-01-05T09:58", "2026-01-05T10:58")

    assert world.sent(job.job_id) == []


# -- pause / resume -----------------------------------------------------------------------------------------


def test_pause_stops_dispatch_and_resume_restarts_it(world: MemoryCore) -> None:
    job = world.create(HOURLY)

    paused = world.service.pause(TENANT, job.job_id)
    assert (paused.state, paused.version) == (JobState.PAUSED, 2)
    assert world.service.pause(TENANT, job.job_id).version == 2  # pausing again changes nothing
    sweep_at(world, "2026-01-05T09:58")
    assert world.sent(job.job_id) == []

    # When it is resumed before 11:00 ...
    world.set_time(at("2026-01-05T10:00:30"))
    resumed = world.service.resume(TENANT, job.job_id)

    # Then it is ACTIVE at version 3, and the 10:00 occurrence it missed by 30 s (within grace) goes out
    assert (resumed.state, resumed.version) == (JobState.ACTIVE, 3)
    assert world.service.resume(TENANT, job.job_id).version == 3
    world.sweep()
    sweep_at(world, "2026-01-05T10:58")
    assert world.sent_for(job.job_id) == [at("2026-01-05T10:00"), at("2026-01-05T11:00")]


def paused_through_three_hours(policy: str, catchup: timedelta = timedelta(days=1)) -> tuple[MemoryCore, str]:
    """An hourly job paused at 09:30 (next run 10:00) and resumed at 13:20, sweeps running meanwhile."""
    world = MemoryCore.build(catchup_window=catchup)
    job = world.create(HOURLY, misfire_policy=policy)
    world.set_time(at("2026-01-05T09:30"))
    world.service.pause(TENANT, job.job_id)
    for minute in range(0, 230, 10):
        world.set_time(at("2026-01-05T09:30") + timedelta(minutes=minute))
        world.sweep()
    assert world.sent(job.job_id) == []
    world.set_time(at("2026-01-05T13:20"))
    world.service.resume(TENANT, job.job_id)
    world.sweep()
    return world, job.job_id


def test_resume_with_run_once_fires_the_latest_missed_occurrence_once() -> None:
    world, job_id = paused_through_three_hours("run_once")

    assert world.sent_for(job_id) == [at("2026-01-05T13:00")]
    assert world.metrics.counts["MisfireSkipped"] == 3
    assert world.job(job_id).misfire_skipped == 3
    assert world.job(job_id).next_run_at == at("2026-01-05T14:00")


def test_resume_with_skip_fires_none_of_the_missed() -> None:
    world, job_id = paused_through_three_hours("skip")

    assert world.sent_for(job_id) == []
    assert world.metrics.counts["MisfireSkipped"] == 4
    # And the chain goes on at 14:00
    sweep_at(world, "2026-01-05T13:58")
    assert world.sent_for(job_id) == [at("2026-01-05T14:00")]


def test_resume_with_run_all_fires_every_missed_occurrence_oldest_first() -> None:
    world, job_id = paused_through_three_hours("run_all")

    assert world.sent_for(job_id) == [at(f"2026-01-05T{h}:00") for h in (10, 11, 12, 13)]
    assert "MisfireSkipped" not in world.metrics.counts


def test_resume_with_run_all_is_bounded_by_the_catchup_window() -> None:
    # Given a 2-hour catch-up window: at 13:20 only occurrences since 11:20 are caught up
    world, job_id = paused_through_three_hours("run_all", catchup=timedelta(hours=2))

    assert world.sent_for(job_id) == [at("2026-01-05T12:00"), at("2026-01-05T13:00")]
    assert world.metrics.counts["MisfireSkipped"] == 2


def test_resumed_misfire_runs_are_executed_once() -> None:
    world, _ = paused_through_three_hours("run_all")
    target = FakeTarget(world.clock)

    world.deliver(world.executor(target))
    world.sweep()
    world.deliver(world.executor(target))

    assert [c.scheduled_for for c in target.calls] == [at(f"2026-01-05T{h}:00") for h in (10, 11, 12, 13)]


EVERY_2S = {"type": "rate", "every_seconds": 2}


def test_pause_resume_and_cancel_of_a_dispatched_chain_cost_no_message_again(world: MemoryCore) -> None:
    # Given a job every 2 s whose look-ahead (5 min, ~160 occurrences) the sweeper has dispatched
    job = world.create(EVERY_2S)
    world.sweep()
    dispatched = len(world.sent(job.job_id))
    assert dispatched > 150

    # When it is paused, resumed 10 s later and cancelled (none of them may re-send the whole plan)
    world.service.pause(TENANT, job.job_id)
    assert len(world.sent(job.job_id)) == dispatched
    world.clock.advance(10)
    world.service.resume(TENANT, job.job_id)
    resumed = len(world.sent(job.job_id)) - dispatched
    world.service.update(TENANT, job.job_id, {"payload": {"edited": True}}, None)
    world.service.cancel(TENANT, job.job_id)

    # Then the pause, edit and cancel sent nothing, and the resume only the occurrences it missed (10 s: 5) and
    # those due within the clock-skew allowance (30 s: 15; a worker whose clock runs ahead may have dropped them)
    assert resumed == 5 + 15
    assert len(world.sent(job.job_id)) == dispatched + resumed
    assert "PlanResent" not in world.metrics.counts


def paused_inside_the_look_ahead(world: MemoryCore, policy: str) -> tuple[str, FakeTarget]:
    """A job every 2 s, run by a worker for 8 s, paused for a minute and a half and resumed: its messages for the
    pause were queued before it."""
    job = world.create(EVERY_2S, misfire_policy=policy)
    target = FakeTarget(world.clock)
    executor = world.executor(target)
    world.sweep()
    world.deliver_until(world.now() + timedelta(seconds=8), executor)
    world.service.pause(TENANT, job.job_id)
    world.deliver_until(world.now() + timedelta(seconds=90), executor)
    world.service.resume(TENANT, job.job_id)
    world.sweep()
    world.deliver_until(world.now() + timedelta(seconds=4), executor)
    return job.job_id, target


def test_a_pause_racing_a_sweep_that_advances_the_chain_keeps_that_advance(world: MemoryCore) -> None:
    # Given a job every 2 s, and a pause whose write comes after a sweep advanced the chain past what it read
    job = world.create(EVERY_2S)
    world.sweep()
    inner = world.jobs

    class SweepBeforeFirstReplace:
        raced = False

        def __getattr__(self, name: str) -> object:
            return getattr(inner, name)

        def replace(self, *args: object, **kwargs: object) -> None:
            if not self.raced:
                self.raced = True
                world.clock.advance(120)
                world.sweep()
            inner.replace(*args, **kwargs)  # type: ignore[arg-type]

    racing = JobService(SweepBeforeFirstReplace(), world.ledger, world.dispatcher, world.clock, max_active_jobs=10)  # type: ignore[arg-type]
    advanced = world.job(job.job_id)
    paused = racing.pause(TENANT, job.job_id)

    # Then the pause was written from a fresh read: the sweep's advance (its plan's record) is kept, not undone
    stored = world.job(job.job_id)
    assert stored.state == JobState.PAUSED and stored.version == 2 == paused.version
    assert stored.advanced_from is not None and advanced.advanced_from is not None
    assert stored.advanced_from > advanced.advanced_from
    assert stored.next_run_at == paused.next_run_at


@pytest.mark.parametrize("policy", ["run_all", "run_once", "skip"])
def test_resume_applies_the_misfire_policy_to_occurrences_queued_before_the_pause(
    world: MemoryCore, policy: str
) -> None:
    job_id, target = paused_inside_the_look_ahead(world, policy)
    job = world.job(job_id)
    assert job.paused_at is not None and job.resumed_at is not None
    missed = [job.paused_at + timedelta(seconds=s) for s in range(1, 100) if (job.paused_at.second + s) % 2 == 0]
    missed = [m for m in missed if m <= job.resumed_at]
    assert len(missed) == 46  # every 2 s from 09:00:10 to the resume at 09:01:40

    # Then nothing that fell due during the pause was recorded SKIPPED "job paused"; the policy decided them all
    history, _ = world.ledger.runs(job_id, 1000, None)
    assert not [r for r in history if r.last_error == "job paused"]
    ran = [c.scheduled_for for c in target.calls]
    caught_up = [s for s in ran if job.paused_at < s <= job.resumed_at]
    expected = {"run_all": missed, "run_once": missed[-1:], "skip": []}[policy]
    assert caught_up == expected
    assert job.misfire_skipped == len(missed) - len(expected)
    # And the chain goes on after the resume, each occurrence once
    assert job.resumed_at + timedelta(seconds=2) in ran
    assert len(ran) == len(set(ran))


# -- trigger ------------------------------------------------------------------------------------------------


def test_trigger_fires_an_extra_occurrence_with_its_own_key(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    world.set_time(at("2026-01-05T09:20:00.500"))

    timer = world.service.trigger(TENANT, job.job_id)

    # Then the extra occurrence is keyed by its own instant and does not move the chain
    assert timer.key == occurrence_key(job.job_id, at("2026-01-05T09:20:00.500"))
    assert timer.kind == "manual"
    assert world.job(job.job_id).next_run_at == at("2026-01-05T10:00")
    world.sweep()
    sweep_at(world, "2026-01-05T09:58")
    sent = world.sent(job.job_id)
    assert [(d.scheduled_for, d.kind) for d in sent] == [
        (at("2026-01-05T09:20:00.500"), "manual"),
        (at("2026-01-05T10:00"), "scheduled"),
    ]
    assert len({d.key for d in sent}) == 2


def test_trigger_into_a_sealed_bucket_is_dispatched_at_once(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    world.sweep()  # seals the buckets up to 09:05

    world.clock.advance(10)
    world.service.trigger(TENANT, job.job_id)

    assert world.sent_for(job.job_id) == [at("2026-01-05T09:00:10")]
    assert not world.timers.late


def test_a_paused_job_cannot_be_triggered(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    world.service.pause(TENANT, job.job_id)

    with pytest.raises(errors.InvalidState):
        world.service.trigger(TENANT, job.job_id)


def test_trigger_at_the_instant_of_a_pending_occurrence_does_not_end_the_chain(world: MemoryCore) -> None:
    # Given an hourly job whose 10:00 timer has not been swept yet (the sweeper is behind)
    job = world.create(HOURLY)
    world.set_time(at("2026-01-05T10:00"))

    # When it is triggered at exactly 10:00:00.000
    world.service.trigger(TENANT, job.job_id)

    # Then both the extra run and the scheduled chain go on: 11:00 and 12:00 are dispatched too
    for _ in range(130):
        world.sweep()
        world.clock.advance(60)
    assert at("2026-01-05T12:00") in world.sent_for(job.job_id)
    assert len({d.key for d in world.sent(job.job_id)}) == len(world.sent(job.job_id)) >= 3


# -- resolve (RECONCILING) ----------------------------------------------------------------------------------


def reconciling(world: MemoryCore) -> tuple[str, str]:
    """An at-most-once job whose only occurrence ended RECONCILING (ambiguous failure)."""
    job = world.create({"type": "once", "delay_seconds": 10}, delivery="at_most_once")
    world.sweep()
    world.set_time(at("2026-01-05T09:00:10"))
    world.deliver(world.executor(FakeTarget(world.clock, ambiguous())))
    [key] = [d.key for d in world.sent(job.job_id)]
    run = world.ledger.get(key)
    assert run is not None and run.state == RunState.RECONCILING
    return job.job_id, key


def test_resolve_as_succeeded_closes_the_occurrence(world: MemoryCore) -> None:
    job_id, key = reconciling(world)

    resolved = world.resolution.resolve(TENANT, job_id, key, RunState.SUCCEEDED, "checked the bank statement")

    assert resolved.state == RunState.SUCCEEDED
    with pytest.raises(errors.InvalidState):
        world.resolution.resolve(TENANT, job_id, key, RunState.SUCCEEDED, "again")


def test_resolve_of_another_tenants_occurrence_is_not_found(world: MemoryCore) -> None:
    job_id, key = reconciling(world)

    with pytest.raises(errors.JobNotFound):
        world.resolution.resolve("globex", job_id, key, RunState.SUCCEEDED, "nope")


def test_resolve_to_retry_survives_a_failed_send(world: MemoryCore, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id, key = reconciling(world)

    # When the queue refuses the message once
    def unavailable(dispatches: object, now: object) -> None:
        raise RuntimeError("SQS unavailable")

    with monkeypatch.context() as patch:
        patch.setattr(world.queue, "send", unavailable)
        with pytest.raises(RuntimeError):
            world.resolution.resolve(TENANT, job_id, key, RunState.RETRY_WAIT, "no effect seen")

    # Then the operator can retry the resolve, or the system re-sends it by itself: either way it runs again
    with contextlib.suppress(errors.InvalidState):
        world.resolution.resolve(TENANT, job_id, key, RunState.RETRY_WAIT, "no effect seen")
    target = FakeTarget(world.clock)
    world.run(world.now() + timedelta(minutes=5), world.executor(target))
    assert [c.key for c in target.calls] == [key]


# -- near-term jobs and the seal ----------------------------------------------------------------------------


def test_near_term_job_into_a_sealed_bucket_is_dispatched_by_the_api(world: MemoryCore) -> None:
    # Given a sweep has already sealed (and swept) the buckets up to 09:05
    world.sweep()

    # When a job due in 5 s is created
    job = world.create({"type": "once", "delay_seconds": 5})

    # Then the API dispatched it itself, with a delay so that it does not arrive early
    [sent] = world.queue.history
    assert sent.dispatch.key == occurrence_key(job.job_id, at("2026-01-05T09:00:05"))
    assert sent.visible_at == at("2026-01-05T09:00:05")
    assert not world.timers.late  # the late-lane copy was dropped once sent
    # And later sweeps do not send it again
    world.clock.advance(30)
    world.sweep()
    assert len(world.queue.history) == 1


def test_near_term_job_into_an_unsealed_bucket_is_left_to_the_sweeper(world: MemoryCore) -> None:
    # Given no sweep has sealed the current bucket
    job = world.create({"type": "once", "delay_seconds": 5})
    assert world.queue.history == []
    assert not world.timers.late

    # When the sweeper runs
    world.sweep()

    # Then it finds the timer: the job is not lost, and sent once
    assert world.sent_for(job.job_id) == [at("2026-01-05T09:00:05")]
    assert world.job(job.job_id).state == JobState.COMPLETED


def test_near_term_job_runs_once_end_to_end(world: MemoryCore) -> None:
    world.sweep()
    job = world.create({"type": "once", "delay_seconds": 5})
    target = FakeTarget(world.clock)

    world.run(at("2026-01-05T09:10"), world.executor(target))

    assert [c.key for c in target.calls] == [occurrence_key(job.job_id, at("2026-01-05T09:00:05"))]
    assert target.calls[0].at >= at("2026-01-05T09:00:05")
    run = world.ledger.get(target.calls[0].key)
    assert run is not None and run.state == RunState.SUCCEEDED


def submission(sched: dict[str, Any], key: str | None = None, **fields: Any) -> Submission:
    body = spec_body(sched, **fields)
    return Submission(job_spec(sched, **fields), key, body)


def test_a_batch_answers_each_item_in_order_and_stores_the_valid_ones_together(world: MemoryCore) -> None:
    # Given a batch of a valid job, one whose payload is too large, and one with a key used before
    world.create({"type": "once", "delay_seconds": 60}, key="used")
    batch = [
        submission({"type": "once", "delay_seconds": 60}),
        submission({"type": "once", "delay_seconds": 60}, payload="x" * MAX_PAYLOAD_BYTES),
        submission({"type": "once", "delay_seconds": 60}, key="used", name="another body"),
        submission({"type": "rate", "every_seconds": 60}, key="new"),
    ]

    # When it is created
    answers = world.service.create_many(TENANT, batch)

    # Then each item has its own answer, in order, and only the valid ones are stored
    assert isinstance(answers[0], Created) and not answers[0].replayed
    assert isinstance(answers[1], errors.PayloadTooLarge)
    assert isinstance(answers[2], errors.IdempotencyConflict)
    assert isinstance(answers[3], Created)
    assert world.reads.get(TENANT, answers[0].job.job_id) == answers[0].job
    assert world.reads.get(TENANT, answers[3].job.job_id) == answers[3].job
    assert len(world.jobs.jobs) == 3


def test_a_near_term_job_of_a_batch_into_a_sealed_bucket_is_dispatched_by_the_api(world: MemoryCore) -> None:
    # Given a sweep has already sealed the buckets up to 09:05
    world.sweep()

    # When a batch of two jobs due in 5 s is created together
    answers = world.service.create_many(TENANT, [submission({"type": "once", "delay_seconds": 5})] * 2)

    # Then the API dispatched both itself (each settled after the write), and dropped their late-lane copies
    jobs = sorted(answer.job.job_id for answer in answers if isinstance(answer, Created))
    assert sorted(sent.dispatch.job_id for sent in world.queue.history) == jobs
    assert not world.timers.late


def test_job_in_the_last_sealed_minute_is_not_lost() -> None:
    # Given a sweep at 09:00:05 with a 5-minute look-ahead: it sealed and finished the 09:05 bucket (to 09:05:59)
    world = MemoryCore.build(start=at("2026-01-05T09:00:05"))
    world.sweep()

    # When a job due at 09:05:50 is created (inside that bucket, but 45 s past now + look-ahead)
    job = world.create({"type": "once", "delay_seconds": 345})
    assert job.next_run_at == at("2026-01-05T09:05:50")

    # Then it is dispatched anyway, by the API or a later sweep
    for _ in range(10):
        world.clock.advance(60)
        world.sweep()
    assert world.sent_for(job.job_id) == [at("2026-01-05T09:05:50")]


# -- signing key rotation -----------------------------------------------------------------------------------


def test_a_job_starts_at_key_version_1(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    assert (job.key_version, job.previous_key_until) == (1, None)


def test_rotating_bumps_the_key_version_and_lets_the_old_one_overlap(world: MemoryCore) -> None:
    job = world.create(HOURLY)

    rotated = world.key_rotation.rotate(TENANT, job.job_id, timedelta(hours=2), if_match=1)

    assert (rotated.key_version, rotated.version) == (2, 2)
    assert rotated.previous_key_until == world.now() + timedelta(hours=2)
    assert world.job(job.job_id) == rotated
    # The default overlap is a day; a second rotation replaces version 2, whose overlap starts now
    again = world.key_rotation.rotate(TENANT, job.job_id)
    assert (again.key_version, again.previous_key_until) == (3, world.now() + DEFAULT_KEY_OVERLAP)


def test_a_revoke_leaves_no_overlap(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    revoked = world.key_rotation.rotate(TENANT, job.job_id, timedelta(0))
    assert (revoked.key_version, revoked.previous_key_until) == (2, None)


def test_a_rotation_keeps_the_schedule_going(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    world.key_rotation.rotate(TENANT, job.job_id)

    sweep_at(world, "2026-01-05T09:58", "2026-01-05T10:58")

    assert world.sent_for(job.job_id) == [at("2026-01-05T10:00"), at("2026-01-05T11:00")]


@pytest.mark.parametrize("overlap", [timedelta(seconds=-1), MAX_KEY_OVERLAP + timedelta(seconds=1)])
def test_an_overlap_out_of_range_is_refused_and_changes_nothing(world: MemoryCore, overlap: timedelta) -> None:
    job = world.create(HOURLY)
    with pytest.raises(errors.InvalidRequest) as refused:
        world.key_rotation.rotate(TENANT, job.job_id, overlap)
    assert refused.value.field == "overlap_seconds"
    assert world.job(job.job_id) == job


def test_a_rotation_with_a_stale_if_match_or_of_a_cancelled_or_foreign_job_is_refused(world: MemoryCore) -> None:
    job = world.create(HOURLY)
    with pytest.raises(errors.JobNotFound):
        world.key_rotation.rotate("someone-else", job.job_id)
    with pytest.raises(errors.VersionConflict):
        world.key_rotation.rotate(TENANT, job.job_id, if_match=7)
    assert world.job(job.job_id) == job
    cancelled = world.service.cancel(TENANT, job.job_id)
    with pytest.raises(errors.InvalidState):
        world.key_rotation.rotate(TENANT, job.job_id)
    assert world.job(job.job_id) == cancelled
