"""A tenant's retry of a DEAD or RECONCILING occurrence (scheduler.core.jobs.run_retry) under crashes, against both
backends: a crash right before or right after its ledger write or its send, then the tenant retrying again, must
run the occurrence once more under its own key with a higher fencing token, and apply it once at the target."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from crashable import T0, Crash, CrashableCore, CrashAt

from scheduler.core.errors import InvalidState, JobNotFound
from scheduler.core.execution.executor import Executor
from scheduler.core.jobs.run_retry import retry_run
from scheduler.core.model.job import RunState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import TargetCall, TargetFailure

DUE = T0 + timedelta(seconds=10)


class _Failing:
    """The target fails in the given way (a permanent refusal: DEAD; no answer: RECONCILING)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def invoke(self, call: TargetCall) -> str | None:
        raise TargetFailure(self.kind, "HTTP 400" if self.kind == "permanent" else "no answer")  # type: ignore[arg-type]


def drain(world: CrashableCore, executor: Executor | None = None) -> None:
    """Work every message until the queue is empty, moving the clock past any visibility or backoff."""
    for _ in range(30):
        while world.work(executor):
            pass
        world.clock.advance(10)


def failed_occurrence(world: CrashableCore, state: RunState) -> tuple[str, str]:
    """A job whose one occurrence ended `state` (DEAD or RECONCILING): (job id, occurrence key)."""
    kind, delivery = ("permanent", "at_least_once") if state == RunState.DEAD else ("ambiguous", "at_most_once")
    job_id = world.create({"type": "once", "at": rfc3339(DUE)}, delivery=delivery, retry={"max_attempts": 1})
    world.sweeper().sweep(world.deadline())
    world.clock.set(DUE)
    drain(world, world.executor(target=_Failing(kind)))
    key = occurrence_key(job_id, DUE)
    run = world.ledger.get(key)
    assert run is not None and run.state == state, run
    return job_id, key


@pytest.mark.parametrize("state", [RunState.DEAD, RunState.RECONCILING])
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize(("port", "method"), [("ledger", "revive/resolve"), ("queue", "send")])
def test_a_crash_around_a_retry_then_a_retry_again_runs_it_once(
    world: CrashableCore, state: RunState, when: str, port: str, method: str
) -> None:
    job_id, key = failed_occurrence(world, state)
    tokens_before = [token for called, token in world.sink.calls if called == key]

    # The first retry dies right before or right after its ledger write or its send
    if method == "revive/resolve":
        method = "revive" if state == RunState.DEAD else "resolve"
    target: Any = world.ledger if port == "ledger" else world.queue
    crash = CrashAt(target, method, when)
    doomed = world.core(**{port: crash}).job_service()
    with pytest.raises(Crash):
        retry_run(doomed, "tenant", job_id, DUE)
    assert crash.fired

    # The tenant retries again (its first answer never came): accepted, waiting for the new attempt
    again = retry_run(world.service(), "tenant", job_id, DUE)
    assert (again.key, again.state) == (key, RunState.RETRY_WAIT)
    drain(world)

    # The occurrence ran once more, under its own key, with a higher fencing token; applied once
    run = world.ledger.get(key)
    assert run is not None and run.state == RunState.SUCCEEDED, run
    assert world.sink.effects[key] == 1
    tokens = [token for called, token in world.sink.calls if called == key]
    assert tokens_before == [] and len(tokens) == 1 and tokens[0] > 1
    assert run.epoch == tokens[0]
    # And a succeeded occurrence is never run again
    with pytest.raises(InvalidState, match="SUCCEEDED"):
        retry_run(world.service(), "tenant", job_id, DUE)


def test_a_retry_is_refused_for_another_tenant_a_running_or_a_waiting_occurrence(world: CrashableCore) -> None:
    job_id, key = failed_occurrence(world, RunState.DEAD)
    with pytest.raises(JobNotFound):
        retry_run(world.service(), "another-tenant", job_id, DUE)
    with pytest.raises(JobNotFound):
        retry_run(world.service(), "tenant", job_id, DUE + timedelta(minutes=1))
    assert world.ledger.get(key).state == RunState.DEAD

    # A retry that has not run yet is repeatable: the same pending state, its message sent again
    first = retry_run(world.service(), "tenant", job_id, DUE)
    second = retry_run(world.service(), "tenant", job_id, DUE)
    assert first.state == second.state == RunState.RETRY_WAIT
    assert len(world.queue.receive(10)) == 2
