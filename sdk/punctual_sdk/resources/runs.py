"""A job's runs: the history, an operator's resolve, a tenant's retry."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from punctual_sdk.calls import ApiCalls, Outcome, _every, _job, _page_query, _rfc3339, _segment
from punctual_sdk.errors import (
    InvalidArgument,
)
from punctual_sdk.models import (
    Page,
    Run,
)


class RunsApi(ApiCalls):
    """A job's runs: the history, an operator's resolve, a tenant's retry."""

    def runs(self, job_id: str, limit: int | None = None, cursor: str | None = None) -> Page[Run]:
        """`GET /v1/jobs/{id}/runs`: one page of run history, newest first."""
        return self._page("GET", _job(job_id) + "/runs", _page_query(limit, cursor), "runs", Run)

    def iter_runs(self, job_id: str, page_size: int = 100) -> Iterator[Run]:
        """Every run of the job, newest first, following `next_cursor` page by page."""
        return _every(lambda cursor: self.runs(job_id, page_size, cursor))

    def resolve(self, occurrence_key: str, outcome: Outcome, note: str | None = None, job_id: str | None = None) -> Run:
        """Settle a RECONCILING run: `succeeded` (it did take effect) or `retry` (run it again, same key)."""
        if outcome not in ("succeeded", "retry"):
            raise InvalidArgument(f"outcome is 'succeeded' or 'retry', not {outcome!r}")
        job_id = job_id or occurrence_key.partition(":")[0]
        body: dict[str, Any] = {"outcome": outcome, **({"note": note} if note else {})}
        path = f"{_job(job_id)}/runs/{_segment(occurrence_key)}/resolve"
        return Run.from_json(self._call("POST", path, body=body, retry=False))

    def retry_run(self, job_id: str, scheduled_for: datetime | str) -> Run:
        """`POST /v1/jobs/{id}/runs/{scheduled_for}/retry`: run a DEAD or RECONCILING occurrence once more, under the
        same occurrence key with a new attempt (a SUCCEEDED one is a `Conflict`). Asking again while it waits for
        that attempt is harmless: the ledger runs it once."""
        instant = scheduled_for if isinstance(scheduled_for, str) else _rfc3339(scheduled_for)
        path = f"{_job(job_id)}/runs/{_segment(instant)}/retry"
        return Run.from_json(self._call("POST", path, retry=True))
