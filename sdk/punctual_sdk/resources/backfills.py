"""A job's backfills: start, read, list, cancel."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

from punctual_sdk.calls import ApiCalls, _backfill, _every, _job, _page_query, _rfc3339
from punctual_sdk.errors import (
    InvalidArgument,
)
from punctual_sdk.models import (
    Backfill,
    Page,
)


class BackfillsApi(ApiCalls):
    """A job's backfills: start, read, list, cancel."""

    def start_backfill(self, job_id: str, range_from: datetime, range_to: datetime) -> Backfill:
        """`POST /v1/jobs/{id}/backfill`: run the job's occurrences in [range_from, range_to), in waves. The API
        refuses (422) a range reaching into the future or holding too many occurrences, and a job that is not
        recurring; (409) a cancelled job. Not retried: a repeat would start a second backfill."""
        for name, value in (("range_from", range_from), ("range_to", range_to)):
            if value.tzinfo is None:
                raise InvalidArgument(f"{name} needs a time zone (e.g. datetime(..., tzinfo=UTC)), not {value}")
        if range_to <= range_from:
            raise InvalidArgument(
                f"range_to ({range_to.isoformat()}) must be after range_from ({range_from.isoformat()})"
            )
        body = {"from": _rfc3339(range_from), "to": _rfc3339(range_to)}
        return Backfill.from_json(self._call("POST", _job(job_id) + "/backfill", body=body, retry=False))

    def backfill(self, job_id: str, backfill_id: str) -> Backfill:
        """`GET /v1/jobs/{id}/backfill/{backfill_id}`: one backfill and its progress."""
        return Backfill.from_json(self._call("GET", _backfill(job_id, backfill_id)))

    def cancel_backfill(self, job_id: str, backfill_id: str) -> Backfill:
        """Send no further waves (cancelling twice is fine; a completed backfill is a `Conflict`)."""
        return Backfill.from_json(self._call("DELETE", _backfill(job_id, backfill_id), retry=True))

    def backfills(self, job_id: str, limit: int | None = None, cursor: str | None = None) -> Page[Backfill]:
        """`GET /v1/jobs/{id}/backfill`: one page of the job's backfills, newest first."""
        return self._page("GET", _job(job_id) + "/backfill", _page_query(limit, cursor), "backfills", Backfill)

    def iter_backfills(self, job_id: str, page_size: int = 100) -> Iterator[Backfill]:
        return _every(lambda cursor: self.backfills(job_id, page_size, cursor))
