"""Simulation (STYLE.md test layer 6): seeded fault schedules against the real protocol code on the in-memory
adapters, with the invariants of docs/design.md §6 checked after every run.

A failing seed prints its report: the violated invariant, the last events, and the command that replays it.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.composition import Configs
from scheduler.core.sweep.dispatch import DispatchConfig
from scheduler.settings import Settings
from scheduler_sim import FaultProfile, SimConfig, SimResult, Simulation, format_failure, run_seed, run_seeds
from scheduler_sim.faults import Exposure
from scheduler_sim.workload import PlannedCall, Workload

#: About 14 ms of CPU per seed: two processes keep the run well under half a minute on a 2-core machine.
SEEDS = 2000
#: The whole fault model at the deployed settings: every run here uses it, the broken variants' included.
PRODUCTION = Exposure()
PROCESSES = 2
#: Seeds run again with three concurrent sweepers each (the runs above draw 1-3 per seed): about 1.4 times a
#: seed's CPU.
SWEEPER_SEEDS = 400


def _reports(failed: list[SimResult], exposure: Exposure | None, sweepers: int | None = None) -> str:
    return "\n\n".join(format_failure(result, exposure=exposure, events=40, sweepers=sweepers) for result in failed[:3])


def test_thousands_of_seeds_hold_every_invariant_under_the_full_fault_model_at_production_settings() -> None:
    # Given the whole fault model (faults between a chain advance and its send included) and the production seal
    # margin (DispatchConfig's 30 s, not a softened one)
    production = Exposure()
    assert production.seal_margin == DispatchConfig(timedelta(0), timedelta(0), timedelta(0)).seal_margin

    # When thousands of seeds run
    summary = run_seeds(range(SEEDS), exposure=production, processes=PROCESSES)

    # Then every run upholds every invariant
    assert not summary.failed, _reports(summary.failed, production)
    assert summary.passed == SEEDS


def test_more_seeds_hold_every_invariant_at_production_settings_too() -> None:
    # A second seed range, also under the whole fault model (`--avoid-known-bugs` stays for replays of old
    # reports only: CI proves the production settings)
    summary = run_seeds(range(SEEDS, SEEDS + 200), exposure=PRODUCTION, processes=PROCESSES)
    assert not summary.failed, _reports(summary.failed, PRODUCTION)


def test_seeds_with_three_sweepers_each_hold_every_invariant() -> None:
    # Given three sweepers in every run, sharing the buckets through their claims under the whole fault model
    summary = run_seeds(range(SWEEPER_SEEDS), exposure=PRODUCTION, processes=PROCESSES, sweepers=3)

    # Then every run upholds every invariant, the watermark's (14) included
    assert not summary.failed, _reports(summary.failed, PRODUCTION, sweepers=3)
    assert summary.passed == SWEEPER_SEEDS


def test_choosing_the_sweepers_changes_how_many_run_and_nothing_else() -> None:
    for seed in range(4):
        # Given a seed and the sweepers it draws itself
        drawn = len(Simulation(seed).sweepers)

        # When it runs with that many chosen, its trace is the seed's own, event for event
        assert run_seed(seed, sweepers=drawn, trace_calls=True).events == run_seed(seed, trace_calls=True).events

    # And with three chosen, three sweepers run whatever the seed draws
    assert [s.name for s in Simulation(0, config=SimConfig(sweepers=3)).sweepers] == [
        "sweeper-1",
        "sweeper-2",
        "sweeper-3",
    ]


def test_a_watermark_that_follows_the_first_finisher_is_caught_with_three_sweepers() -> None:
    # Given a sweep that counts a bucket another sweeper holds as done (the first invocation to finish moves the
    # watermark past the minute), with three sweepers in every run
    def violated(seed: int, invariant: int, symptom: str) -> bool:
        result = run_seed(seed, variant="watermark-first-finisher", exposure=PRODUCTION, sweepers=3)
        return any(v.invariant == invariant and symptom in v.message for v in result.violations)

    # When it runs seeds until one shows the watermark passing an unfinished bucket, and one loses an occurrence
    passed = next((seed for seed in range(100) if violated(seed, 14, "moved the watermark to")), None)
    lost = next((seed for seed in range(100) if violated(seed, 1, "will never be dispatched")), None)

    # Then the simulator reports both, and the real protocol passes those very seeds
    assert passed is not None, "no seed out of 100 showed the watermark passing a bucket that is not done"
    assert lost is not None, "no seed out of 100 showed an occurrence lost behind the watermark"
    for seed in {passed, lost}:
        assert run_seed(seed, exposure=PRODUCTION, sweepers=3).ok


#: A profile that often freezes workers inside the target while others take over: where fencing matters.
PAUSES = FaultProfile(duplicate=0.2, target_pause=0.3, target_retryable=0.1)
#: Workers (and everyone else) dying at port calls, often in the middle of a batch: where bounded recovery matters.
CRASHES = FaultProfile(crash=0.03)
#: Slow targets while other workers take messages: one tenant's target calls overlap, where its execution budget binds.
SLOW = FaultProfile(target_slow=0.6)
#: Throttled port calls (the event bus's PutEvents included): where a publish fails and the outbox must keep the event.
THROTTLED = FaultProfile(throttle=0.05)
#: Actors paused at port calls while others run: where two sweepers book one tenant's budget calendar at once.
PREEMPT = FaultProfile(preempt=0.2)


@pytest.mark.parametrize(
    ("variant", "profile", "invariant", "symptom"),
    [
        # A stale worker's completion accepted by the ledger.
        ("unfenced-finish", PAUSES, 3, "from epoch"),
        # A random key per attempt: a duplicate delivery takes effect twice at the target.
        ("random-key", None, 2, "took effect"),
        # The sweeper completes one-shot jobs but its checkpoint drops their quota releases.
        ("forgetful-checkpoint", None, 7, "the counter says"),
        # A bucket sweep releases the quota of jobs another path completed (and released) too.
        ("release-on-every-replay", None, 7, "the counter says"),
        # Every page's checkpoint marks its bucket done, not only the last page's: the rest of the bucket is lost.
        ("finish-at-every-page", None, 1, "never"),
        # A sweep that counts a minute's buckets done without looking: the watermark passes an unfinished one.
        ("done-without-waiting", CRASHES, 1, "never"),
        # A tenant's execution slot taken whoever holds it: more of its occurrences run at once than its limit.
        ("overbooked-slots", SLOW, 9, "were running, limit"),
        # A flow-control key's slot taken whoever holds it: more calls to its destination at once than its parallelism.
        ("overbooked-flow-slots", SLOW, 15, "were running, parallelism"),
        # The tenant admission drops what its dispatch budget holds back past SQS's horizon: a burst's jobs never run.
        ("drop-deferred", None, 5, "never ran"),
        # The budget calendar saved without its version condition: racing bookings overwrite, a window overflows.
        ("unconditional-budget-save", PREEMPT, 13, "releases in the"),
        # The outbox cleared before its events are published: a refused publish loses the completion event.
        ("clear-before-publish", THROTTLED, 11, "no completion event announced it"),
        # A backfill marked completed by its first wave: the rest of its range is never sent.
        ("done-at-first-wave", None, 12, "never reached a terminal state"),
        # A change of a one-shot job after its sweep leaves the message's copy of the job valid: a cancelled one runs.
        ("copies-never-void", None, 4, "its cancellation was acknowledged"),
        # No visibility change on a batch: what a dead worker held waits out the queue's visibility timeout.
        ("no-batch-hold", CRASHES, 10, "was received again"),
        # A message of several occurrences acknowledged without sending again what the worker keeps: those are lost.
        ("drops-kept-occurrences", PAUSES, 1, "after quiescence"),
        # A sweep that moves the watermark after a writer raised the shard count past what it swept (a deploy half
        # done): the new shards' buckets of those minutes are never looked at.
        ("shard-fence-ignored", None, 14, "never claimed"),
    ],
)
def test_a_deliberately_broken_protocol_is_caught(
    variant: str, profile: FaultProfile | None, invariant: int, symptom: str
) -> None:
    # When the broken protocol runs seeds until one shows the violation
    caught = next(
        (
            seed
            for seed in range(100)
            if any(
                v.invariant == invariant and symptom in v.message
                for v in run_seed(seed, variant=variant, profile=profile, exposure=PRODUCTION).violations
            )
        ),
        None,
    )

    # Then the simulator reports it, and the real protocol passes that very seed
    assert caught is not None, f"{variant}: no seed out of 100 showed invariant {invariant} broken"
    assert run_seed(caught, profile=profile, exposure=PRODUCTION).ok


def counting_budget_calls(sim: Simulation) -> Counter[str]:
    """Counts the reads and the saves of the run's tenant budget calendars (whoever makes them)."""
    calls: Counter[str] = Counter()
    store = sim.tenant_budgets
    load, save = store.load, store.save

    def counted_load(tenant: str) -> Any:
        calls["load"] += 1
        return load(tenant)

    def counted_save(*args: Any, **kwargs: Any) -> bool:
        calls["save"] += 1
        return save(*args, **kwargs)

    store.load, store.save = counted_load, counted_save  # type: ignore[method-assign]
    return calls


