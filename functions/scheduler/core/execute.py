"""The execution protocol (docs/design.md §3.4): claim in the ledger, run with a fencing token, record the outcome.

At-least-once delivery becomes exactly-once effect here: every attempt of an occurrence carries the same
occurrence key, every claim bumps the epoch (the fencing token), and every write after the claim is
conditional on that epoch, so a worker that paused past its lease can never record anything.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from scheduler.core.concurrency import RESEND_AFTER, ConcurrencyGate, Permit, throttle_wait
from scheduler.core.dispatch import fire_at
from scheduler.core.errors import ClaimRefused, Fenced, LeaseLost
from scheduler.core.events import Outbox
from scheduler.core.heartbeat import Heartbeat
from scheduler.core.ids import RANDOM_IDS
from scheduler.core.model import Job, JobState, RunState
from scheduler.core.ports import (
    Attempt,
    AttemptEnd,
    Between,
    Clock,
    Dispatch,
    Execution,
    Heartbeats,
    Ids,
    JobReader,
    Ledger,
    MessageControl,
    Metrics,
    ReadyQueue,
    TargetCall,
    TargetFailure,
    TargetInvoker,
)
from scheduler.core.retry import MAX_HIDE_SECONDS, backoff, may_retry
from scheduler.core.schedules import is_occurrence, is_recurring, unindexed_occurrence

log = logging.getLogger(__name__)

#: Renewals of an aged lease before a target call, before the attempt is given back (each renewal paused as long).
RENEWALS_BEFORE_CALL = 3
#: Runs read per page when looking for what overlaps (the run history, newest first). The index lists keys only
#: and each run on a page is read by key, so the first page is one run (the one before is nearly always the
#: holder candidate), and each page after it is four times the one before, up to OVERLAP_PAGE.
OVERLAP_FIRST_PAGE = 1
OVERLAP_PAGE = 50


class _CopyVoid(Exception):
    """The claim made on a message's copy of its job was refused: the job changed since (Ledger.void_copies)."""


@dataclass(frozen=True)
class ExecuteConfig:
    lease: timedelta
    #: A message this early (or less) waits in the worker instead of being hidden again (sub-second precision).
    early_wait_max: timedelta = timedelta(seconds=2)
    #: Added to hides that wait for someone else's lease, so the lease has surely ended when we look again.
    lease_margin_seconds: int = 2
    #: Heartbeat period as a fraction of the lease; None disables the background heartbeat (which needs the
    #: Executor's `heartbeats`).
    heartbeat_fraction: float | None = 1 / 3
    #: Whether a job that does not say (`events` left out of its spec) has its outcomes announced, when there is
    #: an outbox at all. The deployed default is off (Settings.completion_events_default).
    events_by_default: bool = True
    #: An occurrence started later than this after its fire time is a misfire: a `run_all` job catches it up.
    misfire_grace: timedelta = timedelta(seconds=60)


class Why(StrEnum):
    """Why the worker acknowledges or keeps a message (the control flow tests these, never free text)."""

    RECORDED = "recorded"  #: the attempt's outcome is in the ledger (acknowledged; kept while a retry waits)
    EARLY = "early"  #: the message came before its fire time: back at it
    NO_SUCH_JOB = "no such job"
    LEFT_TO_RESUME = "left to the resume"  #: fell due while paused: the resume decides it
    THROTTLED = "throttled"  #: the tenant's execution budget is full
    CLAIM_REFUSED = "claim refused without an item"
    ALREADY = "already"  #: the occurrence is already final (detail: its state)
    RUNNING_ELSEWHERE = "running elsewhere"  #: another worker holds a live lease
    RECONCILING = "reconciling"  #: an ambiguous at-most-once attempt waits for an operator
    RACED = "raced"  #: the ledger changed between read and claim: look again
    RETRY_NOT_DUE = "retry not due"
    NOT_CLAIMABLE = "not claimable"  #: (detail: its state)
    FENCED = "fenced"  #: a newer attempt took over: this one's writes are refused
    BUFFERED = "buffered"  #: parked behind the running occurrence (buffer_one, catch-ups)
    LEASE_LOST = "lease lost"
    RETRY = "retry"  #: a failed attempt, retried after its backoff
    DEAD = "dead"  #: out of attempts: dead-lettered
    SETTLED = "settled"  #: a message of several occurrences: each recorded, final, or sent again on its own


