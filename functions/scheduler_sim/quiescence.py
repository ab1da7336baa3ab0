"""Quiescence, the end of a run: faults stop and clocks agree, the clock moves past every lease and visibility
timeout, the client's pending retries go through, sweepers and workers run undisturbed for a while (on, while
deferred occurrences or backfill waves are still to go out), then the workers drain the queue and a last sweep
drains the outbox. What the checker judges is the state this leaves."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from scheduler.core.model.job import BackfillState, JobState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.sweep.sweeper import SweepConfig

if TYPE_CHECKING:
    from scheduler_sim.simulation import Simulation

#: How long quiescence may go on sweeping for deferred occurrences and backfill waves (beyond `SimConfig.quiet`).
MAX_EXTRA_QUIET_MINUTES = 30


def quiesce(sim: Simulation) -> None:
    """Run the simulation to quiet after its active phase."""
    sim.faults_on = False
    for actor in sim.actors.values():
        actor.clock.offset = timedelta(0)
    cfg = sim.config
    jump = max(cfg.visibility_timeout, cfg.bucket_lease.total_seconds(), cfg.lease.total_seconds()) + 1
    sim.stalls.append((sim.clock.now(), jump))
    sim.clock.advance(jump)
    sim.trace("sim", "quiescence: faults stop, clocks agree, leases and visibility timeouts have run out")
    while (pending := sim.api.head()) is not None:
        pending.due = sim.clock.now()
        sim.run_step(sim.api)
        sim.clock.advance(0.5)
    sim.quiet_from = sim.clock.now()
    # Without faults one sweeper is as good as three, and sweeps are most of a run's cost.
    del sim.sweepers[1:]
    sim.sweepers[0].next_at = sim.clock.now() + timedelta(milliseconds=sim.rng.randint(0, 60_000))
    sim.advance_to(sim.clock.now() + cfg.quiet, api=False)
    # A tenant over its dispatch budget waits as deferred timers in later buckets, a backfill's waves go out a few
    # at a time: sweep on until they are out.
    for _ in range(MAX_EXTRA_QUIET_MINUTES):
        if not _deferred_waiting(sim) and not _backfills_running(sim):
            break
        sim.advance_to(sim.clock.now() + timedelta(minutes=1), api=False)
    sim.trace("sim", "drain: sweeps stop, workers empty the queue")
    while sim.steps < cfg.max_steps:
        visible = sim.queue.earliest_visible()
        if visible is None:
            break
        if visible > sim.clock.now():
            sim.clock.set(visible)
        sim.run_step(sim.rng.choice(sim.workers))
    else:
        sim.errors.append(f"the queue did not drain within {cfg.max_steps} steps")
    _drain_outbox(sim)


def _drain_outbox(sim: Simulation) -> None:
    """Last, what every sweep does last: publish what the workers left in the outbox (a worker that died
    between its terminal write and its publish, a refused publish). The quiet sweeps drained all but what the
    queue's drain recorded since."""
    sweeper = sim.sweepers[0]
    if sweeper.sweeper.outbox is None:
        return
    # The run is quiet: past the settle time of the newest outcome, nobody is publishing any more.
    sim.clock.set(sim.clock.now() + sweeper.sweeper.outbox.settle)
    sim.stack.append(sweeper)
    try:
        report = sweeper.sweeper.outbox.drain(SweepConfig.outbox_drain_limit)
    finally:
        sim.stack.pop()
    sim.trace(sweeper.name, f"outbox drain: {report.found} pending, {report.published} published")


def _backfills_running(sim: Simulation) -> bool:
    """Whether a backfill of a job that is neither paused nor cancelled still has waves to send."""
    for backfill in sim.backfills.items.values():
        job = sim.jobs.jobs.get(backfill.job_id)
        live = job is not None and job.state not in (JobState.PAUSED, JobState.CANCELLED)
        if live and backfill.state == BackfillState.RUNNING:
            return True
    return False


def _deferred_waiting(sim: Simulation) -> bool:
    """Whether a stored timer already past its fire time, in a bucket not yet done, has not run (an occurrence
    its tenant's dispatch budget deferred)."""
    now = sim.clock.now()
    for bucket, items in sim.timers.timer_items.items():
        state = sim.timers.buckets.get(bucket)
        if state is not None and state.done:
            continue
        for timer in items.values():
            if timer.fire_at < now and occurrence_key(timer.job_id, timer.scheduled_for) not in sim.ledger.items:
                return True
    return False
