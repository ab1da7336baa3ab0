"""Per-tenant fairness: dispatch budgets (rate and burst, a GCRA token bucket per tenant kept with conditional
writes) delay a tenant over its budget - never drop - and keep its burst from raising another tenant's lateness
beyond a stated bound. Catch-up (run_all) and backfill waves go through the same budgets."""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from scheduler.core.model.timefmt import rfc3339, to_ms
from scheduler.core.ports import Dispatch
from scheduler.core.tenancy.fairness import (
    CLOCK_SKEW,
    MAX_RELEASE_DELAY,
    Budget,
    FairnessConfig,
    TenantAdmission,
    reserve,
)
from tests.unit.fixtures import T0, FakeTarget, MemoryCore, at

SECOND = timedelta(seconds=1)


# -- the budget calendar ------------------------------------------------------------------------------------


def offsets(releases: list, origin) -> list[float]:
    return [(r - origin).total_seconds() for r in releases]


def test_a_burst_goes_at_once_and_the_rest_a_window_at_a_time() -> None:
    budget = Budget(rate=2, burst=4)  # windows of 2 s holding 4 each
    assert (budget.window_ms, budget.capacity) == (2000, 4)

    releases, calendar = reserve(None, [T0] * 10, budget, T0, latest=T0 + timedelta(hours=1))

    assert offsets(releases, T0) == [0, 0, 0, 0, 2, 2, 2, 2, 4, 4]
    assert calendar.version == 1 and sum(calendar.booked.values()) == 10


def test_occurrences_within_budget_are_released_at_their_own_time_whatever_the_order_they_come_in() -> None:
    # The look-ahead books occurrences minutes ahead first; an occurrence due now is not pushed behind them
    budget = Budget(rate=1, burst=2)
    later = [T0 + timedelta(minutes=5)] * 2
    _, calendar = reserve(None, later, budget, T0, latest=T0 + timedelta(minutes=14))

    now_releases, calendar = reserve(calendar, [T0, T0], budget, T0, latest=T0 + timedelta(minutes=14))

    assert now_releases == [T0, T0]
    # and the window at T0+5min is full: a third occurrence there goes to the next window
    third, _ = reserve(calendar, [T0 + timedelta(minutes=5)], budget, T0, latest=T0 + timedelta(minutes=14))
    assert offsets(third, T0 + timedelta(minutes=5)) == [2]


def test_windows_in_the_past_are_forgotten_and_a_changed_budget_starts_afresh() -> None:
    budget = Budget(rate=1, burst=2)
    _, calendar = reserve(None, [T0] * 2, budget, T0, latest=T0 + timedelta(hours=1))

    # Kept while a sweeper whose clock runs behind may still book into them (the clock-skew allowance), then dropped
    soon = T0 + CLOCK_SKEW - timedelta(seconds=1)
    assert reserve(calendar, [soon], budget, soon, latest=soon + timedelta(hours=1))[1].booked == calendar.booked | {
        to_ms(soon) // budget.window_ms: 1
    }
    later = T0 + CLOCK_SKEW + timedelta(seconds=10)
    releases, pruned = reserve(calendar, [later, later], budget, later, latest=later + timedelta(hours=1))
    assert releases == [later, later]
    assert all(window * budget.window_ms >= to_ms(later - CLOCK_SKEW) - budget.window_ms for window in pruned.booked)

    bigger = Budget(rate=1, burst=5)
    assert reserve(calendar, [T0] * 5, bigger, T0, latest=T0 + timedelta(hours=1))[0] == [T0] * 5


def test_nothing_is_released_past_the_latest_instant() -> None:
    releases, _ = reserve(None, [T0] * 10, Budget(rate=1, burst=1), T0, latest=T0 + timedelta(seconds=3.5))
    assert len(releases) == 4


def test_a_small_burst_with_a_high_rate_uses_one_second_windows() -> None:
    budget = Budget(rate=100, burst=10)
    assert (budget.window_ms, budget.capacity) == (1000, 100)


