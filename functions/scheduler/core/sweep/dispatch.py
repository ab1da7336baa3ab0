"""Turning timers into ready-queue messages (docs/design.md §3.2 and §3.3).

`Dispatcher.place` puts a timer where it will be found: into its time bucket, and - when that bucket may
already have been swept - through the late lane and straight to the queue. `Dispatcher.plan` decides what a
due timer dispatches (misfire policy, look-ahead) and advances the job's chain. Both the API and the sweeper
use them, so there is one dispatch path to prove correct.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from scheduler.core.model.job import Job, carries_secrets
from scheduler.core.model.keys import fire_at
from scheduler.core.model.schedules import is_recurring, next_occurrence
from scheduler.core.model.timefmt import ONE_MINUTE, minute_of, truncate_ms
from scheduler.core.ports import Advance, ChainPlan, Clock, Dispatch, JobStore, Metrics, ReadyQueue, Timer, TimerStore
from scheduler.core.sweep.landing import LandingBoard
from scheduler.core.tenancy.fairness import TenantAdmission
from scheduler.core.tenancy.flow_control import FlowKeys

log = logging.getLogger(__name__)

#: Bound on the occurrences one timer can expand into (misfire catch-up, look-ahead of 1 s rates).
MAX_EXPANSION = 10_000
#: `release_by` of the jobs a bucket sweep completes: their shares of the quota go with the sweep's page checkpoint.
RELEASE_BY_CHECKPOINT = "checkpoint"
#: A one-shot job at most this big (as JSON) travels with its occurrence's message (`Dispatch.job_copy`), so that
#: its worker need not read it; a bigger one is read (ten copies keep a SendMessageBatch far below its 256 KiB, and
#: each message below SQS's 64 KiB billing chunk).
COPY_MAX_BYTES = 4 * 1024


@dataclass(frozen=True)
class DispatchConfig:
    lookahead: timedelta
    misfire_grace: timedelta
    catchup_window: timedelta
    #: Beyond `now + lookahead`, how far a bucket may already be sealed by a sweeper whose clock runs ahead.
    #: Timers this near take the late-lane path. Keep lookahead + 60 s + this under SQS's 900 s delay cap.
    seal_margin: timedelta = timedelta(seconds=30)
    #: A sweep's sends land each message at most `landing_lead` + `landing_window` (110 ms) before its fire time,
    #: rather than up to a second before it (SQS delays are whole seconds): see `Dispatcher.send_landing`. None: off.
    landing_window: timedelta | None = timedelta(milliseconds=70)
    #: How far ahead of its time a message is aimed: SQS starts a delay when it receives the request, so a
    #: request slower than this would land it that much late.
    landing_lead: timedelta = timedelta(milliseconds=40)
    #: Pages of fewer messages are sent at once: the sweeper's wait (up to a second a page, billed) would cost
    #: more than the workers' waits it saves (each under a second, shared by a busy batch's records). That holds
    #: when a sweep works its buckets one after another; when it works a minute's buckets at once, their pages
    #: wait at the same time, one wait covers them all, and every page is worth landing (Configs.of: 1).
    landing_min_messages: int = 50
    #: A one-shot job at most this big travels with its occurrence's message; 0: none does (every worker reads its
    #: job, as a recurring job's does), which the benchmark compares against.
    job_copy_max_bytes: int = COPY_MAX_BYTES


def _message_carries_copy_of(job: Job, max_bytes: int) -> bool:
    """Whether a one-shot job's occurrence carries a copy of it (see `Dispatch.job_copy`): its changes void the
    copy (`JobService`), which only a one-shot job's single occurrence can be named by. A job with a secret (a secret
    header, sealed or not, or a URL with credentials or a query) is read instead, so that no secret travels in a
    message, not even sealed."""
    return (
        not is_recurring(job.spec.schedule)
        and not carries_secrets(job)
        and len(job.model_dump_json(exclude_none=True)) <= max_bytes
    )


def timer_for(job: Job, scheduled_for: datetime) -> Timer:
    """The timer of one scheduled occurrence of `job`, carrying the chain plan at the job's version."""
    spec = job.spec
    plan = ChainPlan(spec.schedule, job.created_at, spec.jitter_seconds, spec.misfire_policy)
    return Timer(
        job_id=job.job_id,
        tenant=job.tenant,
        scheduled_for=scheduled_for,
        fire_at=fire_at(job.job_id, scheduled_for, spec.jitter_seconds),
        version=job.version,
        kind="scheduled",
        plan=plan,
        priority=spec.priority,
        flow_key=job.flow_key,
    )


