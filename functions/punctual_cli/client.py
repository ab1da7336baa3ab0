"""A typed client of the punctual API (v1), on the standard library's HTTP.

Requests are built from the same models the API validates with (`scheduler.core.model.JobSpec`), so a
definition is checked here before it is sent and fails with the messages the server would give. Responses
come back as `JobView`/`RunView`, which carry the definition as a `JobSpec` and the states as the core's
`JobState`/`RunState`.

Auth is pluggable: `BearerAuth` for the local stack (dev tokens), `SigV4Auth` for API Gateway with IAM auth,
signed with botocore from the standard AWS credential chain.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal
from urllib.parse import quote, urlencode

from pydantic import ValidationError

from punctual_cli.api_errors import (
    ApiError,
    AuthError,
    FieldError,
    InvalidDefinition,
    TransportError,
    definition_problem,
)
from punctual_cli.transport import (
    EXECUTE_API_HOST,
    Auth,
    BearerAuth,
    HttpRequest,
    HttpResponse,
    SigV4Auth,
    Transport,
    is_execute_api,
    region_of,
    urllib_transport,
)
from punctual_cli.views import BackfillView, JobView, Page, RunView, Triggered, instant_of
from scheduler.core.keys import split_occurrence_key
from scheduler.core.model import MAX_PAYLOAD_BYTES, BackfillRequest, JobSpec, JobState, payload_size
from scheduler.core.timefmt import rfc3339

USER_AGENT = "punctual-cli/0.1"
#: Statuses worth one more try of a request that is safe to repeat (a gateway or the network hiccupped).
_TRANSIENT = {502, 503, 504}


def validate_definition(definition: Mapping[str, Any]) -> JobSpec:
    """Validate a job definition as `POST /v1/jobs` does; raise `InvalidDefinition` with the API's messages."""
    try:
        spec = JobSpec.model_validate(dict(definition))
    except ValidationError as exc:
        raise definition_problem(exc) from None
    size = payload_size(spec.payload)
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidDefinition(
            413, "Payload Too Large", f"the payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes"
        )
    return spec


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what `PATCH /v1/jobs/{id}` applies): objects merge, `null` removes."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


Outcome = Literal["succeeded", "retry"]


