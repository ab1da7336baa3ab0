"""Priority lanes: a job's priority travels with every occurrence (timers, messages, triggers, backfills, edits) to
its ready queue; locally one poller serves the lanes by priority with aging, so low-priority work is never starved."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from scheduler.adapters.dispatch_message import dispatch_from_body, dispatch_to_body
from scheduler.core.ports import Dispatch
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from scheduler_local.worker_poller import LaneScheduler, serve_round
from tests.unit.fixtures import TENANT, MemoryCore, at

EVERY_MINUTE = {"type": "cron", "expression": "* * * * *"}


@pytest.mark.parametrize("priority", ["high", "normal", "low"])
def test_every_message_of_a_job_carries_its_priority(world: MemoryCore, priority: str) -> None:
    job = world.create(EVERY_MINUTE, priority=priority)
    world.service.trigger(TENANT, job.job_id)
    world.set_time(at("2026-01-05T09:03"))
    world.sweep()

    sent = world.sent(job.job_id)
    assert len(sent) >= 3
    assert {d.priority for d in sent} == {priority}
    assert {d.kind for d in sent} == {"scheduled", "manual"}
    # and the chain's next timer keeps it
    assert {t.priority for t in world.pending_timers(job.job_id)} == {priority}


def test_the_default_priority_is_normal(world: MemoryCore) -> None:
    job = world.create(EVERY_MINUTE)
    assert job.spec.priority == "normal"


def test_an_edit_of_the_priority_applies_to_occurrences_not_yet_dispatched(world: MemoryCore) -> None:
    job = world.create(EVERY_MINUTE, priority="low")
    world.sweep()
    dispatched_before = {d.scheduled_for for d in world.sent(job.job_id)}

    world.service.update(TENANT, job.job_id, {"priority": "high"}, None)
    world.set_time(at("2026-01-05T09:10"))
    world.sweep()

    later = [d for d in world.sent(job.job_id) if d.scheduled_for not in dispatched_before]
    assert later and {d.priority for d in later} == {"high"}


def test_backfilled_occurrences_go_to_the_jobs_lane(world: MemoryCore) -> None:
    job = world.create(EVERY_MINUTE, priority="low")
    world.set_time(at("2026-01-05T12:00"))
    world.backfill.start(TENANT, job.job_id, at("2026-01-05T10:00"), at("2026-01-05T10:10"))
    world.sweep()

    assert {d.priority for d in world.sent(job.job_id) if d.kind == "backfill"} == {"low"}


def test_the_priority_survives_the_message_body_and_old_messages_are_normal() -> None:
    now = at("2026-01-05T09:00")
    high = Dispatch("job-1", TENANT, now, now + timedelta(seconds=1), 3, "scheduled", "high")
    assert dispatch_from_body(dispatch_to_body(high, LOCAL_MESSAGE_KEY), LOCAL_MESSAGE_KEY) == high
    legacy = dispatch_to_body(high, LOCAL_MESSAGE_KEY).replace(',"priority":"high"', "")
    assert dispatch_from_body(legacy, None).priority == "normal"  # read without authenticating (its HMAC changed)


# -- the local poller's lane scheduling --------------------------------------------------------------------


def gaps(aging: int, busy: dict[str, float], rounds: int = 3000, seed: int = 0) -> dict[str, int]:
    """The longest run of rounds each always-busy lane waited between two batches."""
    rnd = random.Random(seed)
    scheduler = LaneScheduler(["high", "normal", "low"], aging)
    last = {"high": 0, "normal": 0, "low": 0}
    longest = {"high": 0, "normal": 0, "low": 0}
    for r in range(1, rounds):
        has = {lane: rnd.random() < p for lane, p in busy.items()}
        lane = serve_round(scheduler, lambda name, has=has: 10 if has[name] else 0)
        if lane is not None:
            longest[lane] = max(longest[lane], r - last[lane])
            last[lane] = r
    return longest


def test_high_goes_first_while_it_has_messages() -> None:
    scheduler = LaneScheduler(["high", "normal", "low"], aging_rounds=4)
    served = [serve_round(scheduler, lambda lane: 10) for _ in range(4)]
    assert served == ["high"] * 4


@pytest.mark.parametrize("aging", [1, 2, 4, 8])
def test_a_busy_low_lane_is_served_at_least_once_every_aging_plus_two_rounds(aging: int) -> None:
    # Even with every lane always full, low (and normal) get a batch at least every aging + 2 rounds
    longest = gaps(aging, {"high": 1.0, "normal": 1.0, "low": 1.0})
    assert longest["low"] <= aging + 2
    assert longest["normal"] <= aging + 2
    # and high still gets most rounds
    assert longest["high"] <= 3


@pytest.mark.parametrize("seed", range(20))
def test_the_bound_holds_whatever_the_upper_lanes_do(seed: int) -> None:
    longest = gaps(4, {"high": 0.9, "normal": 0.7, "low": 1.0}, rounds=500, seed=seed)
    assert longest["low"] <= 4 + 2


def test_empty_lanes_cost_a_poll_but_never_a_round() -> None:
    scheduler = LaneScheduler(["high", "normal", "low"], aging_rounds=4)
    polled: list[str] = []

    def poll(lane: str) -> int:
        polled.append(lane)
        return 10 if lane == "low" else 0

    assert serve_round(scheduler, poll) == "low"
    assert polled == ["high", "normal", "low"]
    assert serve_round(LaneScheduler(["normal"]), lambda lane: 0) is None
