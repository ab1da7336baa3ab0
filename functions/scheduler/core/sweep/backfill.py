"""Backfill: materialise a recurring job's occurrences in a past range, in waves.

`POST /v1/jobs/{job_id}/backfill` records a Backfill (the range, the job's schedule at that version, the count of
occurrences it covers). Every sweep then sends a wave of them, after the time buckets (on-time work never waits
behind a backfill), within what is left of the sweep's dispatch budget and at most `wave_size` per backfill, so a
large backfill drains over several sweeps instead of flattening the targets it was meant to serve.

Each occurrence carries its normal occurrence key, so an occurrence that already ran is absorbed by the ledger
(acknowledged without running). A wave is crash-safe like a bucket: send, then move the backfill's cursor with a
conditional write; a crash between the two sends the wave again, and the ledger absorbs the duplicates.
"""

from __future__ import annotations

import builtins
import logging
import math
from dataclasses import KW_ONLY, dataclass
from datetime import datetime, timedelta

from scheduler.core.errors import BackfillNotFound, InvalidRequest, InvalidState
from scheduler.core.jobs.service import owned_job
from scheduler.core.model.job import BackfillState, JobState
from scheduler.core.model.keys import fire_at
from scheduler.core.model.schedules import is_recurring, next_occurrence
from scheduler.core.model.timefmt import to_ms, truncate_ms
from scheduler.core.ports import Backfill, BackfillStore, ChainPlan, Clock, Dispatch, Ids, JobReader, Metrics
from scheduler.core.runtime.ids import RANDOM_IDS
from scheduler.core.sweep.dispatch import Dispatcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BackfillConfig:
    #: Occurrences one backfill may cover at most (a request over it is refused: split the range).
    max_occurrences: int = 10_000
    #: Occurrences one sweep sends of each backfill at most: the backfill's rate is wave_size per sweep period.
    wave_size: int = 500
    #: Backfills one sweep works on at most (oldest first).
    concurrent: int = 20


def occurrences_in(
    plan: ChainPlan, after: datetime | None, start: datetime, end: datetime, limit: int
) -> list[datetime]:
    """Up to `limit` occurrences of `plan` in [start, end), after `after` when given (exclusive)."""
    cursor = after if after is not None else start - timedelta(milliseconds=1)
    found: list[datetime] = []
    while len(found) < limit:
        nxt = next_occurrence(plan.schedule, cursor, plan.anchor)
        if nxt is None or nxt >= end:
            break
        if nxt >= start:
            found.append(nxt)
        cursor = nxt
    return found


def new_backfill_id(now: datetime, ids: Ids = RANDOM_IDS) -> str:
    """Sortable by creation (oldest backfills get their waves first), unique by its random tail."""
    return f"{to_ms(now):012x}{ids.token()}"


@dataclass(eq=False)
class BackfillService:
    """The API's side: request, read and cancel backfills."""

    jobs: JobReader
    backfills: BackfillStore
    clock: Clock
    config: BackfillConfig
    _: KW_ONLY
    ids: Ids = RANDOM_IDS

    def start(self, tenant: str, job_id: str, range_from: datetime, range_to: datetime) -> Backfill:
        job = owned_job(self.jobs, tenant, job_id)
        if job.state == JobState.CANCELLED:
            raise InvalidState("a cancelled job cannot be backfilled")
        spec = job.spec
        if not is_recurring(spec.schedule):
            raise InvalidRequest("only a recurring (cron or rate) job can be backfilled", field="schedule")
        now = truncate_ms(self.clock.now())
        start, end = truncate_ms(range_from), truncate_ms(range_to)
        if end > now:
            raise InvalidRequest(
                "'to' is in the future: occurrences from now on are the schedule's own; backfill a past range",
                field="to",
            )
        plan = ChainPlan(spec.schedule, job.created_at, spec.jitter_seconds, spec.misfire_policy)
        cap = self.config.max_occurrences
        found = occurrences_in(plan, None, start, end, cap + 1)
        if len(found) > cap:
            raise InvalidRequest(
                f"the range holds more than {cap} occurrences; backfill it in smaller ranges", field="from"
            )
        if not found:
            raise InvalidRequest("the job's schedule has no occurrence in this range", field="from")
        backfill = Backfill(
            backfill_id=new_backfill_id(now, self.ids),
            job_id=job.job_id,
            tenant=tenant,
            range_from=start,
            range_to=end,
            plan=plan,
            version=job.version,
            total=len(found),
            state=BackfillState.RUNNING,
            created_at=now,
            updated_at=now,
        )
        self.backfills.create(backfill)
        log.info("backfill requested", extra={"job_id": job_id, "backfill_id": backfill.backfill_id})
        return backfill

    def get(self, tenant: str, job_id: str, backfill_id: str) -> Backfill:
        owned_job(self.jobs, tenant, job_id)
        backfill = self.backfills.get(backfill_id)
        if backfill is None or backfill.job_id != job_id or backfill.tenant != tenant:
            raise BackfillNotFound(backfill_id)
        return backfill

    def list(
        self, tenant: str, job_id: str, limit: int, cursor: str | None
    ) -> tuple[builtins.list[Backfill], str | None]:
        """The job's backfills, newest first, a page at a time. A cursor the store did not return for this job
        raises ValueError."""
        owned_job(self.jobs, tenant, job_id)
        page, next_cursor = self.backfills.for_job(job_id, limit, cursor)
        return [b for b in page if b.tenant == tenant], next_cursor

    def cancel(self, tenant: str, job_id: str, backfill_id: str) -> Backfill:
        """Stop sending waves (idempotent). Occurrences an earlier wave already sent still run."""
        backfill = self.get(tenant, job_id, backfill_id)
        if backfill.state == BackfillState.COMPLETED:
            raise InvalidState("this backfill has already completed: every occurrence was dispatched")
        if backfill.state == BackfillState.CANCELLED:
            return backfill
        finished = self.backfills.finish(backfill, BackfillState.CANCELLED, truncate_ms(self.clock.now()))
        if finished is not None and finished.state == BackfillState.COMPLETED:
            raise InvalidState("this backfill has already completed: every occurrence was dispatched")
        return finished or backfill

    def waves_left(self, backfill: Backfill) -> int:
        return math.ceil(backfill.remaining / self.config.wave_size) if backfill.state == BackfillState.RUNNING else 0