def test_the_calendar_is_kept_with_conditional_writes(world: MemoryCore) -> None:
    admission = TenantAdmission(world.tenant_budgets, world.clock, FairnessConfig(Budget(1, 5)), world.metrics)
    d = Dispatch("job-1", "acme", world.now(), world.now(), 1)

    # Given another sweeper fills the tenant's current windows between our read and our write (once)
    real_save = world.tenant_budgets.save
    raced = []

    def save(tenant, calendar, expected, expires):
        if not raced:
            raced.append(True)
            _, theirs = reserve(None, [world.now()] * 30, Budget(1, 5), world.now(), world.now() + timedelta(hours=1))
            assert real_save(tenant, theirs, expected, expires)
        return real_save(tenant, calendar, expected, expires)

    world.tenant_budgets.save = save  # type: ignore[method-assign]

    admitted = admission.admit([d])

    # Then we read again and our release comes after the windows it filled (30 releases, 5 per 5 s window)
    [sent] = admitted.sent
    assert sent.not_before == world.now() + timedelta(seconds=30)


class CountingBudgets:
    """The world's budget store, counting reads and refused saves."""

    def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
        self.inner, self.loads, self.refused = inner, 0, 0

    def load(self, tenant: str):  # type: ignore[no-untyped-def]
        self.loads += 1
        return self.inner.load(tenant)

    def save(self, *args, **kwargs) -> bool:  # type: ignore[no-untyped-def]
        saved = self.inner.save(*args, **kwargs)
        self.refused += not saved
        return saved


def _due(world: MemoryCore, job: str, tenant: str = "acme") -> Dispatch:
    return Dispatch(job, tenant, world.now(), world.now(), 1)


def test_every_booking_reads_the_tenants_calendar_first_and_books_each_release_once(world: MemoryCore) -> None:
    # Given a sweeper's admission, the only one booking the tenant
    store = CountingBudgets(world.tenant_budgets)
    budget = Budget(1, 2)  # 2 a 2 s window
    admission = TenantAdmission(store, world.clock, FairnessConfig(budget), world.metrics)

    # When it books six pages of one occurrence each, a second apart
    sent = []
    for page in range(6):
        sent += admission.admit([_due(world, f"job-{page}")]).sent
        world.clock.advance(1)

    # Then each page read the calendar (strongly consistent) before its conditional save, and no save was refused
    assert (store.loads, store.refused) == (6, 0)
    # and each was released at its own time (within budget), the calendar holding every release, none over a
    # window's room
    assert [d.send_at for d in sent] == [d.fire_at for d in sent] and len(sent) == 6
    stored = world.tenant_budgets.load("acme")
    assert stored is not None and stored.version == 6 and sum(stored.booked.values()) == 6
    assert all(count <= budget.capacity for count in stored.booked.values())


