"""Backfills, the API's side (`POST /v1/jobs/{job_id}/backfill`): request, read and cancel them. The sweep sends
their waves (`scheduler.core.sweep.backfill`)."""

from __future__ import annotations

import builtins
import logging
import math
from dataclasses import KW_ONLY, dataclass
from datetime import datetime

from scheduler.core.errors import BackfillNotFound, InvalidRequest, InvalidState
from scheduler.core.jobs.reads import owned_job
from scheduler.core.model.job import BackfillState, JobState
from scheduler.core.model.schedules import is_recurring
from scheduler.core.model.timefmt import to_ms, truncate_ms
from scheduler.core.ports import Backfill, BackfillStore, ChainPlan, Clock, Ids, JobReader
from scheduler.core.runtime.ids import RANDOM_IDS
from scheduler.core.sweep.backfill import BackfillConfig, occurrences_in

log = logging.getLogger(__name__)


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