def test_the_runs_exercise_budgets_completion_events_and_backfills() -> None:
    # When a few dozen seeds run (half of them with dispatch budgets, a third with a burst of one-shot jobs, some
    # with a backfill; a burst deferred past SQS's horizon and a failed publish are rare: seeds 32 and 40 have them)
    sims = [Simulation(seed) for seed in [*range(20), 32, 40]]
    calendar_calls = [counting_budget_calls(sim) for sim in sims]
    results = [sim.run() for sim in sims]

    # Then they pass, and among them a burst waited past SQS's horizon as deferred timers, releases were delayed by
    # a dispatch budget, attempts were throttled by an execution budget, a completion event's publish failed (the
    # drain published it), a backfill took several waves, and messages carried several occurrences
    assert all(result.ok for result in results), _reports([r for r in results if not r.ok], None)
    counts = [sim.metrics.counts for sim in sims]
    assert any(c.get("TenantDeferred") for c in counts)
    assert any(c.get("TenantThrottledSeconds") for c in counts)
    assert any(c.get("TenantConcurrencyThrottled") for c in counts)
    assert any(c.get("CompletionEventFailures") for c in counts)
    # and every booking of a tenant's calendar read it first (strongly consistent) before its conditional save
    loads, saves = (sum(calls[name] for calls in calendar_calls) for name in ("load", "save"))
    assert 0 < saves <= loads, (loads, saves)
    assert any(backfill.waves > 1 for sim in sims for backfill in sim.backfills.items.values())
    # and messages carried several occurrences, some of which a worker had to send again on their own
    assert any(carried > 1 for sim in sims for carried in sim.queue.carried)
    assert any(c.get("OccurrencesSentAgain") for c in counts)


