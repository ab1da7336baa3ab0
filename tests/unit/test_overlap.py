"""Overlap policy `buffer_one`: at most one parked run, started as soon as the running one
finishes, whatever the length of the run history."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from scheduler.core.model.job import RunState
from scheduler.core.ports import TargetCall
from scheduler.core.records import Execution
from tests.unit.fixtures import LEASE, TENANT, FakeTarget, MemoryCore

EVERY_2S = {"type": "rate", "every_seconds": 2}


def test_buffer_one_parks_one_run_and_starts_it_when_the_running_one_finishes(world: MemoryCore) -> None:
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


HOURLY = {"type": "cron", "expression": "0 * * * *"}


def paused_and_resumed(
    world: MemoryCore, schedule: dict[str, object], pause: timedelta, **fields: object
) -> tuple[str, list[datetime]]:
    """Create the job, run it 21 s, pause it for `pause` (the sweeper running meanwhile), resume it and sweep: the
    job and what the resume sent (the occurrences that fell due while it was paused, as its policy says)."""
    job = world.create(schedule, **fields)
    world.sweep()
    paused = world.now() + timedelta(seconds=21)
    while world.now() + timedelta(seconds=10) < paused:  # the chain runs a while
        world.clock.advance(10)
        world.sweep()
        world.deliver(world.executor())
    world.set_time(paused)
    world.service.pause(TENANT, job.job_id)
    step = min(pause, timedelta(minutes=10))
    while world.now() + step < paused + pause:
        world.clock.advance(step.total_seconds())
        world.sweep()
    world.set_time(paused + pause)
    before = len(world.sent(job.job_id))
    world.service.resume(TENANT, job.job_id)
    world.sweep()
    return job.job_id, [at for at in world.sent_for(job.job_id)[before:] if paused < at <= paused + pause]


@pytest.mark.parametrize(
    ("schedule", "pause", "policy", "overlap"),
    [
        (HOURLY, timedelta(hours=4, minutes=10), "run_all", "skip"),  # misfired: caught up by run_all
        (HOURLY, timedelta(hours=4, minutes=10), "run_all", "buffer_one"),
        (EVERY_2S, timedelta(seconds=11), "run_once", "skip"),  # missed by less than the grace: simply late
    ],
    ids=["run_all-skip", "run_all-buffer_one", "within-grace-skip"],
)
def test_a_catch_up_runs_every_occurrence_it_sends_one_after_another(
    world: MemoryCore, schedule: dict[str, object], pause: timedelta, policy: str, overlap: str
) -> None:
    # Given a job paused through several occurrences, then resumed: what fell due goes out at once
    job_id, missed = paused_and_resumed(world, schedule, pause, misfire_policy=policy, overlap_policy=overlap)
    assert len(missed) >= 4, missed
    version = world.job(job_id).version

    # When each run takes two thirds of its lease and a second worker takes the others while the first runs
    order: list[datetime] = []
    other_worker = world.executor(FakeTarget(world.clock, lambda call: order.append(call.scheduled_for) or "ok"))

    def slow(call: TargetCall) -> str:
        order.append(call.scheduled_for)
        world.clock.advance(LEASE.total_seconds() * 2 / 3)
        world.deliver(other_worker)  # the rest of the catch-up, while this one runs
        return "ok"

    while True:  # (the paused chain's own queued messages for those instants are dropped unrecorded)
        [message] = world.queue.receive(1)
        if message.dispatch.version >= version:
            break
        world.handle(other_worker, message)
    world.handle(world.executor(FakeTarget(world.clock, slow), worker_id="worker-2"), message)
    while world.deliver(other_worker):  # each finished one sends the next
        pass

    # Then none was skipped for overlap: all ran, once each, oldest first, each after the one before it finished
    runs = {r.scheduled_for: r for r in world.ledger.runs(job_id, 100, None)[0]}
    assert [runs[at].state for at in missed] == [RunState.SUCCEEDED] * len(missed)
    assert [at for at in order if at in missed] == missed
    assert world.metrics.counts["OverlapDetected"] >= 3


def test_an_occurrence_that_finds_a_parked_run_about_to_start_does_not_start_beside_it(world: MemoryCore) -> None:
    # Given a buffer_one job every 2 s whose first run takes 5 s: the next one is parked behind it
    job = world.create(EVERY_2S, overlap_policy="buffer_one")
    world.sweep()
    other_worker = world.executor(worker_id="worker-2")

    def long_run(call: TargetCall) -> str:
        for _ in range(5):
            world.clock.advance(1)
            visible = world.queue.receive(10)
            for message in visible:
                world.handle(other_worker, message)
        return "ok"

    world.clock.advance(2)
    [first] = world.queue.receive(1)
    world.handle(world.executor(FakeTarget(world.clock, long_run)), first)
    parked = [r for r in world.ledger.runs(job.job_id, 100, None)[0] if r.state == RunState.RETRY_WAIT]
    assert len(parked) == 1

    # When the next occurrence falls due before the parked one (released by the first run's worker) has started
    world.clock.advance(1)
    visible = world.queue.receive(10)
    released = [m for m in visible if m.dispatch.scheduled_for == parked[0].scheduled_for]
    on_time = [m for m in visible if m.dispatch.scheduled_for > parked[0].scheduled_for]
    assert released and on_time
    world.handle(other_worker, on_time[0])

    # Then it is skipped (the parked one holds the place), and the parked one then runs
    skipped = world.ledger.get(on_time[0].dispatch.key)
    assert skipped is not None and skipped.state == RunState.SKIPPED
    assert "about to run" in (skipped.last_error or "")
    world.handle(other_worker, released[0])
    assert world.ledger.get(parked[0].key).state == RunState.SUCCEEDED  # type: ignore[union-attr]


class StaleRuns:
    """The ledger as a worker sees it when the run index lags (or when the holder finishes between the overlap read
    and the park): `runs` answers from a snapshot; everything else, including the consistent `get`, is current."""

    def __init__(self, ledger: Any, snapshot: tuple[list[Execution], str | None]) -> None:
        self._ledger, self._snapshot = ledger, snapshot

    def runs(self, job_id: str, limit: int, cursor: str | None, **bounds: Any) -> tuple[list[Execution], str | None]:
        return self._snapshot

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)


def test_a_run_parked_just_after_its_holder_finished_is_not_left_waiting_for_the_lease(world: MemoryCore) -> None:
    # Given a buffer_one job every 2 s whose first run takes 3 s, and a worker that reads the run history as it
    # was while that run was going: the first run's worker finished and looked for parked runs before the next one
    # was parked (found none), so nobody will send it
    job = world.create(EVERY_2S, overlap_policy="buffer_one")
    world.sweep()
    snapshot: list[tuple[list[Execution], str | None]] = []

    def long_run(call: TargetCall) -> str:
        world.clock.advance(3)
        snapshot.append(world.ledger.runs(job.job_id, 100, None))
        return "ok"

    world.clock.advance(2)
    [first] = world.queue.receive(1)
    world.handle(world.executor(FakeTarget(world.clock, long_run)), first)
    finished_at = world.now()
    late_reader = world.executor(worker_id="worker-2")
    late_reader = replace(late_reader, ledger=StaleRuns(world.ledger, snapshot[0]))
    [parked] = [m for m in world.queue.receive(10) if m.dispatch.scheduled_for > first.dispatch.scheduled_for][:1]

    # When it parks the next occurrence behind the run it still sees running
    delivery = world.handle(late_reader, parked)
    assert world.ledger.get(parked.dispatch.key).buffered  # type: ignore[union-attr]

    # Then it looks again a second later, not a lease (60 s) later, and the parked run then starts
    assert delivery.outcome.hide_seconds == 1, delivery.outcome
    assert world.metrics.counts["BufferedRecheck"] == 1
    world.clock.advance(1)
    [again] = [m for m in world.queue.receive(10) if m.dispatch.key == parked.dispatch.key]
    world.handle(world.executor(worker_id="worker-2"), again)
    ran = world.ledger.get(parked.dispatch.key)
    assert ran is not None and ran.state == RunState.SUCCEEDED
    assert world.now() - finished_at < timedelta(seconds=2)


class CountedRuns:
    """The ledger, counting the run-history pages a worker asks for (each run on a page is a read on DynamoDB: the
    index lists keys only)."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger
        self.pages: list[tuple[int, dict[str, Any]]] = []
        self.read = 0

    def runs(self, job_id: str, limit: int, cursor: str | None, *more: Any, **bounds: Any) -> Any:
        self.pages.append((limit, bounds))
        page, after = self._ledger.runs(job_id, limit, cursor, *more, **bounds)
        self.read += len(page)
        return page, after

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)


