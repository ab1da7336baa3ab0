"""The composition root: Settings become the core's configuration, and a mechanism is on only where the settings
ask for it and its store is there."""

from __future__ import annotations

from datetime import timedelta

from scheduler.adapters.memory import (
    FakeClock,
    ManualHeartbeats,
    RecordingMetrics,
)
from scheduler.composition import Configs, Stores, compose, memory_stores
from scheduler.core.runtime.ids import RANDOM_IDS
from scheduler.core.tenancy.fairness import Budget
from scheduler.settings import Settings, TenantBudgetSetting


def stores(*, full: bool) -> Stores:
    clock = FakeClock()
    memory = memory_stores(clock, 2)
    if not full:
        return Stores(memory.jobs, memory.timers, memory.ledger, memory.queue)
    return memory


def test_settings_become_the_cores_configuration() -> None:
    settings = Settings(
        shard_count=4,
        lookahead_seconds=120,
        lease_seconds=45,
        misfire_grace_seconds=30,
        dispatch_budget=500,
        backfill_wave_size=25,
        tenant_dispatch_rate=2,
        tenant_dispatch_burst=10,
        tenant_budgets={"big": TenantBudgetSetting(rate=20, concurrency=5)},
        completion_events_default=True,
    )

    configs = Configs.of(settings)

    assert (configs.sweep.shard_count, configs.sweep.lookahead, configs.sweep.dispatch_budget) == (
        4,
        timedelta(seconds=120),
        500,
    )
    assert configs.dispatch.lookahead == timedelta(seconds=120)
    assert configs.dispatch.misfire_grace == configs.execute.misfire_grace == timedelta(seconds=30)
    assert (configs.execute.lease, configs.execute.events_by_default) == (timedelta(seconds=45), True)
    assert configs.execute.heartbeat_fraction == 1 / 3  # the deployed heartbeat
    assert configs.backfill.wave_size == 25
    assert configs.fairness is not None
    assert (configs.fairness.of("anyone"), configs.fairness.of("big")) == (Budget(2, 10), Budget(20, 10))
    assert configs.concurrency is not None and configs.concurrency.of("big") == 5
    assert configs.forecast_lookback == timedelta(seconds=120 + 60 + 30)


def test_a_mechanism_is_on_where_the_settings_ask_and_its_store_is_there() -> None:
    asked = Settings(tenant_dispatch_rate=5, tenant_max_concurrency=2, completion_events=True)
    off = Settings(tenant_dispatch_rate=0, tenant_max_concurrency=0, completion_events=False)

    on = compose(asked, stores(full=True), FakeClock(), RANDOM_IDS, RecordingMetrics(), heartbeats=ManualHeartbeats())
    without_stores = compose(asked, stores(full=False), FakeClock(), RANDOM_IDS, RecordingMetrics())
    not_asked = compose(off, stores(full=True), FakeClock(), RANDOM_IDS, RecordingMetrics())

    assert on.dispatcher.admission is not None and on.gate is not None and on.outbox is not None
    assert on.backfill_runner() is not None and on.sweeper("s").backfills is not None
    for container in (without_stores, not_asked):
        assert container.dispatcher.admission is None and container.gate is None and container.outbox is None
    assert without_stores.backfill_runner() is None
    # The services share the container's wiring
    service, executor = on.job_service(), on.executor("w", {})
    assert service.dispatcher is on.dispatcher and service.ids is RANDOM_IDS
    assert on.resolution().outbox is on.outbox
    assert executor.gate is on.gate and executor.outbox is on.outbox


def test_bulk_actions_are_bounded_by_the_request_limit_and_the_running_operations() -> None:
    memory = memory_stores(FakeClock(), 2)
    bounded = compose(
        Settings(tenant_request_rate=3, bulk_max_running=4), memory, FakeClock(), RANDOM_IDS, RecordingMetrics()
    )
    unbounded = compose(
        Settings(tenant_request_rate=0, bulk_max_running=0), memory, FakeClock(), RANDOM_IDS, RecordingMetrics()
    )

    service = bounded.bulk_service()
    assert service.requests is not None and service.requests.config.limit("t") == 30
    assert service.slots is memory.bulk_slots and service.max_running == 4
    assert service.slots is not memory.tenant_slots  # running operations are counted apart from executions
    free = unbounded.bulk_service()
    assert free.requests is None and free.max_running == 0
    assert Settings().bulk_max_running == 2
