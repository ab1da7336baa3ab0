"""Backfill: materialise a recurring job's occurrences in a past range, in waves.

`POST /v1/jobs/{job_id}/backfill` records a Backfill (the range, the job's schedule at that version, the count of
occurrences it covers; `scheduler.core.jobs.backfill` is the API's side). Every sweep then sends a wave of them, after
the time buckets (on-time work never waits behind a backfill), within what is left of the sweep's dispatch budget and at
most `wave_size` per backfill, so a large backfill drains over several sweeps instead of flattening the targets it was
meant to serve.

Each occurrence carries its normal occurrence key, so an occurrence that already ran is absorbed by the ledger
(acknowledged without running). A wave is crash-safe like a bucket: send, then move the backfill's cursor with a
conditional write; a crash between the two sends the wave again, and the ledger absorbs the duplicates.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.core.model.job import BackfillState, JobState
from scheduler.core.model.keys import fire_at
from scheduler.core.model.schedules import next_occurrence
from scheduler.core.model.timefmt import truncate_ms
from scheduler.core.ports import Backfill, BackfillStore, ChainPlan, Clock, Dispatch, JobReader, Metrics
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
                job.flow_key,
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