class SchedulerClient:
    """Every endpoint of the punctual API (v1) as a typed method.

    Errors: `ApiError` (the API answered with a problem; `InvalidDefinition` when refused before sending),
    `TransportError` (no answer), `AuthError` (nothing to sign with). Reads, and creates that carry an
    Idempotency-Key, are retried once after a network failure or a 502/503/504: both are safe to repeat.
    """

    def __init__(
        self,
        base_url: str,
        auth: Auth | None = None,
        *,
        timeout: float = 30.0,
        transport: Transport = urllib_transport,
        retries: int = 1,
        retry_delay: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.auth = auth
        self.timeout = timeout
        self.transport = transport
        self.retries = retries
        self.retry_delay = retry_delay

    # jobs

    def create(self, spec: JobSpec | Mapping[str, Any], idempotency_key: str | None = None) -> JobView:
        """`POST /v1/jobs`. With `idempotency_key`, a repeat returns the same job (`replayed=True`)."""
        if not isinstance(spec, JobSpec):
            spec = validate_definition(spec)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        body = self._call(
            "POST",
            "/v1/jobs",
            body=spec.model_dump(mode="json", exclude_unset=True),
            headers=headers,
            repeatable=idempotency_key is not None,
        )
        return JobView.from_json(body)

    def create_batch(self, items: Sequence[tuple[JobSpec, str | None]]) -> list[JobView | ApiError]:
        """`POST /v1/jobs/batch`: up to 25 (definition, idempotency key) pairs in one request; one result per item,
        in order: the job (created, or replayed for a known key) or the item's own problem."""
        body = {
            "items": [
                {"job": spec.model_dump(mode="json", exclude_unset=True), **({"idempotency_key": key} if key else {})}
                for spec, key in items
            ]
        }
        answer = self._call("POST", "/v1/jobs/batch", body=body, repeatable=all(key for _, key in items))
        out: list[JobView | ApiError] = []
        for result in answer.get("results", []):
            if result.get("status") in (200, 201) and isinstance(result.get("job"), dict):
                out.append(JobView.from_json(result["job"]))
            else:
                status = int(result.get("status") or 500)
                out.append(ApiError.from_response(status, json.dumps(result.get("problem") or {}).encode()))
        if len(out) != len(items):
            raise ApiError(502, "Bad Gateway", f"the batch answered {len(out)} results for {len(items)} items")
        return out

    def get(self, job_id: str, preview: int = 0) -> JobView:
        """`GET /v1/jobs/{id}`; with `preview`, `next_runs` holds the next N occurrences (at most 50)."""
        query = {"preview": str(preview)} if preview else None
        return JobView.from_json(self._call("GET", f"/v1/jobs/{_segment(job_id)}", query=query))

    def signing_keys(self, job_id: str) -> dict[str, str]:
        """`GET /v1/jobs/{id}/signing-keys`: the job's signature-v2 keys, key id -> key (for
        `scheduler.signing.verify_v2`). Keep them secret: they sign every call of this job."""
        body = self._call("GET", f"/v1/jobs/{_segment(job_id)}/signing-keys")
        return {str(k["key_id"]): str(k["key"]) for k in body.get("keys", [])}

    def rotate_signing_key(
        self, job_id: str, overlap_seconds: int | None = None, if_match: int | None = None
    ) -> dict[str, str]:
        """`POST /v1/jobs/{id}/signing-keys/rotate`: make the next version of the job's key current; the replaced one
        keeps signing for `overlap_seconds` (the API's default: a day; 0 revokes it now). Returns the keys as
        `signing_keys` does: the new version's, and the replaced one's while it overlaps. Not repeated on a network
        failure (a repeat would rotate twice): read `signing_keys` to see whether it took."""
        body = {"overlap_seconds": overlap_seconds} if overlap_seconds is not None else None
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        path = f"/v1/jobs/{_segment(job_id)}/signing-keys/rotate"
        answer = self._call("POST", path, body=body, headers=headers, repeatable=False)
        return {str(k["key_id"]): str(k["key"]) for k in answer.get("keys", [])}

    def list_jobs(
        self, state: JobState | str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[JobView]:
        """`GET /v1/jobs`: one page of the caller's jobs, oldest first."""
        query: dict[str, str] = {}
        if state:
            query["state"] = str(state.value if isinstance(state, JobState) else state).upper()
        if limit:
            query["limit"] = str(limit)
        if cursor:
            query["cursor"] = cursor
        body = self._call("GET", "/v1/jobs", query=query)
        return Page([JobView.from_json(j) for j in body.get("jobs", [])], body.get("next_cursor"))

    def iter_jobs(self, state: JobState | str | None = None, page_size: int = 100) -> Iterator[JobView]:
        """Every job of the caller, following `next_cursor` page by page."""
        cursor: str | None = None
        while True:
            page = self.list_jobs(state, page_size, cursor)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def update(self, job_id: str, patch: Mapping[str, Any], if_match: int | None = None) -> JobView:
        """`PATCH /v1/jobs/{id}` with a JSON merge patch; `if_match` (a version) makes a stale edit fail 412."""
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        return JobView.from_json(self._call("PATCH", f"/v1/jobs/{_segment(job_id)}", body=dict(patch), headers=headers))

    def cancel(self, job_id: str) -> JobView:
        """`DELETE /v1/jobs/{id}`: a tombstone; cancelling twice is fine."""
        return JobView.from_json(self._call("DELETE", f"/v1/jobs/{_segment(job_id)}"))

    def pause(self, job_id: str) -> JobView:
        return JobView.from_json(self._call("POST", f"/v1/jobs/{_segment(job_id)}/pause"))

    def resume(self, job_id: str) -> JobView:
        """Resume; missed occurrences are handled by the job's misfire policy."""
        return JobView.from_json(self._call("POST", f"/v1/jobs/{_segment(job_id)}/resume"))

    def trigger(self, job_id: str) -> Triggered:
        """Fire one extra occurrence now; the schedule is not affected."""
        body = self._call("POST", f"/v1/jobs/{_segment(job_id)}/trigger")
        return Triggered(
            str(body.get("job_id", job_id)), str(body["occurrence_key"]), instant_of(body.get("scheduled_for")), body
        )

    # runs

    def runs(self, job_id: str, limit: int | None = None, cursor: str | None = None) -> Page[RunView]:
        """`GET /v1/jobs/{id}/runs`: one page of run history, newest first."""
        query: dict[str, str] = {}
        if limit:
            query["limit"] = str(limit)
        if cursor:
            query["cursor"] = cursor
        body = self._call("GET", f"/v1/jobs/{_segment(job_id)}/runs", query=query)
        return Page([RunView.from_json(r) for r in body.get("runs", [])], body.get("next_cursor"))

    def iter_runs(self, job_id: str, page_size: int = 100) -> Iterator[RunView]:
        cursor: str | None = None
        while True:
            page = self.runs(job_id, page_size, cursor)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    def resolve(
        self, occurrence_key: str, outcome: Outcome, note: str | None = None, job_id: str | None = None
    ) -> RunView:
        """Settle a RECONCILING run: `succeeded` (it did take effect) or `retry` (run it again, same key)."""
        job_id = job_id or split_occurrence_key(occurrence_key)[0]
        body: dict[str, Any] = {"outcome": outcome}
        if note:
            body["note"] = note
        path = f"/v1/jobs/{_segment(job_id)}/runs/{_segment(occurrence_key)}/resolve"
        return RunView.from_json(self._call("POST", path, body=body))

    # backfills

    def start_backfill(self, job_id: str, range_from: datetime, range_to: datetime) -> BackfillView:
        """`POST /v1/jobs/{id}/backfill`: run the job's occurrences in [range_from, range_to), in waves.

        The range is checked here as the API checks it ('to' after 'from'; `InvalidDefinition` when not); the API
        also refuses (422) a range reaching into the future or holding too many occurrences, and a job that is
        not recurring, and (409) a cancelled job. Not retried: a repeat would start a second backfill.
        """
        try:
            request = BackfillRequest.model_validate({"from": range_from, "to": range_to})
        except ValidationError as exc:
            raise definition_problem(exc) from None
        body = {"from": rfc3339(request.range_from), "to": rfc3339(request.to)}
        return BackfillView.from_json(self._call("POST", f"/v1/jobs/{_segment(job_id)}/backfill", body=body))

    def backfill(self, job_id: str, backfill_id: str) -> BackfillView:
        """`GET /v1/jobs/{id}/backfill/{backfill_id}`: one backfill and its progress."""
        return BackfillView.from_json(self._call("GET", _backfill_path(job_id, backfill_id)))

    def cancel_backfill(self, job_id: str, backfill_id: str) -> BackfillView:
        """`DELETE /v1/jobs/{id}/backfill/{backfill_id}`: no further waves (cancelling twice is fine; a
        completed backfill is a 409). Occurrences an earlier wave sent still run."""
        return BackfillView.from_json(self._call("DELETE", _backfill_path(job_id, backfill_id)))

    def backfills(self, job_id: str, limit: int | None = None, cursor: str | None = None) -> Page[BackfillView]:
        """`GET /v1/jobs/{id}/backfill`: one page of the job's backfills, newest first."""
        query: dict[str, str] = {}
        if limit:
            query["limit"] = str(limit)
        if cursor:
            query["cursor"] = cursor
        body = self._call("GET", f"/v1/jobs/{_segment(job_id)}/backfill", query=query)
        return Page([BackfillView.from_json(b) for b in body.get("backfills", [])], body.get("next_cursor"))

    def iter_backfills(self, job_id: str, page_size: int = 100) -> Iterator[BackfillView]:
        cursor: str | None = None
        while True:
            page = self.backfills(job_id, page_size, cursor)
            yield from page.items
            if not page.next_cursor:
                return
            cursor = page.next_cursor

    # service

    def health(self) -> dict[str, Any]:
        """`GET /v1/health` (no auth needed)."""
        return self._call("GET", "/v1/health")

    def forecast(self, minutes: int = 60) -> dict[str, Any]:
        """`GET /v1/forecast?minutes=N`: your occurrences due per minute over the next N minutes (1-180)."""
        return self._call("GET", "/v1/forecast", query={"minutes": str(minutes)})

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI 3.1 document the server serves."""
        return self._call("GET", "/v1/openapi.json")

    # plumbing

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        repeatable: bool | None = None,
    ) -> dict[str, Any]:
        url = self.base_url + path + (f"?{urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        base = {"Accept": "application/json", "User-Agent": USER_AGENT, **(headers or {})}
        if data is not None:
            base["Content-Type"] = "application/json"
        request = HttpRequest(method, url, base, data)
        if self.auth is not None:
            request = self.auth.sign(request)
        attempts = 1 + (self.retries if (method == "GET" if repeatable is None else repeatable) else 0)
        for attempt in range(1, attempts + 1):
            try:
                response = self.transport(request, self.timeout)
            except TransportError:
                if attempt == attempts:
                    raise
            else:
                if response.status in _TRANSIENT and attempt < attempts:
                    pass
                elif response.status >= 400:
                    raise ApiError.from_response(response.status, response.body)
                else:
                    text = response.body.decode() if response.body else ""
                    parsed = json.loads(text) if text.strip() else {}
                    return parsed if isinstance(parsed, dict) else {"value": parsed}
            time.sleep(self.retry_delay * attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")


def _backfill_path(job_id: str, backfill_id: str) -> str:
    return f"/v1/jobs/{_segment(job_id)}/backfill/{_segment(backfill_id)}"


def _segment(value: str) -> str:
    """One path segment, percent-encoded (occurrence keys carry ':'; nothing may carry '/')."""
    return quote(value, safe="")


__all__ = [
    "EXECUTE_API_HOST",
    "USER_AGENT",
    "ApiError",
    "Auth",
    "AuthError",
    "BackfillView",
    "BearerAuth",
    "FieldError",
    "HttpRequest",
    "HttpResponse",
    "InvalidDefinition",
    "JobView",
    "Outcome",
    "Page",
    "RunView",
    "SchedulerClient",
    "SigV4Auth",
    "Transport",
    "TransportError",
    "Triggered",
    "definition_problem",
    "is_execute_api",
    "merge_patch",
    "region_of",
    "urllib_transport",
    "validate_definition",
]
