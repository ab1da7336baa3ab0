"""Flow control per destination key (scheduler.core.tenancy.flow_control): a key's rate is a release calendar booked
on every send path after the tenant's budget (delayed, never dropped, never early, in scheduled order), its
parallelism leased slots taken next to the tenant's, and its destination's 429/503 pause the key and back its rate
off (AIMD)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from scheduler.core.errors import InvalidRequest, Throttled
from scheduler.core.execution.outcome import Why
from scheduler.core.model.flow import FlowControl
from scheduler.core.model.job import JobSpec, RunState
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.model.validation import field_errors
from scheduler.core.ports import Dispatch, TargetCall, TargetFailure
from scheduler.core.sweep.dispatch import timer_for
from scheduler.core.tenancy.fairness import MAX_RELEASE_DELAY, reserve
from scheduler.core.tenancy.flow_control import BACKOFF, MIN_FACTOR, KeyRate, flow_owner, rate_factor
from tests.unit.fixtures import T0, TENANT, FakeTarget, MemoryCore, StubMessage, spec_body

PAYMENTS = {"key": "payments-api", "rate": 5, "period_seconds": 1}


def most_in_any_second(instants: list[datetime]) -> int:
    """The most instants in any half-open window of one second."""
    ordered = sorted(instants)
    best, start = 0, 0
    for end, instant in enumerate(ordered):
        while instant - ordered[start] >= timedelta(seconds=1):
            start += 1
        best = max(best, end - start + 1)
    return best


def herd(world: MemoryCore, count: int, flow: dict[str, Any] | None, *, tenant: str = TENANT, at: datetime) -> list:
    return [
        world.create({"type": "once", "at": rfc3339(at)}, tenant=tenant, **({"flow_control": flow} if flow else {}))
        for _ in range(count)
    ]


# -- the model ------------------------------------------------------------------------------------------------


def test_a_key_needs_a_rate_or_a_parallelism_and_a_plain_name() -> None:
    assert FlowControl(key="payments-api", rate=50).per_second == 50
    assert FlowControl(key="a.b:c_d-1", parallelism=2).rate is None
    for bad, field in [
        ({"key": "payments-api"}, "flow_control"),
        ({"key": "pay ments", "rate": 1}, "flow_control.key"),
        ({"key": "x" * 129, "rate": 1}, "flow_control.key"),
        ({"key": "k", "rate": 1, "period_seconds": 3601}, "flow_control.period_seconds"),
        ({"key": "k", "rate": 0}, "flow_control.rate"),
        ({"key": "k", "rate": 1000}, "flow_control"),  # more than one key's item can hold to
        ({"key": "k", "parallelism": 2, "burst": 3}, "flow_control.burst"),
    ]:
        with pytest.raises(ValidationError) as refused:
            JobSpec.model_validate(spec_body({"type": "once", "delay_seconds": 60}, flow_control=bad))
        assert field_errors(refused.value)[0][0] == field, bad


# -- the calendar of a key ------------------------------------------------------------------------------------


def test_a_key_releases_one_at_a_time_at_its_rate_never_early() -> None:
    rate = KeyRate.of(FlowControl(key="k", rate=5), 1.0)
    releases, calendar = reserve(None, [T0] * 100, rate, T0, T0 + MAX_RELEASE_DELAY)

    assert len(releases) == 100 and min(releases) == T0
    assert most_in_any_second(releases) <= 6
    assert releases[-1] - releases[0] == timedelta(milliseconds=200 * 99)
    assert sum(calendar.booked.values()) == 100
    held = sum(count for count, _ in calendar.held.values())
    assert held == 99  # every one but the first was delayed


def test_a_rate_change_keeps_what_the_key_booked() -> None:
    slow = KeyRate.of(FlowControl(key="k", rate=1), 1.0)
    releases, calendar = reserve(None, [T0] * 3, slow, T0, T0 + MAX_RELEASE_DELAY)
    fast = KeyRate.of(FlowControl(key="k", rate=10), 1.0)

    more, _ = reserve(calendar, [T0] * 3, fast, T0, T0 + MAX_RELEASE_DELAY, rescale=True)

    assert not set(more) & set(releases)  # none released into an instant already booked


# -- every send path goes through the key ---------------------------------------------------------------------


def test_a_herd_of_one_key_is_released_at_its_rate_and_others_are_not_held() -> None:
    world = MemoryCore.build(max_active_jobs=1000)
    fire = T0 + timedelta(minutes=10)
    keyed = herd(world, 100, PAYMENTS, at=fire)
    unrelated = herd(world, 20, None, at=fire)
    other_tenant = herd(world, 20, PAYMENTS, tenant="globex", at=fire)
    world.set_time(fire - timedelta(minutes=4))

    world.sweep()

    visible = {s.dispatch.job_id: s.visible_at for s in world.queue.history}
    releases = {s.dispatch.job_id: s.dispatch.send_at for s in world.queue.history}
    mine = sorted(releases[j.job_id] for j in keyed)
    assert len(mine) == 100 and mine[0] == fire  # none early
    assert most_in_any_second(mine) <= 6
    assert timedelta(seconds=19) <= mine[-1] - fire <= timedelta(seconds=20)
    assert {visible[j.job_id] for j in unrelated} == {fire}
    theirs = sorted(releases[j.job_id] for j in other_tenant)  # the same key in another tenant is another key
    assert theirs[0] == fire and theirs[-1] - fire < timedelta(seconds=4)
    assert world.metrics.counts.get("FlowControlThrottled", 0) == 99 + 19


def test_a_herd_beyond_sqs_horizon_is_deferred_in_order_and_none_is_lost() -> None:
    world = MemoryCore.build(max_active_jobs=1000)
    fire = T0 + timedelta(minutes=10)
    jobs = herd(world, 20, {"key": "slow", "rate": 1, "period_seconds": 60}, at=fire)
    world.set_time(fire - timedelta(minutes=4))
    world.sweep()
    first = len(world.queue.history)
    assert 0 < first < 20
    assert len([t for t in world.pending_timers() if t.defer_until is not None]) == 20 - first

    # Later sweeps admit the deferred ones, each a minute after the one before, in scheduled order.
    world.run(fire + timedelta(minutes=25), world.executor())
    releases = sorted(s.dispatch.send_at for s in world.queue.history)
    assert sorted({s.dispatch.job_id for s in world.queue.history}) == sorted(j.job_id for j in jobs)
    assert all(b - a >= timedelta(seconds=60) for a, b in itertools.pairwise(releases))


def test_a_near_term_create_dispatched_by_the_api_is_booked_too() -> None:
    world = MemoryCore.build(max_active_jobs=1000)
    world.sweep()  # seals the look-ahead: what is created now is dispatched by the API itself
    fire = T0 + timedelta(seconds=30)
    herd(world, 10, PAYMENTS, at=fire)

    releases = sorted(s.dispatch.send_at for s in world.queue.history)
    assert len(releases) == 10 and releases[0] == fire
    assert releases[-1] - fire == timedelta(milliseconds=1800)


def test_a_high_lane_occurrence_of_a_key_goes_before_a_normal_one_due_at_the_same_time() -> None:
    world = MemoryCore.build(max_active_jobs=1000)
    fire = T0 + timedelta(minutes=10)
    normal = herd(world, 5, PAYMENTS, at=fire)
    high = world.create({"type": "once", "at": rfc3339(fire)}, flow_control=PAYMENTS, priority="high")
    world.set_time(fire - timedelta(minutes=4))
    world.sweep()

    releases = {s.dispatch.job_id: s.dispatch.send_at for s in world.queue.history}
    assert releases[high.job_id] == fire
    assert all(releases[j.job_id] > fire for j in normal)


def test_a_message_that_lands_before_its_keys_release_waits_for_it() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    _job, dispatch = world.due(flow_control=PAYMENTS)
    held = dispatch.deferred_to(world.now() + timedelta(seconds=5))

    outcome = world.executor().execute(held, StubMessage())

    assert outcome.why is Why.EARLY and not outcome.ack
    assert world.ledger.get(dispatch.key) is None


# -- parallelism ----------------------------------------------------------------------------------------------


def due_now(world: MemoryCore, count: int, flow: dict[str, Any]) -> list[Dispatch]:
    fire = world.now() + timedelta(seconds=10)
    jobs = herd(world, count, flow, at=fire)
    world.set_time(fire)
    return [Dispatch.of(timer_for(job, fire)) for job in jobs]


def test_a_key_at_its_parallelism_waits_without_a_claim_and_runs_when_a_slot_frees() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    first, second, third = due_now(world, 3, {"key": "slow-api", "parallelism": 2})
    outcomes: dict[str, Any] = {}

    def others_while_running(call: TargetCall) -> str:
        if "second" not in outcomes:
            outcomes["second"] = "running"
            outcomes["second"] = world.executor(FakeTarget(world.clock, others_while_running)).execute(
                second, StubMessage()
            )
            return "ok"
        assert world.core.flow is not None
        assert world.core.flow.slots.in_use(flow_owner(TENANT, "slow-api"), world.now()) == 2
        outcomes["third"] = world.executor().execute(third, StubMessage())
        return "ok"

    world.executor(FakeTarget(world.clock, others_while_running)).execute(first, StubMessage())

    assert outcomes["third"].why is Why.THROTTLED and not outcomes["third"].ack
    assert world.ledger.get(third.key) is None  # no claim, no attempt spent
    assert world.executor().execute(third, StubMessage()).ack  # the slots were given back
    assert world.metrics.counts.get("FlowControlThrottled", 0) == 1


def test_a_run_its_key_held_for_a_slot_shows_the_key_why_and_how_long() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    first, second = due_now(world, 2, {"key": "slow-api", "parallelism": 1})
    assert world.core.flow is not None
    lease_end = world.now() + timedelta(seconds=15)
    assert world.core.flow.slots.acquire(flow_owner(TENANT, "slow-api"), 1, "other-worker", world.now(), lease_end) == 0

    # held: each receive of the message is throttled; only the first receive of a message marks it
    assert world.executor().execute(second, StubMessage()).why is Why.THROTTLED
    assert world.executor().execute(second, StubMessage(receive_count=2)).why is Why.THROTTLED
    world.clock.advance(16)  # the other worker's lease ends
    assert world.executor().execute(second, StubMessage(receive_count=3)).ack

    run = world.ledger.get(second.key)
    assert run is not None and run.held is not None
    assert (run.held.key, run.held.reasons, run.held.since) == ("slow-api", {"parallelism"}, second.fire_at)
    assert run.held.detail(run.created_at) == "held by flow-control key slow-api for 16.0 s: a slot of its parallelism"
    assert world.executor().execute(first, StubMessage()).ack
    assert world.ledger.get(first.key).held is None  # released at its fire time, a free slot: nothing held it


def test_a_run_its_keys_calendar_released_late_shows_its_rate_held_it() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    _job, dispatch = world.due(flow_control=PAYMENTS)
    released = dispatch.deferred_to(world.now() + timedelta(seconds=4))  # the key's release, as its message carries
    world.clock.advance(4)

    assert world.executor().execute(released, StubMessage()).ack

    run = world.ledger.get(dispatch.key)
    assert run is not None and run.held is not None
    assert (run.held.key, run.held.reasons) == ("payments-api", {"rate"})
    assert run.held.detail(run.created_at).startswith("held by flow-control key payments-api for ")
    assert run.held.detail(None).startswith("waiting for flow-control key payments-api: its rate, since ")


def test_a_release_under_a_second_after_the_fire_time_is_not_told_as_a_hold() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    _job, dispatch = world.due(flow_control=PAYMENTS)
    released = dispatch.deferred_to(world.now() + timedelta(milliseconds=900))  # a window's rounding
    world.clock.advance(1)

    assert world.executor().execute(released, StubMessage()).ack

    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state is RunState.SUCCEEDED and run.held is None


def test_a_worker_killed_mid_call_frees_the_keys_slot_when_its_lease_ends() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    _first, second = due_now(world, 2, {"key": "slow-api", "parallelism": 1})
    assert world.core.flow is not None
    slots = world.core.flow.slots
    # The killed worker took the key's only slot, leased as its claim, and never came back.
    lease_end = world.now() + timedelta(seconds=15)
    assert slots.acquire(flow_owner(TENANT, "slow-api"), 1, "dead-worker", world.now(), lease_end) == 0

    assert world.executor().execute(second, StubMessage()).why is Why.THROTTLED
    world.clock.advance(16)
    assert world.executor().execute(second, StubMessage()).ack


# -- feedback -------------------------------------------------------------------------------------------------


def test_a_429_with_retry_after_pauses_the_key_and_backs_its_rate_off_until_it_recovers() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    first, second = due_now(world, 2, PAYMENTS)
    busy = TargetFailure("retryable", "HTTP 429", retry_after=30, status=429)
    now = world.now()

    outcome = world.executor(FakeTarget(world.clock, busy)).execute(first, StubMessage())

    assert world.core.flow is not None
    state = world.core.flow.keys.get(TENANT, "payments-api")
    assert state is not None and state.paused_until == now + timedelta(seconds=30)
    assert rate_factor(state, now) == BACKOFF
    assert outcome.hide_seconds >= 30  # the retry is booked after the pause
    assert world.ledger.get(first.key).state is RunState.RETRY_WAIT  # type: ignore[union-attr]
    # Nothing of the key starts during the pause: the other occurrence waits for its end, unclaimed.
    held = world.executor().execute(second, StubMessage())
    assert held.why is Why.THROTTLED and 29 <= held.hide_seconds <= 30
    assert world.ledger.get(second.key) is None
    # AIMD: halved at each push-back (down to a floor), back to the whole rate additively.
    assert rate_factor(state, now + timedelta(seconds=25)) == pytest.approx(0.75)
    assert rate_factor(state, now + timedelta(seconds=60)) == 1.0
    assert MIN_FACTOR > 0


def test_a_503_without_retry_after_backs_off_without_a_pause_and_an_unkeyed_job_changes_nothing() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    (keyed,) = due_now(world, 1, PAYMENTS)
    down = TargetFailure("retryable", "HTTP 503", status=503)
    world.executor(FakeTarget(world.clock, down)).execute(keyed, StubMessage())
    assert world.core.flow is not None
    state = world.core.flow.keys.get(TENANT, "payments-api")
    assert state is not None and state.paused_until is None and state.rate_factor == BACKOFF
    assert world.metrics.counts.get("FlowControlPushBacks", 0) == 1


def test_retries_of_a_key_are_booked_in_its_calendar() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    (dispatch,) = due_now(world, 1, {"key": "k", "rate": 1, "period_seconds": 10})
    assert world.core.flow is not None
    now = world.now()
    # the key's next three windows of 10 s are booked already (its herd)
    booked = [world.core.flow.retry_release(TENANT, "k", now) for _ in range(3)]
    failing = TargetFailure("retryable", "HTTP 500", status=500)

    hidden = world.executor(FakeTarget(world.clock, failing)).execute(dispatch, StubMessage()).hide_seconds

    # its retry (due 5 s after) is released in the first window after them, not beside them
    assert now + timedelta(seconds=hidden) >= booked[-1] + timedelta(seconds=10)
    state = world.core.flow.keys.get(TENANT, "k")
    assert state is not None and state.calendar is not None and sum(state.calendar.booked.values()) == 4


# -- limits, backpressure -------------------------------------------------------------------------------------


def test_the_most_recent_write_naming_a_key_sets_its_limits() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    job = world.create({"type": "rate", "every_seconds": 3600}, flow_control=PAYMENTS)
    assert world.core.flow is not None
    world.core.flow.declare(TENANT, FlowControl(key="payments-api", parallelism=3))
    assert world.core.flow.keys.get(TENANT, "payments-api").limits.rate is None  # type: ignore[union-attr]

    world.service.update(TENANT, job.job_id, {"flow_control": {"key": "payments-api", "rate": 9}}, None)

    assert world.core.flow.keys.get(TENANT, "payments-api").limits.rate == 9  # type: ignore[union-attr]
    assert world.core.flow.keys.get("globex", "payments-api") is None


def test_a_create_beyond_the_keys_max_backlog_is_refused_and_writes_nothing() -> None:
    world = MemoryCore.build(max_active_jobs=1000)
    flow = {**PAYMENTS, "rate": 1, "max_backlog": 5}
    fire = T0 + timedelta(minutes=10)
    herd(world, 8, flow, at=fire)
    world.set_time(fire - timedelta(minutes=4))
    world.sweep()  # 8 booked a second apart: 7 held
    jobs_before = len(world.jobs.jobs)

    with pytest.raises(Throttled) as refused:
        world.create({"type": "once", "at": rfc3339(fire)}, flow_control=flow)

    assert "payments-api" in refused.value.detail and refused.value.retry_after >= 1
    assert len(world.jobs.jobs) == jobs_before
    job = next(iter(world.jobs.jobs.values()))
    with pytest.raises(Throttled):
        world.service.trigger(TENANT, job.job_id)


def test_without_flow_control_a_job_naming_a_key_is_refused() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    service = world.service
    object.__setattr__(service, "flow", None)
    with pytest.raises(InvalidRequest):
        world.create({"type": "once", "delay_seconds": 60}, flow_control=PAYMENTS)


def test_calls_of_a_key_start_a_rates_gap_apart_however_late_their_messages_came() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    dispatches = due_now(world, 3, {"key": "k", "rate": 2})  # a gap of 500 ms
    starts: list[datetime] = []

    def record(call: TargetCall) -> str:
        starts.append(world.now())
        return "ok"

    # three messages received at once (a worker that polled late): the second and third wait out the gap
    for dispatch in dispatches:
        assert world.executor(FakeTarget(world.clock, record)).execute(dispatch, StubMessage()).ack

    assert [s - starts[0] for s in starts] == [timedelta(0), timedelta(milliseconds=500), timedelta(seconds=1)]
    assert world.metrics.counts.get("FlowControlPaced", 0) == 2


def test_a_start_taken_by_another_attempt_while_one_waits_is_waited_out_again_not_hidden() -> None:
    world = MemoryCore.build(max_active_jobs=10)
    first, second = due_now(world, 2, {"key": "k", "rate": 2})  # a gap of 500 ms
    keys = world.core.flow.keys  # type: ignore[union-attr]
    take_start = keys.take_start
    raced: list[datetime] = []

    def another_attempt_first(tenant: str, key: str, seen: datetime | None, next_start: datetime) -> bool:
        # once: a record of another worker's batch takes the start this attempt waited for, a moment before it
        if not raced and seen is not None:
            raced.append(next_start)
            assert take_start(tenant, key, seen, next_start)
            return False
        return take_start(tenant, key, seen, next_start)

    keys.take_start = another_attempt_first  # type: ignore[method-assign]
    starts: list[datetime] = []

    def record(call: TargetCall) -> str:
        starts.append(world.now())
        return "ok"

    # Given the first started, and the second waiting out the gap only to lose the start it waited for
    assert world.executor(FakeTarget(world.clock, record)).execute(first, StubMessage()).ack
    began = world.now()
    outcome = world.executor(FakeTarget(world.clock, record)).execute(second, StubMessage())

    # Then the second waits out the next gap in the worker too, and starts then: not hidden for a second or more
    assert raced and outcome.ack and len(starts) == 2
    assert starts[1] - began == timedelta(seconds=1)
    assert world.metrics.counts.get("FlowControlDelaySeconds", 0) == 0