def test_replaying_a_seed_gives_the_same_trace() -> None:
    first = run_seed(4321, trace_calls=True)
    second = run_seed(4321, trace_calls=True)

    assert first.events == second.events
    assert [str(v) for v in first.violations] == [str(v) for v in second.violations]
    assert len(first.events) > 100  # port calls are in the trace


def test_replaying_a_failing_seed_reproduces_its_failure() -> None:
    broken = next(r for r in (run_seed(s, variant="random-key") for s in range(20)) if not r.ok)

    again = run_seed(broken.seed, variant="random-key")

    assert [str(v) for v in again.violations] == [str(v) for v in broken.violations]
    assert again.events == broken.events
    report = format_failure(again, variant="random-key")
    assert f"seed {broken.seed} FAILED" in report
    assert f"--seed {broken.seed} --variant random-key --trace" in report


def _one_job(start: datetime, schedule: dict[str, object], window: timedelta) -> Workload:
    body = {
        "name": "dst",
        "schedule": schedule,
        "target": {"type": "handler", "name": "sink"},
        "misfire_policy": "run_all",
    }
    return Workload(start, window, [PlannedCall(0, start, "create", 0, body, "create-0")], [], 1)


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        # Spring forward: local 02:00-03:00 does not exist; every 02:x0 runs once at the first valid instant.
        (datetime(2026, 3, 28, 23, 50, tzinfo=UTC), [datetime(2026, 3, 29, 1, 0, tzinfo=UTC)]),
        # Fall back: local 02:00-03:00 happens twice; each 02:x0 runs once, in the first pass (CEST, UTC+2).
        (
            datetime(2026, 10, 24, 23, 50, tzinfo=UTC),
            [datetime(2026, 10, 25, 0, m, tzinfo=UTC) for m in range(0, 60, 10)],
        ),
    ],
)
def test_a_berlin_cron_crosses_dst_through_the_whole_protocol(start: datetime, expected: list[datetime]) -> None:
    # Given "every 10 minutes in the 2 o'clock hour, Berlin time", created 10 min before midnight UTC
    workload = _one_job(
        start,
        {"type": "cron", "expression": "*/10 2 * * *", "timezone": "Europe/Berlin"},
        timedelta(hours=2, minutes=30),
    )

    # When it runs for two and a half hours without faults
    sim = Simulation(1, profile=FaultProfile.calm(), workload=workload)
    result = sim.run()

    # Then exactly the expected UTC instants ran, once each
    assert result.ok, format_failure(result)
    effects = sorted(at for (_, at) in sim.sink.effects)
    assert effects == expected