@dataclass(frozen=True)
class Outcome:
    """What to do with the SQS message: acknowledge (delete) it, or hide it for `hide_seconds` and keep it."""

    ack: bool
    why: Why
    hide_seconds: int = 0
    #: What else a log line or a trace should say (e.g. the state an occurrence is already in).
    detail: str = ""

    @property
    def reason(self) -> str:
        """`why`, and the detail if any: for logs, traces and the worker's report."""
        return f"{self.why.value}: {self.detail}" if self.detail else self.why.value

    @classmethod
    def acknowledge(cls, why: Why, detail: str = "") -> Outcome:
        return cls(True, why, detail=detail)

    @classmethod
    def hide(cls, seconds: float, why: Why, detail: str = "") -> Outcome:
        return cls(False, why, max(1, min(MAX_HIDE_SECONDS, math.ceil(seconds))), detail)


@dataclass(eq=False)
class Executor:
    """Runs one dispatched occurrence; returns what to do with its message."""

    jobs: JobReader
    ledger: Ledger
    queue: ReadyQueue
    targets: Mapping[str, TargetInvoker]
    clock: Clock
    config: ExecuteConfig
    metrics: Metrics
    worker_id: str
    sleep: Callable[[float], None] = time.sleep
    #: Publishes completion events right after the write that records a terminal outcome (None: the
    #: sweeper's outbox drain publishes them all).
    outbox: Outbox | None = None
    #: Per-tenant execution slots (None: no execution budgets).
    gate: ConcurrencyGate | None = None
    #: Draws each attempt's owner suffix.
    ids: Ids = RANDOM_IDS
    #: Extends the lease in the background while a target that cannot heartbeat itself runs.
    heartbeats: Heartbeats | None = None

    def __post_init__(self) -> None:
        if self.config.heartbeat_fraction and self.heartbeats is None:
            raise ValueError("a background heartbeat (ExecuteConfig.heartbeat_fraction) needs Heartbeats")

    def execute(self, dispatch: Dispatch, message: MessageControl) -> Outcome:
        now = self.clock.now()
        early = (dispatch.fire_at - now).total_seconds()
        if early > 0:
            # Never start before the fire time: wait out a sub-second remainder, hide anything earlier.
            if early > self.config.early_wait_max.total_seconds():
                return Outcome.hide(early, Why.EARLY)
            self.sleep(early)
            now = self.clock.now()

        # A one-shot occurrence comes with a copy of its job (Dispatch.job_copy): no read, unless a change of the job
        # since has voided the copy, which the claim finds out (below).
        job = dispatch.job_copy if dispatch.job_copy is not None else self.jobs.get(dispatch.job_id)
        if job is None or job.tenant != dispatch.tenant:
            if self.ledger.record_unclaimed(dispatch, RunState.CANCELLED, now, "job does not exist"):
                self._announce(dispatch.key)
            return Outcome.acknowledge(Why.NO_SUCH_JOB)
        if (
            dispatch.kind == "scheduled"
            and job.left_to_resume(dispatch.scheduled_for, dispatch.version)
            and self.ledger.get(dispatch.key) is None
        ):
            # Fell due while the job was paused: the resume's misfire policy decides it (JobService.resume), so it
            # is not recorded SKIPPED here (a record would refuse the resumed chain's dispatch of the same key).
            self.metrics.count("PausedOccurrences")
            log.info(
                "occurrence left to the resume's misfire policy",
                extra={"job_id": dispatch.job_id, "occurrence_key": dispatch.key, "job_state": job.state.value},
            )
            return Outcome.acknowledge(Why.LEFT_TO_RESUME)

        # The slot and the claim hold from when they are taken: a worker paused since the message came (reading the
        # job) would take both with leases already over, and call the target beside the next holder (found by the
        # simulator, seed 9120).
        now = self.clock.now()
        # Each attempt has its own owner id, so even this worker's own earlier attempt is fenced.
        owner = f"{self.worker_id}/{self.ids.token()}"
        # The tenant's execution budget: one of its slots for this attempt, or come back later.
        permit: Permit | None = Permit.unlimited(dispatch.tenant, owner)
        if self.gate is not None:
            permit = self.gate.enter(dispatch.tenant, owner, now, now + self.config.lease)
        if permit is None:
            return self._throttled(dispatch, message, now)
        try:
            return self._attempt(job, dispatch, owner, permit, message)
        except _CopyVoid:
            pass
        finally:
            permit.release()
        # The job changed after the advance that sent this copy of it: judge the occurrence on the job as it is now.
        self.metrics.count("JobCopiesVoid")
        log.info(
            "the job changed since its copy was sent: read it",
            extra={"job_id": dispatch.job_id, "occurrence_key": dispatch.key, "copy_version": dispatch.version},
        )
        return self.execute(replace(dispatch, job_copy=None), message)

    def _attempt(self, job: Job, dispatch: Dispatch, owner: str, permit: Permit, message: MessageControl) -> Outcome:
        ctx = {"job_id": dispatch.job_id, "occurrence_key": dispatch.key}
        now = self.clock.now()  # the claim's lease starts now, whatever taking the slot took
        # Step 1: claim.
        take_over = job.spec.delivery == "at_least_once"
        try:
            on_copy = dispatch.job_copy is not None
            attempt = Attempt(owner, now, now + self.config.lease, take_over, self._indexed(job, dispatch), on_copy)
            execution = self.ledger.claim(dispatch, attempt)
        except ClaimRefused as refused:
            if refused.void_copy:
                raise _CopyVoid() from refused
            return self._not_claimed(dispatch, refused.current, now, self._announces(job))

        ctx["epoch"] = str(execution.epoch)
        # Step 3: the job may have been cancelled, paused or rescheduled since this occurrence was dispatched.
        skip = self._skip_reason(job, dispatch)
        if skip is not None:
            state, reason = skip
            return self._record(job, execution, owner, AttemptEnd(state, error=reason))

        overlap = self._overlap(job, dispatch, execution, owner, now)
        if overlap is not None:
            return overlap

        lateness = (now - dispatch.fire_at).total_seconds()
        if dispatch.kind != "backfill":  # a backfilled occurrence is late by design: it would drown the metric
            self.metrics.count("StartLatenessSeconds", max(0.0, lateness), unit="Seconds")
        # DEBUG: the outcome's line says it all for an attempt that ends (one INFO line an occurrence: CloudWatch Logs
        # bills each byte, docs/cost.md); a worker that dies mid-call is found by its lease, not by this line.
        log.debug("occurrence started", extra={**ctx, "attempt": execution.attempts, "lateness_s": lateness})
        return self._run(job, dispatch, execution, owner, message, permit)

    def _throttled(self, dispatch: Dispatch, message: MessageControl, now: datetime) -> Outcome:
        """The tenant is at its execution concurrency limit: the occurrence waits (never dropped). After a few
        receives it goes back as a fresh message, so the ready queue's maxReceiveCount never dead-letters it."""
        wait = throttle_wait(message.receive_count, dispatch.key)
        self.metrics.count("TenantConcurrencyDelaySeconds", wait, unit="Seconds")
        log.info(
            "tenant at its execution concurrency limit: delayed",
            extra={
                "tenant": dispatch.tenant,
                "job_id": dispatch.job_id,
                "occurrence_key": dispatch.key,
                "wait_s": wait,
            },
        )
        if message.receive_count >= RESEND_AFTER:
            try:
                self.queue.send([dispatch.deferred_to(now + timedelta(seconds=wait))], now)
            except Exception:  # keep this message instead; the next receive tries again
                log.exception("throttled occurrence not sent again", extra={"occurrence_key": dispatch.key})
                return Outcome.hide(wait, Why.THROTTLED)
            return Outcome.acknowledge(Why.THROTTLED, "sent again")
        return Outcome.hide(wait, Why.THROTTLED)

    def _not_claimed(self, dispatch: Dispatch, current: Execution | None, now: datetime, announce: bool) -> Outcome:
        """Step 2: the claim failed; decide from the item as it stands."""
        if current is None:
            return Outcome.hide(1, Why.CLAIM_REFUSED)
        if current.state.terminal:
            if current.outbox:
                # The holder recorded the outcome but may have died before publishing it: publish it now
                # rather than at the next sweep (a duplicate event is deduped by its consumers).
                self._announce(current.key, current)
            if current.state == RunState.DEAD and not current.dead_lettered:
                # The holder recorded DEAD but may have died before the DLQ send: finish its job.
                self.queue.dead_letter(dispatch, current)
                self.ledger.mark_dead_lettered(current.key)
            return Outcome.acknowledge(Why.ALREADY, current.state.value)
        if current.state == RunState.RUNNING:
            assert current.lease_until is not None
            if current.lease_until > now:
                # Maybe the holder's own message redelivered: keep it, look again when the lease has ended.
                wait = (current.lease_until - now).total_seconds() + self.config.lease_margin_seconds
                return Outcome.hide(wait, Why.RUNNING_ELSEWHERE)
            # Expired lease on an at-most-once job: the outcome of the lost attempt is unknown.
            if self.ledger.expire_to(
                current.key,
                current.epoch,
                RunState.RECONCILING,
                now,
                "worker lost mid-run; outcome unknown",
                announce=announce,
            ):
                self.metrics.count("Reconciling")
                self._announce(current.key)
                return Outcome.acknowledge(Why.RECONCILING)
            return Outcome.hide(1, Why.RACED)
        if current.state == RunState.RETRY_WAIT and current.next_attempt_at is not None:
            return Outcome.hide((current.next_attempt_at - now).total_seconds(), Why.RETRY_NOT_DUE)
        return Outcome.hide(1, Why.NOT_CLAIMABLE, current.state.value)

    def _announce(self, key: str, recorded: Execution | None = None) -> None:
        """Publish the outcome just recorded for `key`. Never fails the occurrence: whatever is not published
        here stays in the outbox, which the sweeper drains."""
        if self.outbox is None:
            return
        try:
            self.outbox.flush(recorded if recorded is not None else self.ledger.get(key))
        except Exception:
            log.exception("completion event left to the outbox drain", extra={"occurrence_key": key})

    def _skip_reason(self, job: Job, dispatch: Dispatch) -> tuple[RunState, str] | None:
        if job.state == JobState.CANCELLED:
            return RunState.CANCELLED, "job cancelled"
        if job.state == JobState.PAUSED:
            return RunState.SKIPPED, "job paused"
        if (
            dispatch.kind == "scheduled"
            and job.version != dispatch.version
            and not is_occurrence(job.spec.schedule, dispatch.scheduled_for, job.created_at)
        ):
            return RunState.SKIPPED, f"superseded: the schedule changed in version {job.version}"
        return None

    def _overlap(self, job: Job, dispatch: Dispatch, execution: Execution, owner: str, now: datetime) -> Outcome | None:
        """Overlap policy for recurring jobs (docs/design.md §3.5): is an earlier occurrence still running?

        `skip` records this one SKIPPED; `buffer_one` parks it (RETRY_WAIT, the attempt refunded) until the
        running one finishes - the worker that finishes it sends the parked one at once (`_release_buffered`);
        the running one's lease end is only the fallback - and skips it if another is already parked; `allow`
        runs it. Read from the run history index, so it is a policy, best effort within the index's lag, not a
        safety property (the ledger and the fencing token are what keep effects exactly-once).
        """
        policy = job.spec.overlap_policy
        if policy == "allow" or dispatch.kind != "scheduled" or not is_recurring(job.spec.schedule):
            return None
        earlier = self._overlap_window(job.job_id, dispatch.scheduled_for, execution.key)
        running = [r for r in earlier if r.leased(now)]
        # A parked run is about to start (the run it waited for has finished and sent it): it holds the place too,
        # or this one would start beside it. One not parked again for two leases has lost its message: ignored.
        stale = now - 2 * self.config.lease
        parked = [r for r in earlier if r.buffered and (r.updated_at is None or r.updated_at > stale)]
        if not running and not parked:
            return None
        margin = timedelta(seconds=self.config.lease_margin_seconds)
        if running:
            holder, why = running[0], f"{running[0].key} is still running"
            assert holder.lease_until is not None
            fallback = holder.lease_until + margin
        else:
            holder, why = parked[-1], f"{parked[-1].key} is about to run"
            fallback = now + self.config.lease + margin
        self.metrics.count("OverlapDetected")
        # A catch-up (what a resume or a `run_all` misfire sends goes out together) is never skipped for overlap:
        # each waits behind the one before it, so they run one after another, oldest first - never side by side,
        # as `skip` and `buffer_one` mean, and none lost to the others' lateness.
        if not self._catching_up(job, dispatch, now) and (policy == "skip" or parked):
            reason = f"overlap: {why}" + (" and one run is already buffered" if parked and running else "")
            skipped = AttemptEnd(RunState.SKIPPED, error=reason, overlapped=holder.key)
            return self._record(job, execution, owner, skipped)
        try:
            # Claimable at once (a duplicate delivery re-checks the overlap and parks it again); its message is
            # hidden until the holder's lease ends (a parked holder: a lease from now), in case the holder's worker
            # dies before it can release it.
            self.ledger.finish(execution.key, owner, execution.epoch, now, AttemptEnd.buffered(holder.key, now))
        except Fenced:
            self.metrics.count("FencedWrites")
            return Outcome.hide(self.config.lease.total_seconds(), Why.FENCED)
        log.info(
            "occurrence buffered behind a running one",
            extra={"job_id": job.job_id, "occurrence_key": execution.key, "holder": holder.key},
        )
        if not self._still_holds(holder.key, now):
            # The holder finished (or lost its lease) between the read above and the park: its worker may have
            # looked for parked runs before this one was parked, and then nobody would send it before the
            # fallback, a lease later. Look again in a second instead (a lost wake-up, closed from this side).
            self.metrics.count("BufferedRecheck")
            return Outcome.hide(1, Why.BUFFERED, "the holder finished while this one was parked")
        return Outcome.hide((fallback - now).total_seconds(), Why.BUFFERED)

    def _still_holds(self, key: str, now: datetime) -> bool:
        """Whether the run `key` still holds the place (read consistently, after the park was written): running
        with a live lease, or parked itself. Its worker then reads the parked runs after it finishes, so it sees
        the park just written (within the run index's lag)."""
        holder = self.ledger.get(key)
        return holder is not None and (holder.leased(now) or holder.buffered)

    def _catching_up(self, job: Job, dispatch: Dispatch, now: datetime) -> bool:
        """Whether this occurrence is caught up rather than on time, so it overlaps only because it was held back:
        it fell due while the job was paused and its resume sent it (missed by less than the misfire grace, or
        what the misfire policy runs), or it is a `run_all` misfire, found later than the grace after its own
        fire time (a released buffered one keeps its occurrence's fire time, not the release's)."""
        paused, resumed = job.paused_at, job.resumed_at
        if paused is not None and resumed is not None and paused < dispatch.scheduled_for <= resumed:
            return True
        if job.spec.misfire_policy != "run_all":
            return False
        due = fire_at(job.job_id, dispatch.scheduled_for, job.spec.jitter_seconds)
        return now - due > self.config.misfire_grace

    def _overlap_window(self, job_id: str, before: datetime, exclude: str) -> list[Execution]:
        """The runs scheduled before `before`, newest first, down to the first that is neither skipped for overlap
        nor buffered: that one is the candidate holder. Whatever the history's length, only what overlapped it is
        read (paged), never a fixed number of recent runs."""
        window: list[Execution] = []
        cursor: str | None = None
        size = OVERLAP_FIRST_PAGE
        while True:
            page, cursor = self.ledger.runs(job_id, size, cursor, within=Between(before=before))
            size = min(OVERLAP_PAGE, 4 * size)
            for run in page:
                if run.key == exclude or run.scheduled_for >= before:
                    continue
                window.append(run)
                if not (run.buffered or run.overlap_skipped):
                    return window
            if cursor is None:
                return window

    def _release_buffered(self, job: Job, finished: Dispatch) -> None:
        """The running occurrence `finished` has finished: send the run parked behind it (buffer_one) at once, so it
        starts now rather than when the lease would have ended. Never fails the finished occurrence."""
        try:
            cursor: str | None = None
            while True:
                page, cursor = self.ledger.runs(
                    job.job_id, OVERLAP_PAGE, cursor, within=Between(after=finished.scheduled_for)
                )
                newer = [r for r in page if r.scheduled_for > finished.scheduled_for]
                parked = [r for r in newer if r.buffered]
                if parked:
                    run = parked[-1]  # the oldest parked one (one, or a run_all catch-up's queue of them)
                    now = self.clock.now()
                    again = Dispatch(
                        job.job_id, job.tenant, run.scheduled_for, now, job.version, "scheduled", job.spec.priority
                    )
                    self.queue.send([again], now)
                    log.info(
                        "buffered occurrence released",
                        extra={"job_id": job.job_id, "occurrence_key": run.key, "behind": finished.key},
                    )
                    return
                if cursor is None or len(newer) < len(page):
                    return
        except Exception:  # its message comes back when the holder's lease would have ended
            log.exception("buffered occurrence not released", extra={"job_id": job.job_id})

    def _run(
        self,
        job: Job,
        dispatch: Dispatch,
        execution: Execution,
        owner: str,
        message: MessageControl,
        permit: Permit,
    ) -> Outcome:
        key = execution.key
        lease_s = self.config.lease.total_seconds()

        held_until = execution.lease_until

        def renew() -> bool:
            """Step 4: extend the lease (conditional on owner and epoch: LeaseLost if another attempt took it), the
            execution slot and the message's visibility. Returns whether the slot is still this attempt's."""
            nonlocal held_until
            lease_until = self.clock.now() + self.config.lease
            self.ledger.heartbeat(key, owner, execution.epoch, lease_until)
            held_until = lease_until
            kept = permit.extend(lease_until)
            message.extend_visibility(math.ceil(lease_s) + self.config.lease_margin_seconds)
            return kept

        def heartbeat() -> None:
            renew()

        # Paused since the claim (the overlap check's read, a starved CPU) for longer than a heartbeat's interval,
        # the lease, and the execution slot's with it, may have ended, and another attempt may have taken the slot:
        # a target called now would run beside it (found by the simulator, seed 1149). Renew both first (again if
        # the renewal itself was paused that long); never call the target on a lease or a slot that is gone.
        renewals = 0
        while self._lease_aged(held_until, permit):
            if renewals == RENEWALS_BEFORE_CALL:
                return self._give_back(dispatch, execution, owner, message, "lease kept ageing")
            renewals += 1
            self.metrics.count("LeaseRenewedBeforeCall")
            try:
                kept = renew()
            except LeaseLost:
                self.metrics.count("LeaseLost")
                log.warning(
                    "lease lost before the call: not called", extra={"job_id": job.job_id, "occurrence_key": key}
                )
                return Outcome.hide(lease_s, Why.LEASE_LOST)
            if not kept:
                return self._give_back(dispatch, execution, owner, message, "execution slot lost")
        invoker = self.targets.get(job.spec.target.type)
        call = TargetCall(
            job=job,
            occurrence_key=key,
            scheduled_for=dispatch.scheduled_for,
            attempt=execution.attempts,
            fencing_token=execution.epoch,
            heartbeat=heartbeat,
            deadline=self.clock.now() + self.config.lease,
        )
        interval = lease_s * self.config.heartbeat_fraction if self.config.heartbeat_fraction else None
        failure: TargetFailure | None = None
        result: str | None = None
        with Heartbeat(self.heartbeats, heartbeat, interval) as beat:
            try:
                if invoker is None:
                    raise TargetFailure("permanent", f"no target adapter for type '{job.spec.target.type}'")
                result = invoker.invoke(call)
            except TargetFailure as exc:
                failure = exc
            except LeaseLost:
                beat.lost = True
            except Exception as exc:
                # A crash inside a handler target: it may have acted before it raised. Ambiguous: retried for an
                # at-least-once job, RECONCILING for an at-most-once one (never run twice).
                log.exception("target raised", extra={"job_id": job.job_id, "occurrence_key": key})
                failure = TargetFailure("ambiguous", f"{type(exc).__name__}: {exc}")
        if beat.lost:
            # Step 4: LeaseLost means abort now and never write; the new holder owns the occurrence.
            self.metrics.count("LeaseLost")
            log.warning("lease lost; aborting", extra={"job_id": job.job_id, "occurrence_key": key})
            return Outcome.hide(lease_s, Why.LEASE_LOST)
        if failure is None:
            outcome = self._record(job, execution, owner, AttemptEnd(RunState.SUCCEEDED, result=result))
        else:
            outcome = self._failed(job, dispatch, execution, owner, failure)
        parks = job.spec.overlap_policy == "buffer_one" or (
            job.spec.overlap_policy == "skip" and self._catching_up(job, dispatch, self.clock.now())
        )
        if parks and outcome.why is not Why.FENCED:
            self._release_buffered(job, dispatch)
        return outcome

    def _lease_aged(self, held_until: datetime | None, permit: Permit) -> bool:
        """Whether a heartbeat would have been due by now had the target been called when the lease was last
        renewed: less of it (or of the slot's) is left than what the background heartbeat keeps."""
        fraction = self.config.heartbeat_fraction or 0.5
        keeps = self.config.lease * (1 - fraction)
        ends = [end for end in (held_until, permit.lease_until) if end is not None]
        return bool(ends) and min(ends) - self.clock.now() < keeps

    def _give_back(
        self, dispatch: Dispatch, execution: Execution, owner: str, message: MessageControl, why: str
    ) -> Outcome:
        """The claim is still this attempt's but its execution slot may not be (another attempt took it while this
        one was paused, or the renewals kept ageing): give the attempt back, uncalled, and wait for a slot like a
        throttled attempt."""
        now = self.clock.now()
        log.warning(f"{why} before the call: not called", extra={"occurrence_key": execution.key})
        try:
            refund = AttemptEnd(
                RunState.RETRY_WAIT, error=f"{why} before the call", next_attempt_at=now, refund_attempt=True
            )
            self.ledger.finish(execution.key, owner, execution.epoch, now, refund)
        except Fenced:
            self.metrics.count("FencedWrites")
            return Outcome.hide(self.config.lease.total_seconds(), Why.FENCED)
        return self._throttled(dispatch, message, now)

    def _failed(
        self, job: Job, dispatch: Dispatch, execution: Execution, owner: str, failure: TargetFailure
    ) -> Outcome:
        """Step 6: classify and record: RETRY_WAIT with backoff, DEAD, or RECONCILING."""
        self.metrics.count("TargetFailures")
        now = self.clock.now()
        error = f"attempt {execution.attempts}: {failure.kind}: {failure.message}"[:1000]
        if failure.kind == "ambiguous" and job.spec.delivery == "at_most_once":
            return self._record(job, execution, owner, AttemptEnd(RunState.RECONCILING, error=error))
        if failure.kind != "permanent":
            delay = backoff(job.spec.retry, execution.attempts, execution.key, failure.retry_after)
            retry_at = now + delay
            if may_retry(job.spec.retry, execution.attempts, dispatch.scheduled_for, retry_at):
                retry = AttemptEnd(RunState.RETRY_WAIT, error=error, next_attempt_at=retry_at)
                outcome = self._record(job, execution, owner, retry)
                if outcome.why is Why.RECORDED:
                    self.metrics.count("Retries")
                    log.info("retry scheduled", extra={"occurrence_key": execution.key, "in_s": delay.seconds})
                    return Outcome.hide(delay.total_seconds(), Why.RETRY)
                return outcome
        outcome = self._record(job, execution, owner, AttemptEnd(RunState.DEAD, error=error))
        if outcome.why is not Why.RECORDED:
            return outcome
        dead = self.ledger.get(execution.key) or execution
        self.queue.dead_letter(dispatch, dead)
        self.ledger.mark_dead_lettered(execution.key)
        self.metrics.count("DeadLetters")
        log.error("occurrence dead", extra={"job_id": job.job_id, "occurrence_key": execution.key, "error": error})
        return Outcome.acknowledge(Why.DEAD)

    @staticmethod
    def _indexed(job: Job, dispatch: Dispatch) -> bool:
        """Whether the occurrence's ledger item goes into the run-history index: all but a one-shot job's scheduled
        occurrence, which the run history reads by its key (and no overlap policy reads: it is not recurring)."""
        if dispatch.kind != "scheduled":
            return True
        return unindexed_occurrence(job.spec.schedule, job.created_at) != dispatch.scheduled_for

    def _announces(self, job: Job) -> bool:
        """Whether `job`'s terminal outcomes are published (its own `events`, else the default); False without an
        outbox. Nothing is written to the outbox for the others: no event, no index write, no clear."""
        if self.outbox is None:
            return False
        return job.spec.events if job.spec.events is not None else self.config.events_by_default

    def _record(self, job: Job, execution: Execution, owner: str, end: AttemptEnd) -> Outcome:
        """Step 5: a write conditioned on our epoch and owner. A stale worker's write is rejected (fenced).
        A terminal outcome is then announced (its outbox entry was recorded by the same write)."""
        state = end.state
        try:
            recorded = self.ledger.finish(
                execution.key, owner, execution.epoch, self.clock.now(), replace(end, announce=self._announces(job))
            )
        except Fenced:
            self.metrics.count("FencedWrites")
            log.warning("fenced write rejected", extra={"occurrence_key": execution.key, "epoch": execution.epoch})
            return Outcome.hide(self.config.lease.total_seconds(), Why.FENCED)
        recorded_as: dict[str, Any] = {
            "job_id": job.job_id,
            "occurrence_key": execution.key,
            "state": state.value,
            "error": end.error,
            "attempt": execution.attempts,
        }
        if execution.updated_at is not None:  # the claim's instant: how late this attempt started
            due = fire_at(job.job_id, execution.scheduled_for, job.spec.jitter_seconds)
            recorded_as["lateness_s"] = round((execution.updated_at - due).total_seconds(), 3)
        log.info("occurrence recorded", extra=recorded_as)
        if state.terminal:
            self._announce(execution.key, recorded)
        if state == RunState.RETRY_WAIT:
            return Outcome(False, Why.RECORDED)
        return Outcome(True, Why.RECORDED)
