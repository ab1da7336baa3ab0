"""The overlap policy of recurring jobs (docs/design.md §3.5): is an earlier occurrence still running?

`skip` records this one SKIPPED; `buffer_one` parks it (RETRY_WAIT, the attempt refunded) until the running one
finishes - the worker that finishes it sends the parked one at once (`Overlap.release_parked`); the running one's
lease end is only the fallback - and skips it if another is already parked; `allow` runs it. Read from the run
history index, so it is a policy, best effort within the index's lag, not a safety property (the ledger and the
fencing token are what keep effects exactly-once).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.core.errors import Fenced
from scheduler.core.execution.claimed import Claimed
from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.record import Recorder
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.model.job import Job, RunState
from scheduler.core.model.keys import fire_at
from scheduler.core.model.schedules import is_recurring
from scheduler.core.ports import AttemptEnd, Between, Dispatch, Execution
from scheduler.core.tenancy.flow_control import FlowKeys

log = logging.getLogger(__name__)

#: Runs read per page when looking for what overlaps (the run history, newest first). The index lists keys only
#: and each run on a page is read by key, so the first page is one run (the one before is nearly always the
#: holder candidate), and each page after it is four times the one before, up to OVERLAP_PAGE.
OVERLAP_FIRST_PAGE = 1
OVERLAP_PAGE = 50


@dataclass(frozen=True)
class Overlap:
    ports: StepPorts
    recorder: Recorder
    #: Books a released parked run in its flow-control key's calendar (None: no flow control).
    flow: FlowKeys | None = None

    def check(self, claimed: Claimed) -> Claimed | Outcome:
        """Step 4: what becomes of the claimed occurrence when an earlier one still holds the place (skipped or
        parked); the claimed occurrence when it runs."""
        job, dispatch, execution, now = claimed.job, claimed.dispatch, claimed.execution, claimed.at
        policy = job.spec.overlap_policy
        if policy == "allow" or dispatch.kind != "scheduled" or not is_recurring(job.spec.schedule):
            return claimed
        earlier = self._window(job.job_id, dispatch.scheduled_for, execution.key)
        running = [r for r in earlier if r.leased(now)]
        # A parked run is about to start (the run it waited for has finished and sent it): it holds the place too,
        # or this one would start beside it. One not parked again for two leases has lost its message: ignored.
        stale = now - 2 * self.ports.config.lease
        parked = [r for r in earlier if r.buffered and (r.updated_at is None or r.updated_at > stale)]
        if not running and not parked:
            return claimed
        margin = timedelta(seconds=self.ports.config.lease_margin_seconds)
        if running:
            holder, why = running[0], f"{running[0].key} is still running"
            assert holder.lease_until is not None
            fallback = holder.lease_until + margin
        else:
            holder, why = parked[-1], f"{parked[-1].key} is about to run"
            fallback = now + self.ports.config.lease + margin
        self.ports.metrics.count("OverlapDetected")
        # A catch-up (what a resume or a `run_all` misfire sends goes out together) is never skipped for overlap:
        # each waits behind the one before it, so they run one after another, oldest first - never side by side,
        # as `skip` and `buffer_one` mean, and none lost to the others' lateness.
        if not self.catching_up(job, dispatch, now) and (policy == "skip" or parked):
            reason = f"overlap: {why}" + (" and one run is already buffered" if parked and running else "")
            return self.recorder.record(claimed, AttemptEnd(RunState.SKIPPED, error=reason, overlapped=holder.key))
        return self._park(claimed, holder, fallback)

    def _park(self, claimed: Claimed, holder: Execution, fallback: datetime) -> Outcome:
        """Park the claimed occurrence behind `holder` (buffer_one, or a catch-up behind the one before it)."""
        execution, now = claimed.execution, claimed.at
        try:
            # Claimable at once (a duplicate delivery re-checks the overlap and parks it again); its message is
            # hidden until the holder's lease ends (a parked holder: a lease from now), in case the holder's worker
            # dies before it can release it.
            self.ports.ledger.finish(
                execution.key, claimed.owner, execution.epoch, now, AttemptEnd.buffered(holder.key, now)
            )
        except Fenced:
            self.ports.metrics.count("FencedWrites")
            return Outcome.hide(self.ports.config.lease.total_seconds(), Why.FENCED)
        log.info(
            "occurrence buffered behind a running one",
            extra={"job_id": claimed.job.job_id, "occurrence_key": execution.key, "holder": holder.key},
        )
        if not self._still_holds(holder.key, now):
            # The holder finished (or lost its lease) between the read above and the park: its worker may have
            # looked for parked runs before this one was parked, and then nobody would send it before the
            # fallback, a lease later. Look again in a second instead (a lost wake-up, closed from this side).
            self.ports.metrics.count("BufferedRecheck")
            return Outcome.hide(1, Why.BUFFERED, "the holder finished while this one was parked")
        return Outcome.hide((fallback - now).total_seconds(), Why.BUFFERED)

    def parks(self, job: Job, dispatch: Dispatch) -> bool:
        """Whether an occurrence of `job` may have a run parked behind it (so its end releases one)."""
        return job.spec.overlap_policy == "buffer_one" or (
            job.spec.overlap_policy == "skip" and self.catching_up(job, dispatch, self.ports.clock.now())
        )

    def _still_holds(self, key: str, now: datetime) -> bool:
        """Whether the run `key` still holds the place (read consistently, after the park was written): running
        with a live lease, or parked itself. Its worker then reads the parked runs after it finishes, so it sees
        the park just written (within the run index's lag)."""
        holder = self.ports.ledger.get(key)
        return holder is not None and (holder.leased(now) or holder.buffered)

    def catching_up(self, job: Job, dispatch: Dispatch, now: datetime) -> bool:
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
        return now - due > self.ports.config.misfire_grace

    def _window(self, job_id: str, before: datetime, exclude: str) -> list[Execution]:
        """The runs scheduled before `before`, newest first, down to the first that is neither skipped for overlap
        nor buffered: that one is the candidate holder. Whatever the history's length, only what overlapped it is
        read (paged), never a fixed number of recent runs."""
        window: list[Execution] = []
        cursor: str | None = None
        size = OVERLAP_FIRST_PAGE
        while True:
            page, cursor = self.ports.ledger.runs(job_id, size, cursor, within=Between(before=before))
            size = min(OVERLAP_PAGE, 4 * size)
            for run in page:
                if run.key == exclude or run.scheduled_for >= before:
                    continue
                window.append(run)
                if not (run.buffered or run.overlap_skipped):
                    return window
            if cursor is None:
                return window

    def release_parked(self, job: Job, finished: Dispatch) -> None:
        """The running occurrence `finished` has finished: send the run parked behind it (buffer_one) at once, so it
        starts now rather than when the lease would have ended. Never fails the finished occurrence."""
        try:
            cursor: str | None = None
            while True:
                page, cursor = self.ports.ledger.runs(
                    job.job_id, OVERLAP_PAGE, cursor, within=Between(after=finished.scheduled_for)
                )
                newer = [r for r in page if r.scheduled_for > finished.scheduled_for]
                parked = [r for r in newer if r.buffered]
                if parked:
                    run = parked[-1]  # the oldest parked one (one, or a run_all catch-up's queue of them)
                    now = self.ports.clock.now()
                    again = Dispatch(
                        job.job_id,
                        job.tenant,
                        run.scheduled_for,
                        now,
                        job.version,
                        "scheduled",
                        job.spec.priority,
                        job.flow_key,
                    )
                    if self.flow is not None and again.flow_key is not None:
                        again = again.deferred_to(self.flow.retry_release(job.tenant, again.flow_key, now))
                    self.ports.queue.send([again], now)
                    log.info(
                        "buffered occurrence released",
                        extra={"job_id": job.job_id, "occurrence_key": run.key, "behind": finished.key},
                    )
                    return
                if cursor is None or len(newer) < len(page):
                    return
        except Exception:  # its message comes back when the holder's lease would have ended
            log.exception("buffered occurrence not released", extra={"job_id": job.job_id})
