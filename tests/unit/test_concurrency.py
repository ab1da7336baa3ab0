"""Per-tenant execution budgets (scheduler.core.tenancy.concurrency): at most `limit` occurrences of one tenant run at
once. A tenant at its limit is delayed - its message comes back later, re-sent before maxReceiveCount could dead-letter
it - never dropped; a slow tenant's burst does not make another tenant late beyond a stated bound."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest

from scheduler.core.model.job import RunState
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch, TargetCall
from scheduler.core.sweep.dispatch import timer_for
from scheduler.core.tenancy.concurrency import MAX_THROTTLE_WAIT, RESEND_AFTER, ConcurrencyConfig, throttle_wait
from tests.unit.fixtures import LEASE, T0, TENANT, FakeTarget, MemoryCore, StubMessage, ambiguous, permanent

LIMITED = ConcurrencyConfig(default=2, overrides={"big": 5, "free": 0})


def limited_world() -> MemoryCore:
    return MemoryCore.build(concurrency=LIMITED, max_active_jobs=10_000)


def due_now(world: MemoryCore, count: int, tenant: str = TENANT, **fields: object) -> list[Dispatch]:
    """`count` one-shot jobs of `tenant`, due in 10 s; moves the clock there and returns their dispatches (as the
    sweeper would send them)."""
    fire = world.now() + timedelta(seconds=10)
    jobs = [world.create({"type": "once", "at": rfc3339(fire)}, tenant=tenant, **fields) for _ in range(count)]
    world.set_time(fire)
    return [Dispatch.of(timer_for(job, fire)) for job in jobs]


# -- the config and the wait --------------------------------------------------------------------------------


def test_limits_per_tenant_with_a_default_and_zero_for_unlimited() -> None:
    assert (LIMITED.of("acme"), LIMITED.of("big"), LIMITED.of("free")) == (2, 5, 0)


def test_the_throttle_wait_doubles_per_receive_up_to_its_cap_with_jitter_fixed_by_the_key() -> None:
    waits = [throttle_wait(n, "job:2026-01-05T09:00:00Z") for n in range(1, 9)]
    for n, wait in enumerate(waits, start=1):
        base = min(MAX_THROTTLE_WAIT, 2.0 ** (n - 1))
        assert 0.75 * base <= wait <= 1.25 * base
    assert waits == [throttle_wait(n, "job:2026-01-05T09:00:00Z") for n in range(1, 9)]
    assert throttle_wait(3, "a") != throttle_wait(3, "b")


# -- the gate in the executor -------------------------------------------------------------------------------


def test_a_tenant_at_its_limit_waits_and_the_ledger_is_not_touched() -> None:
    world = limited_world()
    first, second, third = due_now(world, 3)
    outcomes: dict[str, object] = {}

    def run_others_while_running(call: TargetCall) -> str:
        # While `first` runs (holding one of two slots), `second` takes the other, and while both run `third`
        # finds none.
        if call.occurrence_key == first.key:
            outcomes["second"] = executor.execute(second, StubMessage())
        elif call.occurrence_key == second.key:
            outcomes["third"] = executor.execute(third, StubMessage())
        return "ok"

    executor = world.executor(FakeTarget(world.clock, run_others_while_running))
    result = executor.execute(first, StubMessage())

    assert result.ack and outcomes["second"].ack  # type: ignore[attr-defined]
    throttled = outcomes["third"]
    assert (throttled.ack, throttled.reason) == (False, "throttled")  # type: ignore[attr-defined]
    assert 1 <= throttled.hide_seconds <= 2  # type: ignore[attr-defined]
    assert world.ledger.get(third.key) is None  # never claimed: no attempt spent, no epoch taken
    assert world.metrics.counts["TenantConcurrencyThrottled"] == 1
    assert world.metrics.counts["TenantConcurrencyDelaySeconds"] > 0
    # Every slot is free again once the attempts are over, and the throttled one runs when it comes back
    assert world.tenant_slots.live(TENANT, world.now()) == {}
    assert world.executor().execute(third, StubMessage(receive_count=2)).ack
    run = world.ledger.get(third.key)
    assert run is not None and run.state == RunState.SUCCEEDED


def test_other_tenants_and_unlimited_tenants_are_not_held_back() -> None:
    world = limited_world()
    mine = due_now(world, 2)
    world.set_time(T0)
    theirs = due_now(world, 1, tenant="other")
    world.set_time(T0)
    free = due_now(world, 3, tenant="free")
    seen: list[str] = []

    def nested(call: TargetCall) -> str:
        if call.occurrence_key == mine[0].key:
            # acme holds both its slots now; another tenant, and a tenant without a limit, still run
            for d in [mine[1], *theirs, *free]:
                seen.append(world.executor().execute(d, StubMessage()).reason)
        return "ok"

    world.executor(FakeTarget(world.clock, nested)).execute(mine[0], StubMessage())
    assert seen == ["recorded"] * 5


def test_a_throttled_occurrence_is_sent_again_before_max_receive_count_could_dead_letter_it() -> None:
    world = limited_world()
    blockers = due_now(world, 2)
    world.set_time(T0)
    [waiting] = due_now(world, 1)
    for n in range(len(blockers)):  # two attempts on other workers hold both slots
        slot = world.tenant_slots.acquire(TENANT, 2, f"other-worker-{n}", world.now(), world.now() + timedelta(hours=1))
        assert slot is not None

    hidden = world.executor().execute(waiting, StubMessage(receive_count=RESEND_AFTER - 1))
    resent = world.executor().execute(waiting, StubMessage(receive_count=RESEND_AFTER))

    assert (hidden.ack, hidden.reason) == (False, "throttled")
    assert (resent.ack, resent.reason) == (True, "throttled: sent again")
    [again] = [s for s in world.queue.history if s.dispatch.key == waiting.key]
    assert again.dispatch.not_before is not None and again.dispatch.not_before > world.now()
    assert again.dispatch.fire_at == waiting.fire_at  # the same occurrence: the same key, the same fire time


@pytest.mark.parametrize(
    "script",
    [pytest.param("ok", id="succeeded"), pytest.param(permanent(), id="dead"), pytest.param(ambiguous(), id="retry")],
)
def test_the_slot_is_given_back_whatever_the_attempt_ends_with(script: object) -> None:
    world = limited_world()
    [dispatch] = due_now(world, 1, retry={"max_attempts": 3})
    held: list[dict[int, str]] = []

    def observe(call: TargetCall) -> str:
        held.append(world.tenant_slots.live(TENANT, world.now()))
        if isinstance(script, BaseException):
            raise script
        return str(script)

    world.executor(FakeTarget(world.clock, observe)).execute(dispatch, StubMessage())

    assert len(held) == 1 and len(held[0]) == 1  # held while the target ran
    assert world.tenant_slots.live(TENANT, world.now()) == {}


def test_a_target_that_raises_gives_its_slot_back_and_is_ambiguous() -> None:
    world = limited_world()
    [dispatch] = due_now(world, 1, retry={"max_attempts": 3})

    outcome = world.executor(FakeTarget(world.clock, RuntimeError("boom"))).execute(dispatch, StubMessage())

    assert outcome.reason == "retry"
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.last_error is not None and "ambiguous: RuntimeError: boom" in run.last_error
    assert world.tenant_slots.live(TENANT, world.now()) == {}


def test_an_at_most_once_handler_that_raises_is_reconciled_not_retried() -> None:
    # A handler may have acted before it raised: for an at-most-once job that is an unknown outcome.
    world = MemoryCore.build()
    _, dispatch = world.due(delivery="at_most_once")

    outcome = world.executor(FakeTarget(world.clock, RuntimeError("after the charge"))).execute(dispatch, StubMessage())

    assert outcome.ack
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.RECONCILING


def test_the_heartbeat_extends_the_slot_with_the_lease() -> None:
    world = limited_world()
    [dispatch] = due_now(world, 1)
    leases: list[datetime] = []

    def long_running(call: TargetCall) -> str:
        world.clock.advance(LEASE.total_seconds() - 5)
        call.heartbeat()
        world.clock.advance(LEASE.total_seconds() - 5)  # past the first lease: the slot is still ours
        [(_, until)] = [v for (t, _), v in world.tenant_slots.held.items() if t == TENANT]
        leases.append(until)
        assert len(world.tenant_slots.live(TENANT, world.now())) == 1
        return "ok"

    world.executor(FakeTarget(world.clock, long_running)).execute(dispatch, StubMessage())
    assert leases == [T0 + timedelta(seconds=10) + (LEASE - timedelta(seconds=5)) + LEASE]


def test_a_worker_that_dies_holding_a_slot_frees_it_when_its_lease_ends() -> None:
    world = limited_world()
    dispatches = due_now(world, 3)
    for n in range(2):  # two attempts crashed while holding the slots (their leases: 60 s)
        world.tenant_slots.acquire(TENANT, 2, f"dead-{n}", world.now(), world.now() + timedelta(seconds=60))

    assert world.executor().execute(dispatches[0], StubMessage()).reason == "throttled"
    world.clock.advance(61)
    assert world.executor().execute(dispatches[0], StubMessage()).reason == "recorded"


# -- the bound: a slow tenant bursting 20x its concurrency does not make another tenant late -----------------

WORKERS = 4  # executions the workers run at once
NOISY_LIMIT = 2  # the noisy tenant's execution budget
NOISY_BURST = 20 * NOISY_LIMIT  # 40 occurrences at one instant
NOISY_SECONDS = 30  # each of them runs this long
QUIET = 60  # the quiet tenant: one quick occurrence a second


class Ticks:
    """Lock-step time for worker threads: the clock moves a second only when every worker is parked (idle, or in
    a target waiting for its end time), so executions overlap as they would on real workers."""

    def __init__(self, world: MemoryCore, workers: int) -> None:
        self.world = world
        self.workers = workers
        self.cv = threading.Condition()
        self.parked = 0
        self.generation = 0
        self.stopped = False

    def park(self) -> None:
        """Wait for the next tick."""
        with self.cv:
            self.parked += 1
            self.cv.notify_all()
            generation = self.generation
            self.cv.wait_for(lambda: self.generation != generation)

    def sleep_until(self, instant: datetime) -> None:
        while self.world.now() < instant and not self.stopped:
            self.park()

    def tick(self) -> None:
        with self.cv:
            assert self.cv.wait_for(lambda: self.parked == self.workers, timeout=30), "a worker is stuck"
            self.world.clock.advance(1)
            self.parked = 0
            self.generation += 1
            self.cv.notify_all()

    def stop(self) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.parked == self.workers, timeout=30)
            self.stopped = True
            self.parked = 0
            self.generation += 1
            self.cv.notify_all()


def quiet_lateness_behind_a_slow_burst(concurrency: ConcurrencyConfig | None) -> tuple[float, MemoryCore, FakeTarget]:
    """The noisy tenant releases NOISY_BURST occurrences that each run NOISY_SECONDS at 09:10:00; the quiet tenant
    has a one-second occurrence every second from then for a minute. WORKERS worker threads take one message at a
    time. Returns the quiet tenant's worst start lateness (s), the world and the target."""
    world = MemoryCore.build(concurrency=concurrency, max_active_jobs=10_000)
    fire = T0 + timedelta(minutes=10)
    for _ in range(NOISY_BURST):
        world.create({"type": "once", "at": rfc3339(fire)}, tenant="noisy")
    quiet_ids = {
        world.create({"type": "once", "at": rfc3339(fire + timedelta(seconds=s))}, tenant="quiet").job_id
        for s in range(QUIET)
    }
    ticks = Ticks(world, WORKERS)

    def work(call: TargetCall) -> str:
        if call.job.tenant == "noisy":
            ticks.sleep_until(world.now() + timedelta(seconds=NOISY_SECONDS))
        return "ok"

    target = FakeTarget(world.clock, work)
    failures: list[BaseException] = []

    def worker(n: int) -> None:
        executor = world.executor(target, worker_id=f"worker-{n}", lease=timedelta(seconds=120))
        try:
            while not ticks.stopped:
                batch = world.queue.receive(1)
                if batch:
                    world.handle(executor, batch[0])
                else:
                    ticks.park()
        except BaseException as exc:  # surfaced by the main thread
            failures.append(exc)
            with ticks.cv:
                ticks.workers -= 1
                ticks.cv.notify_all()

    world.set_time(fire - timedelta(minutes=6))
    world.sweep()
    threads = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(WORKERS)]
    for thread in threads:
        thread.start()
    end = fire + timedelta(seconds=NOISY_BURST * NOISY_SECONDS // min(WORKERS, NOISY_LIMIT) + 120)
    while world.now() < end and not failures:
        if world.now().second == 0:
            with ticks.cv:  # sweep while the workers are parked
                ticks.cv.wait_for(lambda: ticks.parked == ticks.workers, timeout=30)
                world.sweep()
        ticks.tick()
    ticks.stop()
    for thread in threads:
        thread.join(timeout=30)
    assert not failures, failures
    quiet = [c for c in target.calls if c.key.split(":", 1)[0] in quiet_ids]
    assert len({c.key for c in quiet}) == QUIET
    return max((c.at - c.scheduled_for).total_seconds() for c in quiet), world, target


def test_a_slow_tenant_bursting_20x_its_concurrency_does_not_make_another_tenant_late() -> None:
    # The bound (docs/fairness.md): while the limits of the tenants other than the quiet one add up to fewer
    # than the workers' concurrency, a quiet occurrence finds a worker that is free or only passing over
    # throttled messages: its start lateness is at most the poll interval (a second here), plus the time the
    # workers spend passing over throttled messages (no time in this simulation).
    bound = 1.0

    with_budget, world, target = quiet_lateness_behind_a_slow_burst(ConcurrencyConfig(default=NOISY_LIMIT))
    without, _, _ = quiet_lateness_behind_a_slow_burst(None)

    assert with_budget <= bound
    # and the budget is what makes the difference: without it the quiet tenant waits behind the burst
    assert without >= NOISY_SECONDS
    # Delayed, never dropped: every noisy occurrence ran exactly once, none was dead-lettered
    started = [c.key for c in target.calls]
    assert len(started) == len(set(started)) == NOISY_BURST + QUIET
    runs = [world.ledger.get(key) for key in started]
    assert all(r is not None and r.state == RunState.SUCCEEDED for r in runs)
    assert world.queue.dead == []
    assert world.metrics.counts["TenantConcurrencyThrottled"] > 0


def test_a_throttled_occurrence_whose_send_fails_keeps_its_message() -> None:
    world = limited_world()
    [waiting] = due_now(world, 1)
    for n in range(2):
        world.tenant_slots.acquire(TENANT, 2, f"other-{n}", world.now(), world.now() + timedelta(hours=1))

    def refuse(dispatches: object, now: object) -> None:
        raise RuntimeError("SQS unavailable")

    world.queue.send = refuse  # type: ignore[method-assign]
    outcome = world.executor().execute(waiting, StubMessage(receive_count=RESEND_AFTER))

    assert (outcome.ack, outcome.reason) == (False, "throttled")  # kept: the next receive tries again


def test_a_slot_store_failure_during_a_heartbeat_does_not_fail_the_attempt() -> None:
    world = limited_world()
    [dispatch] = due_now(world, 1)

    def broken_extend(*args: object) -> bool:
        raise RuntimeError("DynamoDB throttled")

    world.tenant_slots.extend = broken_extend  # type: ignore[method-assign]

    def beating(call: TargetCall) -> str:
        call.heartbeat()
        return "ok"

    outcome = world.executor(FakeTarget(world.clock, beating)).execute(dispatch, StubMessage())

    assert outcome.ack
    run = world.ledger.get(dispatch.key)
    assert run is not None and run.state == RunState.SUCCEEDED
    assert world.tenant_slots.live(TENANT, world.now()) == {}