@dataclass
class WaveReport:
    backfills: int = 0
    dispatched: int = 0
    completed: int = 0


@dataclass(eq=False)
class BackfillRunner:
    """The sweeper's side: one wave of each running backfill, within the budget left."""

    backfills: BackfillStore
    jobs: JobReader
    dispatcher: Dispatcher
    clock: Clock
    config: BackfillConfig
    metrics: Metrics

    def run(self, budget: int, stop_at: datetime) -> WaveReport:
        report = WaveReport()
        if budget <= 0:
            return report
        for backfill in self.backfills.running(self.config.concurrent):
            if report.dispatched >= budget or self.clock.now() >= stop_at:
                break
            report.backfills += 1
            sent, done = self._wave(backfill, min(self.config.wave_size, budget - report.dispatched))
            report.dispatched += sent
            report.completed += int(done)
        if report.dispatched:
            self.metrics.count("BackfillDispatched", report.dispatched)
        return report

    def _wave(self, backfill: Backfill, limit: int) -> tuple[int, bool]:
        """Send the next wave, then record it. Do not reorder: recording first would lose the wave on a crash."""
        now = self.clock.now()
        job = self.jobs.get(backfill.job_id)
        if job is None or job.state == JobState.CANCELLED:
            self.backfills.finish(backfill, BackfillState.CANCELLED, truncate_ms(now))
            log.info("backfill stopped: job cancelled", extra={"backfill_id": backfill.backfill_id})
            return 0, False
        if job.state == JobState.PAUSED:
            return 0, False  # resumes with the job; its occurrences would only be recorded SKIPPED now
        plan = backfill.plan
        due = occurrences_in(plan, backfill.cursor, backfill.range_from, backfill.range_to, limit)
        dispatches = [
            Dispatch(
                backfill.job_id,
                backfill.tenant,
                at,
                fire_at(backfill.job_id, at, plan.jitter_seconds),
                backfill.version,
                "backfill",
                job.spec.priority,
            )
            for at in due
        ]
        # Through the tenant's dispatch budget like every other dispatch; what it holds back stays in the backfill
        # (the cursor only moves past an unbroken run of sent occurrences; any sent beyond a gap go again later).
        sent_keys = {d.key for d in self.dispatcher.send(dispatches, defer=False)} if dispatches else set()
        sent: list[Dispatch] = []
        for dispatch in dispatches:
            if dispatch.key not in sent_keys:
                break
            sent.append(dispatch)
        cursor = sent[-1].scheduled_for if sent else backfill.cursor
        after = occurrences_in(plan, cursor, backfill.range_from, backfill.range_to, 1)
        done = not after
        if cursor is None:  # nothing admitted yet (a tenant over its budget): the next sweep tries again
            return 0, False
        if not self.backfills.advance(backfill, cursor, backfill.dispatched + len(sent), done, truncate_ms(now)):
            log.info("backfill wave raced (cancelled, or another sweeper's wave)", extra={"id": backfill.backfill_id})
            return len(sent), False
        return len(sent), done
