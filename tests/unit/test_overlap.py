"""Overlap policy `buffer_one` (issue 20, item 4): at most one parked run, started as soon as the running one
finishes, whatever the length of the run history."""

from __future__ import annotations

from datetime import datetime, timedelta

from scheduler.core.model import RunState
from scheduler.core.ports import TargetCall
from tests.unit.fixtures import FakeTarget, World

EVERY_2S = {"type": "rate", "every_seconds": 2}


def test_buffer_one_parks_one_run_and_starts_it_when_the_running_one_finishes(world: World) -> None:
    # Given a job every 2 s with buffer_one whose first run takes 30 s (15 later occurrences fall due meanwhile,
    # more than the 10 recent runs the policy used to look at)
    job = world.create(EVERY_2S, overlap_policy="buffer_one")
    world.sweep()
    started: dict[datetime, datetime] = {}
    others = FakeTarget(world.clock, lambda call: started.setdefault(call.scheduled_for, world.now()) and "ok")
    other_worker = world.executor(others, worker_id="worker-2")

    def long_run(call: TargetCall) -> str:
        started[call.scheduled_for] = world.now()
        for _ in range(30):
            world.clock.advance(1)
            world.deliver(other_worker)  # the other worker takes what falls due meanwhile
        return "ok"

    first = FakeTarget(world.clock, long_run)
    world.clock.advance(2)
    [message] = world.queue.receive(1)
    world.handle(world.executor(first, lease=timedelta(seconds=60)), message)
    finished_at = world.now()
    world.deliver(other_worker)  # the run released by the first one's worker

    # Then exactly one run was parked (the next occurrence), and it started when the first one finished, not when
    # its lease (60 s) would have ended
    runs, _ = world.ledger.runs(job.job_id, 1000, None)
    [first_call] = first.calls
    first_run = world.ledger.get(first_call.key)
    assert first_run is not None and first_run.state == RunState.SUCCEEDED
    parked_for = first_run.scheduled_for + timedelta(seconds=2)
    skipped = [r for r in runs if r.state == RunState.SKIPPED and first_run.scheduled_for < r.scheduled_for]
    assert len(skipped) >= 13
    assert all("overlap" in (r.last_error or "") for r in skipped)
    assert started[parked_for] - finished_at < timedelta(seconds=2)
    assert world.ledger.get(next(r.key for r in runs if r.scheduled_for == parked_for)).state == RunState.SUCCEEDED  # type: ignore[union-attr]
    assert not [r for r in runs if r.state == RunState.RETRY_WAIT]