def manual_timer(job: Job, now: datetime) -> Timer:
    """An extra occurrence fired now (trigger); it has its own key and does not touch the chain."""
    return Timer(
        job.job_id,
        job.tenant,
        now,
        now,
        job.version,
        kind="manual",
        plan=None,
        priority=job.spec.priority,
        flow_key=job.flow_key,
    )


@dataclass(frozen=True)
class Plan:
    """What one due timer dispatches, and where its chain goes next."""

    dispatches: list[Dispatch]
    skipped: int  # missed occurrences the misfire policy does not run
    dispatched_for: datetime  # the last occurrence this plan covers (dispatched or skipped)
    next_at: datetime | None  # the chain's next occurrence, None when the schedule has no more


@dataclass(eq=False)
class Dispatcher:
    jobs: JobStore
    timers: TimerStore
    queue: ReadyQueue
    clock: Clock
    config: DispatchConfig
    metrics: Metrics
    #: Per-tenant dispatch budgets (scheduler.core.tenancy.fairness); None: no budgets.
    admission: TenantAdmission | None = None
    #: Flow-control keys (scheduler.core.tenancy.flow_control), applied after the tenants' budgets; None: off.
    flow: FlowKeys | None = None
    #: How a sweep waits for the instant that lands a message on time (None: it does not wait; sends at once).
    sleep: Callable[[float], None] | None = None
    #: The requests a sweep's buckets share to land their messages on time (None without a window or a sleep).
    _landing: LandingBoard | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        window = self.config.landing_window
        if window is not None and self.sleep is not None:
            self._landing = LandingBoard(
                self.queue, self.clock, self.sleep, self.metrics, window, self.config.landing_lead
            )

    def seal_limit(self, now: datetime) -> datetime:
        """Buckets before this instant may already be sealed: a sweep seals whole minutes up to the end of the
        look-ahead's last minute, by its own clock - which may run up to `seal_margin` ahead of ours, and so
        reach a minute further. The margin goes in before rounding to the minute, not after."""
        return self.horizon_end(now + self.config.seal_margin)

    def is_near(self, timer: Timer, now: datetime) -> bool:
        """Whether the timer's bucket may already be sealed, so the seal check must follow its write."""
        return timer.due_at < self.seal_limit(now)

    def horizon_end(self, now: datetime) -> datetime:
        """The end of the buckets a sweep starting `now` seals: occurrences before it go out directly."""
        return minute_of(now + self.config.lookahead) + ONE_MINUTE

    def place(self, timer: Timer) -> None:
        """Make sure `timer` will be dispatched (docs/design.md §3.2): write it, then settle it."""
        late_copy = self.is_near(timer, self.clock.now())
        if late_copy:
            self.timers.put_late(timer)
        self.timers.put_timer(timer)
        self.settle(timer, late_copy)

    def settle(self, timer: Timer, late_copy: bool) -> None:
        """After the timer (and, if near-term, its late-lane copy) is stored. Do not reorder:

        1. only after the write, read the bucket's seal, strongly consistent. Unsealed: the sweeper's later
           query is guaranteed to see the timer. Sealed (or behind the watermark): dispatch it here, now;
        2. drop the late-lane copy. A crash before this leaves the copy, which every sweep drains, so no crash
           loses the timer; the duplicates this can cause are absorbed by the ledger.
        The clock is read again after the write, so a process paused between deciding and writing still checks.
        """
        now = self.clock.now()
        if self.is_near(timer, now) and self.timers.is_sealed(self.timers.bucket_of(timer)):
            if not late_copy:
                self.timers.put_late(timer)
                late_copy = True
            self.dispatch([timer], self.horizon_end(now))
        if late_copy:
            self.timers.remove_late(timer)

    def dispatch(
        self,
        timers: Sequence[Timer],
        horizon_end: datetime,
        releases: Counter[str] | None = None,
        *,
        land_on_time: bool = False,
    ) -> int:
        """Dispatch due timers (docs/design.md §3.3). Returns the messages sent. Do not reorder:

        1. advance each timer's chain (a conditional write that also records the plan's instant and horizon),
           so a paused, cancelled or edited job dispatches nothing;
        2. send every planned occurrence;
        3. only then write each chain's next timer.
        A crash anywhere re-runs the timer: a chain that already advanced from it replays the recorded plan (the
        same sends, absorbed by the ledger; the same idempotent put), and since the next timer is written after
        the sends, the chain can never move past a plan whose messages were not sent.

        With `releases` (a bucket sweep), a job that completes is completed with a plain write and its tenant is
        counted in `releases`: the caller releases those shares of the quota with its page checkpoint. Without it (the
        late lane, the API), the completing write releases the slot itself (a transaction).

        `land_on_time` (the sweeper's pages): step 2 times each send so the message lands just before its fire
        time (`send_landing`); the order of the steps is unchanged.
        """
        now = self.clock.now()
        dispatches: list[Dispatch] = []
        next_timers: list[Timer] = []
        for timer in timers:
            sends, following = self._take(timer, now, horizon_end, releases)
            dispatches += sends
            next_timers += following
        sent = self.send(dispatches, land_on_time=land_on_time)
        for following_timer in next_timers:
            self.place(following_timer)
        return len(sent)

    def ensure_sent(self, job: Job) -> int:
        """Before `job` changes version (edit, pause, resume, cancel): make sure what its chain's last advance
        planned was sent. The new version's chain starts after those occurrences and a re-run of the old timer
        is refused by version, so if the run that advanced died before its sends, nothing else would send them.

        The proof is one strongly consistent read: the plan's next timer is written only after its sends, so when
        it is stored the plan was sent, and nothing is sent here. Only when it is missing (the run that advanced
        died or is still running between its advance and that write, or the chain completed) is the plan sent
        again: the same messages, absorbed by the ledger, each judged by the worker against the job as it then is.
        So a change of version costs no message unless a sweep was lost mid-plan. Returns the messages sent."""
        if job.planned_version != job.version or job.advanced_from is None:
            return 0  # no plan at this version (a new chain not yet advanced): nothing to prove
        if job.planned_at is None or job.planned_horizon is None:
            return 0
        if job.next_run_at is not None and self.timers.has_timer(timer_for(job, job.next_run_at)):
            return 0
        plan = self.plan(timer_for(job, job.advanced_from), job.planned_at, job.planned_horizon)
        sent = self.send(plan.dispatches)
        if plan.dispatches:
            log.warning(
                "last plan sent again before a change of version (its next timer is missing)",
                extra={"job_id": job.job_id, "version": job.version, "messages": len(plan.dispatches)},
            )
            self.metrics.count("PlanResent", len(plan.dispatches))
        return len(sent)

    def send(self, dispatches: Sequence[Dispatch], *, defer: bool = True, land_on_time: bool = False) -> list[Dispatch]:
        """Hand messages to the ready queue, each with its own delay, through their tenants' dispatch budgets.
        Returns the ones sent. Do not reorder: what a budget holds back is written as deferred timers (`defer`;
        a backfill keeps its own cursor instead) after the sends and before the caller records its progress
        (bucket checkpoint, late-lane removal), so a crash anywhere re-runs it and loses nothing."""
        if not dispatches:
            return []
        sent, deferred = list(dispatches), []
        if self.admission is not None:
            admitted = self.admission.admit(dispatches)
            sent, deferred = admitted.sent, admitted.deferred
        if self.flow is not None and any(d.flow_key is not None for d in sent):
            # After the tenant's budget: each keyed release at or after the one the budget gave.
            held = self.flow.admit(sent)
            sent, deferred = held.sent, deferred + held.deferred
        if sent:
            aligned = land_on_time and len(sent) >= self.config.landing_min_messages
            if aligned and self.sleep is not None and self.config.landing_window is not None:
                self.send_landing(sent)
            else:
                self.queue.send(sent, self.clock.now())
            self.metrics.count("OccurrencesDispatched", len(sent))
        if defer:
            floor = self.seal_limit(self.clock.now()) + ONE_MINUTE  # a bucket no sweep can have sealed yet
            for dispatch, retry_at in deferred:
                self.place(self._deferred_timer(dispatch, max(retry_at, floor)))
        return sent

    def booked_retry(self, dispatch: Dispatch) -> Dispatch:
        """An occurrence sent again outside a sweep (an operator's retry), its release booked in its flow-control
        key's calendar when it has one."""
        if self.flow is None or dispatch.flow_key is None:
            return dispatch
        return dispatch.deferred_to(self.flow.retry_release(dispatch.tenant, dispatch.flow_key, dispatch.send_at))

    def send_landing(self, dispatches: Sequence[Dispatch]) -> None:
        """Send each message when it will land at most `landing_lead + landing_window` (110 ms) before its time, in
        requests shared with the other buckets of the sweep (step 2 of a sweep's page; `scheduler.core.sweep.landing`).
        Waits at most about a second for the page, billed once for the page rather than once per message. A send
        that falls behind (a page bigger than a second of requests) sends what is overdue at once, soonest due
        first: it lands early rather than late, and is counted (`SendsOffWindow`). Crash-safe as any send: a re-run
        of the page sends everything again."""
        if self._landing is None:
            raise ValueError("landing on time needs a landing window (DispatchConfig) and a sleep (Dispatcher)")
        self._landing.land(dispatches)

    @staticmethod
    def _deferred_timer(dispatch: Dispatch, retry_at: datetime) -> Timer:
        """An occurrence held back by its tenant's budget, as a timer in the bucket of `retry_at` (outside any
        chain: its chain already moved on)."""
        return Timer(**dispatch.occurrence_fields(), defer_until=truncate_ms(retry_at))

    def _take(
        self, timer: Timer, now: datetime, horizon_end: datetime, releases: Counter[str] | None
    ) -> tuple[list[Dispatch], list[Timer]]:
        """Step 1 for one timer: its dispatches and its chain's next timer, once its advance is recorded."""
        if timer.plan is None:
            return [Dispatch.of(timer)], []  # a manual trigger: an extra occurrence outside the chain
        plan = self.plan(timer, now, horizon_end)
        release_by = RELEASE_BY_CHECKPOINT if releases is not None else None
        step = Advance(plan.next_at, plan.dispatched_for, plan.skipped, now, horizon_end, release_by)
        result = self.jobs.advance(timer, step)
        if result.release and releases is not None:
            releases[timer.tenant] += 1
        if not result.proceed:
            log.info(
                "timer superseded or already handled",
                extra={"job_id": timer.job_id, "occurrence_key": timer.key, "job_state": result.job_state},
            )
            self.metrics.count("OccurrencesSkipped")
            return [], []
        if result.replay is not None:
            plan = self.plan(timer, *result.replay)  # the run that advanced this chain may have died before sending
        elif (
            result.job is not None
            and _message_carries_copy_of(result.job, self.config.job_copy_max_bytes)
            and len(plan.dispatches) == 1
        ):
            plan = replace(plan, dispatches=[replace(plan.dispatches[0], job_copy=result.job)])
        elif plan.skipped:
            log.info(
                "misfire", extra={"job_id": timer.job_id, "policy": timer.plan.misfire_policy, "skipped": plan.skipped}
            )
            self.metrics.count("MisfireSkipped", plan.skipped)
        following = []
        if plan.next_at is not None and result.put_next:
            next_fire = fire_at(timer.job_id, plan.next_at, timer.plan.jitter_seconds)
            following.append(
                Timer(
                    timer.job_id,
                    timer.tenant,
                    plan.next_at,
                    next_fire,
                    timer.version,
                    "scheduled",
                    timer.priority,
                    timer.flow_key,
                    plan=timer.plan,
                )
            )
        return plan.dispatches, following

    def plan(self, timer: Timer, now: datetime, horizon_end: datetime) -> Plan:
        """What a due scheduled timer dispatches at `now` (docs/design.md §3.3, §3.5): a pure function of the timer,
        `now` and the horizon, so a re-run with the recorded `now` and horizon reproduces it exactly."""
        assert timer.plan is not None
        chain = timer.plan

        def fire(at: datetime) -> datetime:
            return fire_at(timer.job_id, at, chain.jitter_seconds)

        due: list[datetime]
        skipped = 0
        cursor = timer.scheduled_for
        if now - timer.fire_at > self.config.misfire_grace:
            missed = [timer.scheduled_for]
            while len(missed) < MAX_EXPANSION:
                nxt = next_occurrence(chain.schedule, missed[-1], chain.anchor)
                if nxt is None or nxt > now:
                    break
                missed.append(nxt)
            cursor = missed[-1]
            if chain.misfire_policy == "run_once":
                due = [missed[-1]]
            elif chain.misfire_policy == "skip":
                due = []
            else:
                cutoff = now - self.config.catchup_window
                due = [m for m in missed if m >= cutoff]
            skipped = len(missed) - len(due)
        else:
            due = [timer.scheduled_for]

        # Occurrences inside the buckets this pass seals, or near enough that their bucket might be sealed, go
        # out now with their own delays; so the next timer is never written into a sealed bucket. A resumed
        # chain's first plan leaves out those the previous version already queued and that are not due yet - but
        # not those due within the clock-skew allowance (`seal_margin`): a worker whose clock runs that far ahead
        # may already have found the job paused and dropped their old message (sent again; the ledger keeps one).
        not_yet_due = now + self.config.seal_margin
        nxt = next_occurrence(chain.schedule, cursor, chain.anchor) if is_recurring(chain.schedule) else None
        while nxt is not None and len(due) < MAX_EXPANSION:
            if fire(nxt) >= max(horizon_end, self.seal_limit(now)):
                break
            cursor = nxt
            if not (timer.queued_until is not None and not_yet_due < nxt < timer.queued_until):
                due.append(nxt)
            nxt = next_occurrence(chain.schedule, cursor, chain.anchor)

        dispatches = [
            Dispatch(
                timer.job_id, timer.tenant, at, fire(at), timer.version, "scheduled", timer.priority, timer.flow_key
            )
            for at in due
        ]
        return Plan(dispatches, skipped, cursor, nxt)