def test_the_command_line_summarises_and_fails_on_a_violation(capsys: pytest.CaptureFixture[str]) -> None:
    from scheduler_sim.__main__ import main

    assert main(["--seeds", "3", "--start", "10", "--avoid-known-bugs"]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("3 passed, 0 failed")

    assert main(["--seeds", "2", "--variant", "random-key", "--show", "1", "--events", "5"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED (2)" in out
    assert "replay: .venv/bin/python -m scheduler_sim --seed 0 --variant random-key --trace" in out
    assert out.strip().splitlines()[-1].startswith("0 passed, 2 failed")


def test_the_command_line_runs_a_chosen_number_of_sweepers_and_says_so_in_the_replay(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from scheduler_sim.__main__ import main

    assert main(["--seeds", "2", "--variant", "watermark-first-finisher", "--sweepers", "3", "--show", "1"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATED (14)" in out
    assert "replay: .venv/bin/python -m scheduler_sim --seed 0 --variant watermark-first-finisher --sweepers 3" in out
    with pytest.raises(SystemExit):
        main(["--seeds", "2", "--sweepers", "0"])


def slow_calls_overtaken(sim: Simulation) -> tuple[int, list[str]]:
    """The run's slow target calls longer than the lease, and those another attempt of the same occurrence reached
    the target during (a takeover of a live call)."""
    lease = sim.execute_config.lease.total_seconds()
    long_calls, overtaken = 0, []
    pending: dict[str, tuple[str, int, datetime]] = {}  # actor -> its call in progress (key, token, start)
    # A worker that died during its call (a crash at one of its heartbeat's port calls) lost its lease with it.
    crashes = [(at, actor) for at, actor, text in sim.events if text.startswith("FAULT CRASH")]
    for at, actor, text in sim.events:
        if text.startswith("target ") and text.endswith(": slow"):
            key, token = text.split()[1], int(text.split()[3].rstrip(":"))
            pending[actor] = (key, token, at)
        elif text.startswith("FAULT slow: ") and actor in pending:
            key, token, start = pending.pop(actor)
            seconds = float(text.split()[2].rstrip("s"))
            if seconds <= lease:
                continue
            end = start + timedelta(seconds=seconds)
            if any(who == actor and start < when < end for when, who in crashes):
                continue
            long_calls += 1
            overtaken += [
                f"{key} token {token} ({seconds:.1f}s from {start}): token {c.token} at {c.at}"
                for c in sim.sink.calls
                if c.key == key and c.token > token and start < c.at < end
            ]
    return long_calls, overtaken


def test_the_simulation_runs_at_the_deployed_lease_and_heartbeat() -> None:
    deployed = Configs.of(Settings()).execute
    execute = Simulation(1).execute_config
    assert (execute.lease, execute.heartbeat_fraction) == (deployed.lease, deployed.heartbeat_fraction)


def test_a_slow_call_longer_than_its_lease_keeps_its_occurrence_by_its_heartbeat() -> None:
    # When seeds run whose slow target calls outlast the lease (up to two of them)
    sims = [Simulation(seed) for seed in range(60)]
    for sim in sims:
        sim.run()

    # Then the call's heartbeat renewed its lease meanwhile: no other attempt reached the target while it ran
    found = [slow_calls_overtaken(sim) for sim in sims]
    assert sum(long_calls for long_calls, _ in found) >= 20
    assert [line for _, overtaken in found for line in overtaken] == []
