"""A job's webhook signing key, rotated (`POST /v1/jobs/{job_id}/signing-keys/rotate`): the next version made
current, the replaced one signing beside it for an overlap (docs/security.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from scheduler.core.errors import InvalidRequest, InvalidState, VersionConflict
from scheduler.core.jobs.service import JobService
from scheduler.core.model.job import Job, JobState
from scheduler.core.model.timefmt import truncate_ms
from scheduler.core.ports import Clock

log = logging.getLogger(__name__)

#: How long the replaced key of a job keeps signing after a rotation, unless the rotation says otherwise (Svix's
#: default), and the longest it may (Stripe's longest): receivers have that long to fetch the new key.
DEFAULT_KEY_OVERLAP = timedelta(hours=24)
MAX_KEY_OVERLAP = timedelta(days=7)


@dataclass(eq=False)
class KeyRotation:
    jobs: JobService
    clock: Clock

    def rotate(
        self, tenant: str, job_id: str, overlap: timedelta = DEFAULT_KEY_OVERLAP, if_match: int | None = None
    ) -> Job:
        """Make the next version of the job's signing key current; the replaced version keeps signing calls (a
        second signature) for `overlap` (0: revoked at once). Only the version just replaced overlaps: a rotation
        during an overlap ends the older version's at once. A change of the job (a new version, which `if_match`
        must equal when given), with its schedule unchanged: the chain goes on where it was."""
        if not timedelta(0) <= overlap <= MAX_KEY_OVERLAP:
            limit = int(MAX_KEY_OVERLAP.total_seconds())
            raise InvalidRequest(f"overlap_seconds must be 0-{limit} (7 days), not {overlap.total_seconds():g}",
                                 "overlap_seconds")  # fmt: skip

        def rotate(job: Job) -> tuple[Job, bool] | None:
            if if_match is not None and if_match != job.version:
                raise VersionConflict(job)
            if job.state == JobState.CANCELLED:
                raise InvalidState("a cancelled job sends no calls, so its signing key cannot be rotated")
            now = truncate_ms(self.clock.now())
            update = {
                "version": job.version + 1,
                "updated_at": now,
                "key_version": job.key_version + 1,
                "previous_key_until": now + overlap if overlap else None,
            }
            return job.model_copy(update=update), job.state == JobState.ACTIVE and job.next_run_at is not None

        rotated = self.jobs.change(tenant, job_id, rotate)
        log.info(
            "signing key rotated",
            extra={"job_id": job_id, "key_version": rotated.key_version, "overlap_seconds": overlap.total_seconds()},
        )
        return rotated