@pytest.mark.parametrize("skipped_before", [0, 3])
def test_the_overlap_check_reads_only_the_runs_back_to_the_holder_candidate(
    world: MemoryCore, skipped_before: int
) -> None:
    # Given a job every 2 s with a long history: 20 runs that finished, then `skipped_before` skipped for overlap
    job = world.create(EVERY_2S)
    world.sweep()
    for _ in range(20):
        world.clock.advance(2)
        world.sweep()
        world.deliver(world.executor())
    runs, _ = world.ledger.runs(job.job_id, 100, None)
    assert len(runs) >= 20 and all(r.state == RunState.SUCCEEDED for r in runs)
    if skipped_before:
        hold = FakeTarget(world.clock, lambda call: "ok")

        def slow(call: TargetCall) -> str:
            for _ in range(skipped_before):
                world.clock.advance(2)
                world.sweep()
                world.deliver(world.executor(hold, worker_id="worker-2"))
            return "ok"

        world.clock.advance(2)
        world.sweep()
        world.deliver(world.executor(FakeTarget(world.clock, slow), lease=timedelta(seconds=60)))
        runs, _ = world.ledger.runs(job.job_id, skipped_before, None)
        assert [r.overlap_skipped for r in runs] == [True] * skipped_before

    # When the next occurrence's worker checks for overlap
    counted = CountedRuns(world.ledger)
    worker = world.executor(worker_id="worker-3")
    worker = replace(worker, ledger=counted)
    world.clock.advance(2)
    world.sweep()
    world.deliver(worker)

    # Then it read the one run before it (and the skipped ones in between), never a page of the history, and
    # only runs scheduled before its own
    assert counted.pages[0][0] == 1 and counted.pages[0][1]["within"].before is not None
    assert counted.read <= skipped_before + 1 + 4
    latest = max(world.ledger.runs(job.job_id, 100, None)[0], key=lambda r: r.scheduled_for)
    assert latest.state == RunState.SUCCEEDED
