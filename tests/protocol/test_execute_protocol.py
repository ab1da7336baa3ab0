"""The execution protocol (docs/design.md §3.4) under crashes and pauses, against both backends: a crash right before
or right after each ledger write, job read and target call, then a fault-free recovery, must leave the
occurrence applied exactly once at a cooperating target, its outcome recorded once, and no stale write accepted
(docs/design.md §6, invariants 1-3)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from crashable import LEASE, T0, Crash, CrashableCore, CrashAt

from scheduler.core.execution.executor import Executor
from scheduler.core.model.job import RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.core.sweep.dispatch import COPY_MAX_BYTES

DUE = T0 + timedelta(seconds=10)


def executor(
    world: CrashableCore, *, jobs: Any = None, ledger: Any = None, queue: Any = None, target: Any = None
) -> Executor:
    """The doomed worker, without completion events."""
    core = world.core(jobs=jobs, ledger=ledger, queue=queue, events=False)
    return core.executor("doomed", {"http": target or world.sink})


def due_occurrences(world: CrashableCore, count: int, **extra: Any) -> list[str]:
    """`count` one-shot jobs (with `extra`) due at DUE, swept, their time come: their occurrences' keys."""
    job_ids = [world.create({"type": "once", "at": rfc3339(DUE)}, **extra) for _ in range(count)]
    world.sweeper().sweep(world.deadline())
    world.clock.set(DUE)
    return [occurrence_key(job_id, DUE) for job_id in job_ids]


def one_due_occurrence(world: CrashableCore, **extra: Any) -> str:
    (key,) = due_occurrences(world, 1, **extra)
    return key


def crash_once(world: CrashableCore, doomed: Executor) -> None:
    """The doomed worker takes the message and dies somewhere inside `execute`."""
    (message,) = world.queue.receive(10)
    with pytest.raises(Crash):
        doomed.execute(message.dispatch, _Message(world, message))


def crash_at(world: CrashableCore, port: str, method: str, when: str, target: Any = None, **extra: Any) -> str:
    """One due occurrence (a job with `extra`), and the doomed worker dying right `when` (before or after) it calls
    `method` of its `port` ("jobs", "ledger" or "queue"), with `target` as its http target: the occurrence's key."""
    key = one_due_occurrence(world, **extra)
    ports: dict[str, Any] = {"jobs": world.jobs, "ledger": world.ledger, "queue": world.queue}
    ports[port] = crash = CrashAt(ports[port], method, when)
    crash_once(world, executor(world, **ports, target=target))
    assert crash.fired
    return key


class _Message:
    def __init__(self, world: CrashableCore, message: Any) -> None:
        self.world, self.message, self.receive_count = world, message, message.receive_count

    def extend_visibility(self, seconds: int) -> None:
        self.world.queue.change_visibility(self.message, seconds)


class _CrashingTarget:
    """Crash right before calling the sink, or right after the sink applied the effect."""

    def __init__(self, world: CrashableCore, when: str) -> None:
        self.world, self.when = world, when

    def invoke(self, call: TargetCall) -> str | None:
        if self.when == "before":
            raise Crash("before the target call")
        self.world.sink.invoke(call)
        raise Crash("after the target's effect")


def assert_one_outcome(world: CrashableCore, key: str, state: RunState) -> None:
    run = world.ledger.get(key)
    assert run is not None and run.state == state, run
    terminal = [h for h in run.history if h.state == state]
    assert len(terminal) == 1, run.history  # recorded once: no stale write was accepted
    epochs = [h.epoch for h in run.history]
    assert epochs == sorted(epochs)


