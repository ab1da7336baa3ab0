"""The simulated world: the shared in-memory stores, the actors that run the real protocol code against them
through fault-injecting ports, and the seeded scheduler that interleaves the actors as the clock advances.

One run, step by step:
1. the active phase: the workload's API calls, sweeps (about once a minute per sweeper) and worker receives,
   in an order the seed chooses, with the seed's faults;
2. quiescence (`scheduler_sim.quiescence`): faults stop and clocks agree, the clock moves past every lease and
   visibility timeout, the client's pending retries go through, sweepers and workers run undisturbed for a
   while, then the workers drain the queue;
3. the checker (`scheduler_sim.checker`) judges the end state and everything recorded on the way.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import cache

from scheduler.adapters.memory import (
    FakeClock,
    MemoryJobStore,
    MemoryLedger,
    MemoryTimerStore,
    RecordingMetrics,
)
from scheduler.composition import memory_stores
from scheduler.core.execution.packing import PackingConfig
from scheduler.core.jobs.service import JobService
from scheduler.core.model.timefmt import ONE_MINUTE, rfc3339, truncate_ms
from scheduler.core.ports import AdvanceResult, BucketId, Dispatch, Timer
from scheduler.core.tenancy.concurrency import ConcurrencyConfig
from scheduler.settings import Settings
from scheduler_sim.actors import Actor, ApiActor, SimBatchVisibility, SimQueue, SweeperActor, WorkerActor, brief
from scheduler_sim.bad_input import invalid_request, stored_state
from scheduler_sim.bus import SimEventBus
from scheduler_sim.checker import check
from scheduler_sim.determinism import SeededIds, quiet_logging, snapshot
from scheduler_sim.faults import Crash, Exposure, FaultProfile, Throttled
from scheduler_sim.observed import Observed
from scheduler_sim.quiescence import quiesce
from scheduler_sim.records import (
    Abandoned,
    Change,
    Event,
    InvalidOutcome,
    JobRecord,
    Misfire,
    SimConfig,
    SimResult,
    VersionChange,
)
from scheduler_sim.sink import SinkTarget
from scheduler_sim.variants import Variant
from scheduler_sim.workload import InvalidCall, Workload, add_flow_control, draw_fairness, draw_workload

#: A slow target call lasts up to this long: two leases at the deployed lease, which its heartbeat renews meanwhile (so
#: the call holds its claim and its execution slot throughout).
MAX_BUSY_SECONDS = 30
#: While a slow call runs, the other workers take messages this often (and at least once, halfway).
BUSY_INTERJECT_SECONDS = 5


@cache
def sim_settings() -> Settings:
    """The settings every run composes its core from, built once a process (validating them is a fifth of a seed's
    CPU): the production defaults with completion events on (the outbox); the composed core reads them, never
    changes them."""
    return Settings(completion_events=True, tenant_dispatch_rate=0)


class Simulation:
    """One seeded run of the real protocol under faults. `run()` returns the events and the checker's verdict."""

    def __init__(
        self,
        seed: int,
        *,
        profile: FaultProfile | None = None,
        variant: Variant | None = None,
        config: SimConfig | None = None,
        exposure: Exposure | None = None,
        workload: Workload | None = None,
        trace_calls: bool = False,
    ) -> None:
        self.seed = seed
        self.exposure = exposure or Exposure()
        self.config = config or SimConfig()
        self.variant = variant
        self.trace_calls = trace_calls
        self.events: list[Event] = []
        self.rng = random.Random(f"punctual-sim/run/{seed}")
        #: Job ids, attempt owners and backfill ids, from their own generator.
        self.ids = SeededIds(random.Random(f"punctual-sim/ids/{seed}"))
        self.profile = profile or FaultProfile.draw(random.Random(f"punctual-sim/faults/{seed}"))
        self.workload = workload or draw_workload(random.Random(f"punctual-sim/workload/{seed}"))
        self.clock = FakeClock(self.workload.start)
        cfg = self.config
        shards = self.rng.randint(1, 3)
        # Occurrences share messages as deployed (up to 10 of one tenant and instant).
        self.packing = PackingConfig()
        self.queue = SimQueue(self.clock, cfg.visibility_timeout, self.rng, self.packing)
        stores = memory_stores(
            self.clock,
            shards,
            queue=self.queue,
            timers=variant.timers if variant is not None else MemoryTimerStore,
            jobs=variant.jobs if variant is not None else MemoryJobStore,
            ledger=variant.ledger if variant is not None else MemoryLedger,
            snapshot=snapshot,
        )
        self.jobs, self.timers, self.ledger = stores.jobs, stores.timers, stores.ledger
        # A deploy that raises the shard count, half done, in a third of the runs (every run of a variant that needs
        # it): the API, and sometimes the first sweeper, write with more shards than the other sweepers sweep
        # (docs/design.md §3.3, changing the shard count). From its own stream: a seed's other draws are unchanged.
        raise_rng = random.Random(f"punctual-sim/shards/{seed}")
        raised = raise_rng.random() < 1 / 3 or (variant is not None and variant.shard_change)
        self.raised_shards = shards + raise_rng.randint(1, 3) if raised else None
        self.raised_actors = {"api", *(["sweeper-1"] if raise_rng.random() < 0.5 else [])} if raised else set()
        self.sink = SinkTarget(self)
        self.metrics = RecordingMetrics()
        self.bus = SimEventBus(self)
        self.backfills = variant.backfills() if variant is not None else stores.backfills
        # Per-tenant execution budgets, small enough that workers racing on one tenant hit them.
        self.tenant_slots = variant.slots() if variant is not None else stores.tenant_slots
        self.concurrency = ConcurrencyConfig(default=random.Random(f"punctual-sim/limits/{seed}").randint(1, 3))
        # Per-tenant dispatch budgets in half the runs: the burst's tenant far below its burst (deferred timers).
        self.tenant_budgets = variant.budgets() if variant is not None else stores.tenant_budgets
        # Flow-control keys in some runs: a burst's jobs, and some of the main tenant's, name a destination's key
        # with a parallelism below the tenant's execution budget (and sometimes a rate), from their own stream.
        self.flow_controls = stores.flow_controls
        self.flow_slots = variant.flow_slots() if variant is not None else stores.flow_slots
        #: The lease each attempt's flow-control slot was last granted, by (key's slot owner, holder) (invariant 15).
        self.flow_slot_leases: dict[tuple[str, str], datetime] = {}
        #: The same for each attempt's execution slot, by (tenant, holder) (invariant 9).
        self.slot_leases: dict[tuple[str, str], datetime] = {}
        add_flow_control(self.workload, random.Random(f"punctual-sim/flow/{seed}"))
        self.fairness = draw_fairness(random.Random(f"punctual-sim/budgets/{seed}"))
        # The actors compose the real core from these (`scheduler.composition.compose`); the settings only say
        # that completion events are on (the outbox), the configuration is the run's own.
        self.settings = sim_settings()
        self.configs = cfg.core(shards, self.exposure.seal_margin, self.packing, self.fairness, self.concurrency)
        self.dispatch_config = self.configs.dispatch
        self.sweep_config = self.configs.sweep
        self.execute_config = self.configs.execute
        self.hold_config = self.configs.hold
        self.faults_on = True
        self.stack: list[Actor] = []
        self.records = [JobRecord(i, self.workload.describe(i)) for i in range(self.workload.jobs)]
        self.invalid_outcomes: list[InvalidOutcome] = []
        self.errors: list[str] = []
        # What the checker needs that the end state does not show.
        self.max_epoch: dict[str, int] = {}
        self.stale_writes: list[str] = []
        self.first_send: dict[str, datetime] = {}
        self.sent_dispatch: dict[str, Dispatch] = {}
        #: Per job, the chain's last plan (version, advancing timer's instant) while its next timer is not stored.
        self.open_plans: dict[str, tuple[int, datetime]] = {}
        self.plans_opened: dict[str, int] = {}
        #: What the API sent during the call in progress, and each acknowledged change of version's cost.
        self.api_sends: list[Dispatch] = []
        self.version_changes: list[VersionChange] = []
        self.misfires: dict[str, list[Misfire]] = {}
        #: Per tenant, the release instant of every dispatch a tenant admission let through (with dispatch budgets).
        self.releases: dict[str, list[tuple[datetime, str]]] = {}
        self.quiet_from: datetime | None = None
        #: The watermark as judged at its last write, and each time a write moved it past a bucket not done (14).
        self.watermark_judged: datetime | None = None
        self.watermark_passed: list[str] = []
        self.steps = 0
        #: Batches dead workers left behind, and the time the fault model injected (outages, frozen and paused
        #: actors, the jump into quiescence): the checker's restart-time invariant allows for those.
        self.abandoned: list[Abandoned] = []
        self.stalls: list[tuple[datetime, float]] = []

        self.api = ApiActor(self, "api")
        drawn = self.rng.randint(1, 3)
        self.sweepers = [SweeperActor(self, f"sweeper-{n}") for n in range(1, (cfg.sweepers or drawn) + 1)]
        self.workers = [WorkerActor(self, f"worker-{n}") for n in range(1, self.rng.randint(1, 3) + 1)]
        self.actors: dict[str, Actor] = {a.name: a for a in [self.api, *self.sweepers, *self.workers]}
        skew = self.profile.skew_seconds
        if skew:
            for actor in self.actors.values():
                actor.clock.offset = timedelta(milliseconds=self.rng.randint(-int(skew * 1000), int(skew * 1000)))
        self.end = self.workload.start + self.workload.window
        self.outage: tuple[datetime, timedelta] | None = None
        if self.rng.random() < self.profile.outage:
            at = self.workload.start + timedelta(seconds=self.rng.uniform(120, self.workload.window.total_seconds()))
            duration = timedelta(seconds=self.rng.randint(10 * 60, 60 * 60))
            self.outage = (at, duration)
            self.end += duration

    # -- running ------------------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Run the active phase, then quiesce, then check the invariants."""
        with quiet_logging():
            self.trace("sim", f"seed {self.seed}: faults {self.profile.describe()}")
            offsets = ", ".join(f"{a.name} {a.clock.offset.total_seconds():+.3f}s" for a in self.actors.values())
            self.trace("sim", f"actors and clock offsets: {offsets}; {self.timers.shard_count} shard(s)")
            if self.raised_shards is not None:
                raised = ", ".join(sorted(self.raised_actors))
                self.trace("sim", f"a deploy raised the shard count to {self.raised_shards}: {raised} run with it")
            if self.outage is not None:
                self.trace("sim", f"an outage of {self.outage[1]} will start at {rfc3339(self.outage[0])}")
            for record in self.records:
                self.trace("sim", f"job-{record.index}: {record.description}")
            self.advance_to(self.end, api=True)
            quiesce(self)
            violations = check(self.observed())
        return SimResult(self.seed, violations, self.events, self.profile, self._stats())

    def advance_to(self, until: datetime, *, api: bool) -> None:
        """Advance from event to event until `until`: whichever actors are due, in a seeded order."""
        candidates: list[Actor] = [*self.sweepers, *self.workers] + ([self.api] if api else [])
        while self.steps < self.config.max_steps:
            upcoming = self._next_event(api)
            if upcoming is None or upcoming > until:
                self.clock.set(max(self.clock.now(), until))
                return
            if upcoming > self.clock.now():
                self.clock.set(upcoming)
            now = self.clock.now()
            if self.outage is not None and self.outage[0] <= now:
                self.trace("sim", f"FAULT outage: nothing runs for {self.outage[1]}")
                self.stalls.append((now, self.outage[1].total_seconds()))
                self.clock.advance(self.outage[1].total_seconds())
                self.outage = None
                continue
            if self.faults_on and self.profile.skew_seconds and self.rng.random() < 0.02:
                self._clock_jump()
            ready = [a for a in candidates if a.ready(now)]
            if not ready:
                self.clock.advance(0.001)
                continue
            self.run_step(self.rng.choice(ready))
        self.errors.append(f"no quiescence within {self.config.max_steps} steps")

    def _next_event(self, api: bool) -> datetime | None:
        times = [s.next_at for s in self.sweepers]
        if api:
            head = self.api.head()
            if head is not None:
                times.append(head.due)
        visible = self.queue.earliest_visible()
        if visible is not None:
            times.append(max(visible, min(w.next_at for w in self.workers)))
        if self.outage is not None:
            times.append(self.outage[0])
        return min(times, default=None)

    def _clock_jump(self) -> None:
        actor = self.rng.choice(list(self.actors.values()))
        skew = int(self.profile.skew_seconds * 1000)
        actor.clock.offset = timedelta(milliseconds=self.rng.randint(-skew, skew))
        self.trace(actor.name, f"FAULT clock jumps: now off by {actor.clock.offset.total_seconds():+.3f}s")

    def run_step(self, actor: Actor) -> None:
        """One step of one actor. A crash ends the step where it struck: what the actor held is abandoned."""
        self.steps += 1
        self.stack.append(actor)
        actor.gate.in_chain_window = False
        try:
            actor.step()
        except Crash as crash:
            self.trace(actor.name, f"FAULT CRASH {crash}")
        except Throttled as exc:
            self.trace(actor.name, f"FAULT step failed: {exc}")
        except Exception as exc:  # a bug in the core or in the simulator: report it, keep the run going
            self.errors.append(f"{actor.name}: unexpected {type(exc).__name__}: {brief(exc)}")
            self.trace(actor.name, f"UNEXPECTED {type(exc).__name__}: {brief(exc)}")
        finally:
            self.stack.pop()
            if isinstance(actor, WorkerActor):
                self._abandoned_by(actor)

    def _abandoned_by(self, worker: WorkerActor) -> None:
        """A worker's step ended while it still held messages (it died, or its invocation failed)."""
        held, visibility = worker.held, worker.holding
        worker.held = worker.holding = None
        if held is None or visibility is None or visibility.applied is None or not held.held:
            return
        # Only what it still held: a message another worker received meanwhile (while this one was frozen past
        # the hold) is that worker's now.
        current = self.queue.messages
        ids = tuple(i for i in held.held if i in current and current[i].receipt == visibility.messages[i].receipt)
        if not ids:
            return
        keys = tuple(held.keys[i] or "" for i in ids)
        # A message counts as started if the dead worker had claimed any occurrence it carries (its heartbeat may
        # have extended the whole message to that lease).
        started = tuple(any(self._claimed_by(worker, dispatch.key) for dispatch in current[i].dispatches) for i in ids)
        self.abandoned.append(Abandoned(self.clock.now(), worker.name, ids, keys, started))
        self.trace(worker.name, f"abandoned {', '.join(ids)} (held since {rfc3339(visibility.applied)})")

    def _claimed_by(self, worker: WorkerActor, key: str) -> bool:
        item = self.ledger.items.get(key)
        return item is not None and (item.owner or "").startswith(f"{worker.name}/")

    # -- hooks for actors, gates and the sink --------------------------------------------------------------

    def stores_for(self, actor: str) -> tuple[MemoryJobStore, MemoryTimerStore]:
        """The job and timer stores as `actor`'s process sees them: with the raised shard count if it was deployed
        with it (the same items, another count to write with)."""
        if self.raised_shards is None or actor not in self.raised_actors:
            return self.jobs, self.timers
        timers = self.timers.with_shard_count(self.raised_shards)
        jobs = copy.copy(self.jobs)
        jobs.timers = timers
        return jobs, timers

    def trace(self, actor: str, text: str) -> None:
        self.events.append((self.clock.now(), actor, text))

    def observed(self) -> Observed:
        """What the checker judges: the run as it stands, and nothing it could call back into."""
        return Observed(
            clock=self.clock,
            config=self.config,
            execute_config=self.execute_config,
            hold_config=self.hold_config,
            fairness=self.fairness,
            records=self.records,
            jobs=self.jobs,
            timers=self.timers,
            ledger=self.ledger,
            backfills=self.backfills,
            calls=self.sink.calls,
            effects=self.sink.effects,
            over_limit=self.sink.over_limit,
            over_parallelism=self.sink.over_parallelism,
            receives=self.queue.receives,
            polls=self.queue.polls,
            published=self.bus.published,
            errors=self.errors,
            stale_writes=self.stale_writes,
            invalid_outcomes=self.invalid_outcomes,
            first_send=self.first_send,
            sent_dispatch=self.sent_dispatch,
            misfires=self.misfires,
            version_changes=self.version_changes,
            releases=self.releases,
            abandoned=self.abandoned,
            stalls=self.stalls,
            watermark_passed=self.watermark_passed,
        )

    def current_actor(self) -> Actor:
        return self.stack[-1]

    def sleep(self, seconds: float) -> None:
        """The executor's sleep: simulated time passes."""
        self.clock.advance(seconds)

    def preempt(self, actor: str) -> None:
        """At a port call: the actor pauses while another runs a whole step (one level deep)."""
        if len(self.stack) > 1:
            return
        now = self.clock.now()
        others = [a for a in self.actors.values() if a not in self.stack and a.can_interject(now)]
        if not others:
            return
        other = self.rng.choice(others)
        pause = self.rng.randint(0, 2000) / 1000
        self.stalls.append((now, pause))
        self.clock.advance(pause)
        self.trace(actor, f"FAULT paused at a port call while {other.name} runs")
        self.run_step(other)

    def busy(self, actor: Actor, where: str) -> None:
        """The actor's call takes a while, maybe longer than its lease (a slow target), its heartbeat renewing the
        lease meanwhile: other workers take messages meanwhile, so one tenant's target calls overlap (what its
        execution budget must bound, invariant 9), and none takes this call's occurrence over."""
        seconds = self.rng.randint(1000, MAX_BUSY_SECONDS * 1000) / 1000
        self.trace(actor.name, f"FAULT slow: {seconds:.1f}s {where}")
        self.stalls.append((self.clock.now(), seconds))  # no receives meanwhile if no other worker runs
        others = [w for w in self.workers if w not in self.stack]
        if len(self.stack) > 3 or not others:
            self._pass(actor, seconds)
            return
        slices = max(2, math.ceil(seconds / BUSY_INTERJECT_SECONDS))
        for n in range(slices):
            self._pass(actor, seconds / slices)
            if n == slices - 1:
                break
            self.rng.shuffle(others)
            for other in others:
                if other not in self.stack and other.can_interject(self.clock.now()):
                    self.run_step(other)

    def _pass(self, actor: Actor, seconds: float) -> None:
        """`seconds` pass while the actor is alive inside a call: its heartbeats beat when they are due (a beat's
        port call may let another actor run a step, which may move the clock on; it never goes back)."""
        until = self.clock.now() + timedelta(seconds=seconds)
        while (due := actor.heartbeats.next_due()) is not None and due <= until:
            self.clock.set(max(self.clock.now(), due))
            if actor.heartbeats.beat_due(self.clock.now()):
                self.trace(actor.name, "heartbeat")
        self.clock.set(max(self.clock.now(), until))

    def freeze(self, actor: Actor, where: str) -> None:
        """The actor freezes (GC, a stalled container) past its lease, maybe past its message's visibility
        timeout; meanwhile other workers and due sweepers run."""
        if len(self.stack) > 2:
            return
        cfg = self.config
        if self.rng.random() < 0.6:
            seconds = cfg.lease.total_seconds() + self.rng.randint(1, 30)
        else:
            seconds = cfg.visibility_timeout + self.rng.randint(1, 60)
        self.stalls.append((self.clock.now(), seconds))
        self.clock.advance(seconds)
        self.trace(actor.name, f"FAULT frozen {seconds:.0f}s {where}")
        for _ in range(self.rng.randint(1, 2)):
            now = self.clock.now()
            others: list[Actor] = [w for w in self.workers if w not in self.stack and w.can_interject(now)]
            others += [s for s in self.sweepers if s not in self.stack and s.ready(now)]
            if not others:
                break
            self.run_step(self.rng.choice(others))

    def job_read(self, actor: str) -> None:
        self.actors[actor].job_read_at = self.clock.now()

    def advanced(
        self, timer: Timer, dispatched_for: datetime, skipped: int, result: AdvanceResult, now: datetime
    ) -> None:
        if result.proceed and timer.plan is not None:
            # Open until the chain's next timer is stored (the proof that the plan was sent).
            self.open_plans[timer.job_id] = (timer.version, timer.scheduled_for)
            self.plans_opened[timer.job_id] = self.plans_opened.get(timer.job_id, 0) + 1
        if skipped and result.proceed and timer.plan is not None:
            policy = timer.plan.misfire_policy
            misfire = Misfire(timer.version, policy, timer.scheduled_for, timer.fire_at, dispatched_for, skipped, now)
            self.misfires.setdefault(timer.job_id, []).append(misfire)

    def timer_stored(self, timer: Timer) -> None:
        plan = self.open_plans.get(timer.job_id)
        if plan is not None and timer.plan is not None and timer.version == plan[0] and timer.scheduled_for > plan[1]:
            del self.open_plans[timer.job_id]

    def watermark_moved(self) -> None:
        """Right after a watermark write (its first, then each advance), judge the minutes it now passes: every
        bucket of each must be done. A sweep claims each bucket it passes and a done bucket stays done, so the
        buckets as they are at the write are what the sweep that wrote it had to have seen (invariant 14)."""
        current = self.timers.watermark()
        judged = self.watermark_judged
        if current is None or (judged is not None and current <= judged):
            return
        self.watermark_judged = current
        minute = current if judged is None else judged  # its first value passes nothing
        while minute < current:
            for shard in range(max(self.timers.shard_count, self.timers.recorded_shards())):
                bucket = self.timers.buckets.get(BucketId(minute, shard))
                if bucket is not None and bucket.done:
                    continue
                state = "never claimed" if bucket is None else f"held by {bucket.owner} (epoch {bucket.epoch})"
                who = self.stack[-1].name if self.stack else "sim"
                self.watermark_passed.append(
                    f"{who} moved the watermark to {rfc3339(current)} past bucket {minute:%H:%M}/{shard}, {state}"
                )
            minute += ONE_MINUTE

    def ledger_claimed(self, key: str, epoch: int) -> None:
        previous = self.max_epoch.get(key, 0)
        if epoch <= previous:
            self.stale_writes.append(f"a claim of {key} was granted epoch {epoch}, not above {previous}")
        self.max_epoch[key] = max(previous, epoch)

    def ledger_write(self, op: str, key: str, epoch: int, owner: str | None) -> None:
        current = self.max_epoch.get(key, 0)
        if epoch < current:
            self.stale_writes.append(
                f"ledger accepted {op} of {key} from epoch {epoch} (owner {owner}); epoch {current} holds it"
            )
            self.trace("sim", f"STALE WRITE ACCEPTED: {op} of {key} from epoch {epoch} < {current}")

    def tenant_released(self, dispatches: Sequence[Dispatch]) -> None:
        """What a tenant admission let through of keyed dispatches, with the release instants its calendar booked
        (their keys may then release them later still: invariant 13 judges the tenant's calendar)."""
        for dispatch in dispatches:
            if dispatch.flow_key is not None:
                self.releases.setdefault(dispatch.tenant, []).append((truncate_ms(dispatch.send_at), dispatch.key))

    def queue_send(self, actor: str, dispatches: Sequence[Dispatch], now: datetime) -> None:
        if not dispatches:
            return
        for dispatch in dispatches:
            self.first_send.setdefault(dispatch.key, now)
            self.sent_dispatch.setdefault(dispatch.key, dispatch)
        if actor == self.api.name:
            self.api_sends += dispatches
        if self.fairness is not None and not actor.startswith("worker-"):
            # Admitted by a tenant admission (a worker's own sends, a throttled occurrence's, are not): each carries
            # its release instant, booked in its tenant's calendar - but a keyed one's was moved later by its
            # flow-control key: those are recorded as the tenant admission released them (`tenant_released`).
            for dispatch in dispatches:
                if dispatch.flow_key is None:
                    self.releases.setdefault(dispatch.tenant, []).append((truncate_ms(dispatch.send_at), dispatch.key))
        self.queue.send(dispatches, now)
        self.trace(actor, f"sent {', '.join(d.key for d in dispatches)}")
        if not self.faults_on:
            return
        for dispatch in dispatches:
            if self.rng.random() < self.profile.duplicate:
                delay = max(0.0, min(900.0, (dispatch.send_at - now).total_seconds()))
                at = self.clock.now() + timedelta(seconds=delay + self.rng.randint(0, 5000) / 1000)
                copy_id = self.queue.inject([dispatch], at)
                self.trace(actor, f"FAULT {dispatch.key} delivered twice ({copy_id})")
            if self.rng.random() < self.profile.late_copy:
                at = self.clock.now() + timedelta(seconds=self.rng.randint(60, 900))
                copy_id = self.queue.inject([dispatch], at)
                self.trace(actor, f"FAULT {dispatch.key} redelivered late ({copy_id} at {rfc3339(at)})")

    def invalid_request(self, call: InvalidCall, service: JobService) -> None:
        """Make one request that must change nothing; compare the stores before and after."""
        before = stored_state(self)
        name, outcome, must_reject = invalid_request(self, call, service)
        changed = stored_state(self) != before
        self.invalid_outcomes.append(InvalidOutcome(name, outcome, changed, must_reject))
        self.trace("api", f"invalid request {name}: {outcome}{' (STATE CHANGED)' if changed else ''}")

    def _stats(self) -> dict[str, int]:
        return {
            "steps": self.steps,
            "messages": self.queue.sent,
            "target_calls": len(self.sink.calls),
            "effects": sum(len(v) for v in self.sink.effects.values()),
            "occurrences": len(self.ledger.items),
        }


__all__ = [
    "Abandoned",
    "Actor",
    "ApiActor",
    "Change",
    "Event",
    "InvalidOutcome",
    "JobRecord",
    "Misfire",
    "SimBatchVisibility",
    "SimConfig",
    "SimQueue",
    "SimResult",
    "Simulation",
    "SweeperActor",
    "VersionChange",
    "WorkerActor",
]
