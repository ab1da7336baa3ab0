"""Jobs: create (one or a batch), read, list, edit, pause, resume, cancel, trigger."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from punctual_sdk.calls import (
    MAX_BATCH,
    ApiCalls,
    Definition,
    _definition,
    _every,
    _items,
    _job,
    _new_key,
    _page_query,
    _segment,
)
from punctual_sdk.errors import (
    ApiError,
    InvalidArgument,
    ServerError,
)
from punctual_sdk.errors import problem_error as _problem_error
from punctual_sdk.models import (
    Job,
    JobState,
    Page,
    Triggered,
)


class JobsApi(ApiCalls):
    """Jobs: create (one or a batch), read, list, edit, pause, resume, cancel, trigger."""

    def create(self, definition: Definition, idempotency_key: str | None = None) -> Job:
        """`POST /v1/jobs`. Every call carries an Idempotency-Key (one is made when none is given), the same on
        each retry, so a retry after a lost answer returns the job instead of creating a twin (`replayed=True`).
        Pass your own key to make a repeat of the whole call (after a crash) safe as well."""
        key = idempotency_key or _new_key()
        headers = {"Idempotency-Key": key}
        return Job.from_json(self._call("POST", "/v1/jobs", body=_definition(definition), headers=headers, retry=True))

    def create_batch(self, items: Sequence[Definition | tuple[Definition, str | None]]) -> list[Job | ApiError]:
        """`POST /v1/jobs/batch`: up to 25 definitions (each alone or with its Idempotency-Key) in one request.
        One result per item, in order: the job (created, or replayed) or the item's own error (not raised)."""
        if not 1 <= len(items) <= MAX_BATCH:
            raise InvalidArgument(f"a batch holds 1-{MAX_BATCH} definitions; this one has {len(items)}")
        body_items = []
        for item in items:
            definition, key = item if isinstance(item, tuple) else (item, None)
            body_items.append({"job": _definition(definition), "idempotency_key": key or _new_key()})
        answer = self._call("POST", "/v1/jobs/batch", body={"items": body_items}, retry=True)
        results: list[Job | ApiError] = []
        for result in _items(answer, "results"):
            if result.get("status") in (200, 201) and isinstance(result.get("job"), dict):
                results.append(Job.from_json(result["job"]))
            else:
                problem = result.get("problem")
                results.append(
                    _problem_error(int(result.get("status") or 500), problem if isinstance(problem, dict) else {})
                )
        if len(results) != len(items):
            raise ServerError(502, "Bad Gateway", f"the batch answered {len(results)} results for {len(items)} items")
        return results

    def get(self, job_id: str, preview: int = 0) -> Job:
        """`GET /v1/jobs/{id}`; with `preview`, `next_runs` holds the next N occurrences (at most 50)."""
        query = {"preview": str(preview)} if preview else None
        return Job.from_json(self._call("GET", _job(job_id), query=query))

    def list_jobs(
        self,
        state: JobState | str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        *,
        labels: Mapping[str, str | None] | None = None,
        target_type: str | None = None,
        name_prefix: str | None = None,
    ) -> Page[Job]:
        """`GET /v1/jobs`: one page of the caller's jobs; `state` filters (ACTIVE, PAUSED, ...), `labels` selects jobs
        with every label given (a value of None: the key alone), `target_type` and `name_prefix` narrow further."""
        query: dict[str, str | list[str]] = dict(_page_query(limit, cursor))
        if state:
            query["state"] = str(state.value if isinstance(state, JobState) else state).upper()
        if labels:
            query["label"] = [f"{key}:{value or ''}" for key, value in labels.items()]
        if target_type:
            query["target_type"] = target_type
        if name_prefix:
            query["name_prefix"] = name_prefix
        return self._page("GET", "/v1/jobs", query, "jobs", Job)

    def iter_jobs(
        self,
        state: JobState | str | None = None,
        page_size: int = 100,
        *,
        labels: Mapping[str, str | None] | None = None,
        target_type: str | None = None,
        name_prefix: str | None = None,
    ) -> Iterator[Job]:
        """Every job of the caller matching the filters of `list_jobs`, following `next_cursor` page by page."""
        return _every(
            lambda cursor: self.list_jobs(
                state, page_size, cursor, labels=labels, target_type=target_type, name_prefix=name_prefix
            )
        )

    def get_by_external_id(self, external_id: str) -> Job:
        """`GET /v1/jobs/by-external-id/{external_id}`: the caller's job created with that `external_id`."""
        return Job.from_json(self._call("GET", f"/v1/jobs/by-external-id/{_segment(external_id)}"))

    def update(self, job_id: str, patch: Mapping[str, Any], if_match: int | None = None) -> Job:
        """`PATCH /v1/jobs/{id}` with a JSON merge patch (`None` removes a field); `if_match` (the version you
        read) makes a concurrent edit fail with `PreconditionFailed` instead of being overwritten."""
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        # A merge patch is idempotent; with If-Match a repeat after a lost answer would fail 412, so it is not retried.
        body = self._call("PATCH", _job(job_id), body=dict(patch), headers=headers, retry=if_match is None)
        return Job.from_json(body)

    def cancel(self, job_id: str) -> Job:
        """`DELETE /v1/jobs/{id}`: a tombstone; cancelling twice is fine."""
        return Job.from_json(self._call("DELETE", _job(job_id), retry=True))

    def pause(self, job_id: str) -> Job:
        """Pause an ACTIVE job (pausing a paused job is fine)."""
        return Job.from_json(self._call("POST", _job(job_id) + "/pause", retry=True))

    def resume(self, job_id: str) -> Job:
        """Resume a PAUSED job; missed occurrences are handled by the job's misfire policy."""
        return Job.from_json(self._call("POST", _job(job_id) + "/resume", retry=True))

    def trigger(self, job_id: str) -> Triggered:
        """Fire one extra occurrence now (its own occurrence key); the schedule is not affected. Not retried."""
        body = self._call("POST", _job(job_id) + "/trigger", retry=False)
        return Triggered.from_json({"job_id": job_id, **body})