#: A one-shot occurrence's message carries its job (Dispatch.job_copy) unless the job is too big: then the worker
#: reads it (what a changed job's copy comes to: tests/protocol/test_job_copy_protocol.py).
READ = {"payload": {"blob": "x" * (COPY_MAX_BYTES + 1)}}
STEPS = [("ledger", "claim", {}), ("ledger", "finish", {}), ("ledger", "claim", READ), ("jobs", "get", READ)]


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize(("port", "method", "extra"), STEPS)
def test_a_worker_crash_at_a_ledger_or_job_step_still_applies_the_occurrence_once(
    world: CrashableCore, port: str, method: str, extra: dict[str, Any], when: str
) -> None:
    key = crash_at(world, port, method, when, **extra)
    world.run_until(DUE + timedelta(minutes=4), step=10)

    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_worker_crash_around_the_target_call_applies_the_effect_once(world: CrashableCore, when: str) -> None:
    key = one_due_occurrence(world)

    crash_once(world, executor(world, target=_CrashingTarget(world, when)))
    world.run_until(DUE + timedelta(minutes=4), step=10)

    # The re-run carried the same key with a higher fencing token; the target applied it once
    assert world.sink.effects[key] == 1
    tokens = [token for called, token in world.sink.calls if called == key]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    assert_one_outcome(world, key, RunState.SUCCEEDED)


class _FailOnce:
    def __init__(self, world: CrashableCore, kind: str) -> None:
        self.world, self.kind, self.failed = world, kind, False

    def invoke(self, call: TargetCall) -> str | None:
        if not self.failed:
            self.failed = True
            raise TargetFailure(self.kind, "HTTP 503")  # type: ignore[arg-type]
        return self.world.sink.invoke(call)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_worker_crash_around_the_retry_write_still_succeeds_once(world: CrashableCore, when: str) -> None:
    flaky = _FailOnce(world, "retryable")
    key = crash_at(world, "ledger", "finish", when, flaky, retry={"max_attempts": 3, "initial_backoff_seconds": 1})
    world.run_until(DUE + timedelta(minutes=4), step=10)

    assert world.sink.effects[key] == 1
    assert_one_outcome(world, key, RunState.SUCCEEDED)


class _AlwaysRefused:
    def invoke(self, call: TargetCall) -> str | None:
        raise TargetFailure("permanent", "HTTP 400")


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize(
    ("port", "method"), [("ledger", "finish"), ("queue", "dead_letter"), ("ledger", "mark_dead_lettered")]
)
def test_a_worker_crash_on_the_way_to_the_dead_letter_queue_still_dead_letters_it(
    world: CrashableCore, port: str, method: str, when: str
) -> None:
    refused = _AlwaysRefused()
    key = crash_at(world, port, method, when, refused)
    # Recovery with the same refusing target (a permanent failure stays permanent)
    recovery = executor(world, target=refused)
    end = DUE + timedelta(minutes=4)
    while world.clock.now() < end:
        while world.work(recovery):
            pass
        world.clock.advance(10)

    run = world.ledger.get(key)
    assert run is not None and run.state == RunState.DEAD and run.dead_lettered
    assert key in {dispatch.key for dispatch, _ in world.queue.dead}
    assert_one_outcome(world, key, RunState.DEAD)


def test_a_worker_that_pauses_past_its_lease_cannot_record_anything(world: CrashableCore) -> None:
    # Given worker A running the occurrence, paused inside its target call past its lease and visibility
    key = one_due_occurrence(world)
    taken_over: list[bool] = []

    def pause_then_let_b_take_over(call: TargetCall) -> None:
        if call.fencing_token == 1 and not taken_over:
            taken_over.append(True)
            world.clock.advance(LEASE.total_seconds() + 120)  # past the lease and the message's visibility
            world.work(executor(world))  # worker B receives the redelivered message and claims epoch 2

    world.sink.before_effect = pause_then_let_b_take_over
    (message,) = world.queue.receive(10)
    outcome = executor(world).execute(message.dispatch, _Message(world, message))

    # Then A's completion was fenced, the target saw the key twice (B's token 2, then A's stale 1, refused),
    # and the ledger shows one SUCCEEDED - B's
    assert not outcome.ack and outcome.reason == "fenced"
    assert world.metrics.counts["FencedWrites"] == 1
    assert [token for called, token in world.sink.calls if called == key] == [2, 1]
    assert world.sink.stale_refused == 1
    assert world.sink.effects[key] == 1
    run = world.ledger.get(key)
    assert run is not None and run.state == RunState.SUCCEEDED and run.epoch == 2
    assert_one_outcome(world, key, RunState.SUCCEEDED)