def test_buckets_swept_at_once_book_one_tenant_in_turn_and_none_is_deferred_for_contention(world: MemoryCore) -> None:
    # Given a budget store with a network's latency (a read and a conditional write take 20 ms each), and one
    # tenant's occurrences in eight pages that eight threads admit at once (a sweep's buckets), well within budget
    admission = TenantAdmission(world.tenant_budgets, world.clock, FairnessConfig(Budget(100, 3000)), world.metrics)
    real_load, real_save = world.tenant_budgets.load, world.tenant_budgets.save

    def slow_load(tenant: str):  # type: ignore[no-untyped-def]
        time.sleep(0.02)
        return real_load(tenant)

    def slow_save(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(0.02)
        return real_save(*args, **kwargs)

    world.tenant_budgets.load = slow_load  # type: ignore[method-assign]
    world.tenant_budgets.save = slow_save  # type: ignore[method-assign]
    pages = [[Dispatch(f"job-{p}-{i}", "acme", world.now(), world.now(), 1) for i in range(6)] for p in range(8)]

    with ThreadPoolExecutor(8) as pool:
        admitted = list(pool.map(admission.admit, pages))

    # Then every occurrence is released now: none lost its booking to a thread of the same sweep and was deferred
    assert [len(a.sent) for a in admitted] == [6] * 8
    assert not any(a.deferred for a in admitted)
    assert all(d.send_at == world.now() for a in admitted for d in a.sent)


# -- admission in the dispatch path --------------------------------------------------------------------------


def fair_world(rate: float = 10, burst: int = 20, **kw) -> MemoryCore:
    return MemoryCore.build(fairness=FairnessConfig(Budget(rate, burst)), max_active_jobs=100_000, **kw)


def burst(world: MemoryCore, tenant: str, count: int, when) -> None:
    for _ in range(count):
        world.create({"type": "once", "at": rfc3339(when)}, tenant=tenant)


def test_a_tenant_within_its_budget_is_released_at_its_fire_time() -> None:
    world = fair_world()
    burst(world, "quiet", 5, T0 + timedelta(minutes=2))

    world.sweep()

    sent = world.queue.history
    assert len(sent) == 5
    assert {s.visible_at for s in sent} == {T0 + timedelta(minutes=2)}
    assert all(s.dispatch.not_before is None for s in sent)


def test_a_tenant_over_its_budget_is_delayed_at_its_rate_and_others_are_not() -> None:
    world = fair_world(rate=10, burst=20)
    fire = T0 + timedelta(minutes=2)
    burst(world, "noisy", 100, fire)
    burst(world, "quiet", 3, fire)

    world.sweep()

    visible = {"noisy": [], "quiet": []}
    for sent in world.queue.history:
        visible[sent.dispatch.tenant].append((sent.visible_at - fire).total_seconds())
    assert visible["quiet"] == [0, 0, 0]
    noisy = sorted(visible["noisy"])
    assert noisy[:20] == [0] * 20  # the burst
    assert noisy[-1] == pytest.approx((100 - 20) / 10, abs=1)  # then 10 per second: never dropped, delayed
    assert world.metrics.counts["TenantThrottledSeconds"] > 0


def test_a_burst_beyond_what_sqs_can_delay_waits_in_later_buckets_and_all_of_it_runs_once() -> None:
    # Given a tenant whose burst needs more than SQS's 15 minutes of delay at its rate
    world = fair_world(rate=1, burst=10)
    fire = T0 + timedelta(minutes=2)
    burst(world, "noisy", 1200, fire)

    # When sweeps run for long enough, and workers take everything
    target = FakeTarget(world.clock)
    executor = world.executor(target)
    report = world.sweep()
    assert report.dispatched < 1200
    assert world.metrics.counts["TenantDeferred"] > 0
    deferred = [t for t in world.pending_timers() if t.defer_until is not None]
    assert deferred and min(t.defer_until for t in deferred) >= T0 + MAX_RELEASE_DELAY
    world.run(T0 + timedelta(minutes=25), executor)

    # Then every occurrence ran exactly once, none before its fire time, paced at the tenant's rate
    counts = Counter(c.key for c in target.calls)
    assert len(counts) == 1200 and set(counts.values()) == {1}
    starts = sorted(c.at for c in target.calls)
    assert starts[0] >= fire
    assert (starts[-1] - fire).total_seconds() >= (1200 - 10) / 1 - 60


def test_run_all_catch_up_goes_through_the_same_budget() -> None:
    # Given a per-minute job with run_all, and a sweeper that was down for two hours
    world = fair_world(rate=0.5, burst=5)
    job = world.create({"type": "cron", "expression": "* * * * *"}, misfire_policy="run_all")
    world.sweep()
    before = len(world.queue.history)
    world.set_time(T0 + timedelta(hours=2))

    world.sweep()

    # Then the missed occurrences go out at 0.5/s after a burst of 5, not all at once
    caught_up = sorted(s.visible_at for s in world.queue.history[before:] if s.dispatch.job_id == job.job_id)
    missed = [v for v in caught_up if v < world.now() + timedelta(minutes=10)]
    assert len(missed) >= 100
    assert caught_up[4] == world.now() and caught_up[5] > world.now()
    assert (caught_up[99] - world.now()).total_seconds() == pytest.approx((100 - 5) * 2, abs=2)


def test_backfill_waves_go_through_the_same_budget_and_keep_what_is_held_back() -> None:
    world = fair_world(rate=0.1, burst=10)  # 10 now, then one every 10 s: 84 fit SQS's delay window
    job = world.create({"type": "cron", "expression": "* * * * *"})
    world.set_time(at("2026-01-05T12:00"))
    backfill = world.backfill.start("acme", job.job_id, at("2026-01-05T10:00"), at("2026-01-05T10:50"))  # 50 of them
    world.backfill_config = type(world.backfill_config)(max_occurrences=1000, wave_size=200)

    world.sweep()

    progress = world.backfills.get(backfill.backfill_id)
    assert progress is not None
    sent = [s for s in world.queue.history if s.dispatch.kind == "backfill"]
    assert progress.dispatched == len(sent) == 50  # all fit in the window, spread at the rate
    assert max(s.visible_at for s in sent) - world.now() == timedelta(seconds=(50 - 10) * 10)

    # A bigger one leaves what does not fit in the backfill for the next waves
    big = world.backfill.start("acme", job.job_id, at("2026-01-05T08:00"), at("2026-01-05T09:40"))
    world.sweep()
    first_wave = world.backfills.get(big.backfill_id)
    assert first_wave is not None and 0 < first_wave.dispatched < 100
    assert first_wave.remaining == 100 - first_wave.dispatched


# -- the bound: a tenant bursting 20x its budget does not make another tenant late ---------------------------

CAPACITY = 100  # occurrences the workers start per second
NOISY = Budget(rate=10, burst=100)  # budget of every tenant
BURST = 20 * (NOISY.burst + 100 * NOISY.rate // 10)  # 20x what the budget allows in its first 10 s: 4,000


def quiet_lateness(fairness: FairnessConfig | None) -> float:
    """The noisy tenant releases BURST occurrences at 09:10:00; the quiet tenant has one every second from
    09:10:00 to 09:11:00. Workers start CAPACITY occurrences per second, oldest visible first; the sweeper runs
    every minute (as on AWS). Returns the quiet tenant's worst start lateness, in seconds."""
    world = MemoryCore.build(fairness=fairness, max_active_jobs=100_000)
    fire = T0 + timedelta(minutes=10)
    burst(world, "noisy", BURST, fire)
    for s in range(61):
        world.create({"type": "once", "at": rfc3339(fire + timedelta(seconds=s))}, tenant="quiet")
    target = FakeTarget(world.clock)
    executor = world.executor(target)
    world.set_time(fire - timedelta(minutes=6))
    while world.now() < fire + timedelta(minutes=2):
        if world.now().second == 0:
            world.sweep()
        started = 0
        while started < CAPACITY and (batch := world.queue.receive(min(10, CAPACITY - started))):
            for message in batch:
                world.handle(executor, message)
            started += len(batch)
        world.clock.advance(1)
    quiet_jobs = tuple(f"{j.job_id}:" for j in world.jobs.jobs.values() if j.tenant == "quiet")
    quiet = [c for c in target.calls if c.key.startswith(quiet_jobs)]
    assert len({c.key for c in quiet}) == 61
    return max((c.at - c.scheduled_for).total_seconds() for c in quiet)


def test_a_tenant_bursting_20x_its_budget_does_not_make_another_tenant_late() -> None:
    # The bound (docs/fairness.md): budgets let at most 2 windows' capacity + rate * t of a tenant through in any
    # t seconds, so with workers at least as fast as the rates granted, another tenant's start lateness is at most
    # twice the noisy tenant's window capacity plus its own (1 here) over the workers' throughput, plus one poll
    # (a second in this simulation): (2 * 100 + 1) / 100 + 1 = 3.01 s
    bound = (2 * NOISY.capacity + 1) / CAPACITY + 1

    with_budgets = quiet_lateness(FairnessConfig(NOISY))
    without = quiet_lateness(None)

    assert with_budgets <= bound
    # and the budgets are what makes the difference: without them the quiet tenant waits behind the burst
    assert without >= BURST / CAPACITY / 2
    assert without > 10 * with_budgets
