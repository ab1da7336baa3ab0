"""A typed client of the punctual API (v1): every operation, pagination, and retries that are safe.

    from punctual_sdk.client import Client

    client = Client.local()                                   # the local stack, bearer token "dev-token"
    client = Client.aws("https://abc.execute-api.eu-west-1.amazonaws.com/prod")   # SigV4, the AWS chain
    job = client.create({"schedule": {"type": "cron", "expression": "0 9 * * 1-5"},
                         "target": {"type": "http", "url": "https://example.com/hook"}})

Retries: a throttled request (429) is sent again after its Retry-After (or a jittered backoff); a 5xx or a lost
connection is retried only for requests that are safe to repeat (reads, pause/resume/cancel, a patch without
If-Match, and creates, which always carry an Idempotency-Key, the same on every retry). Never retried: trigger,
backfill start and resolve, whose repeat would act twice. A refusal raises a typed `ApiError` (punctual_sdk.errors).
"""

from __future__ import annotations

import json
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar
from urllib.parse import quote, urlencode

from pydantic import BaseModel

from punctual_sdk.auth import Auth, BearerAuth, SigV4Auth
from punctual_sdk.errors import (
    ApiError,
    InvalidArgument,
    InvalidResponse,
    ServerError,
    TooManyRequests,
    TransportError,
    retry_after_seconds,
)
from punctual_sdk.errors import error_from_response as _error_from_response
from punctual_sdk.errors import problem_error as _problem_error
from punctual_sdk.models import (
    ApiModel,
    Backfill,
    BulkOperation,
    Forecast,
    Job,
    JobState,
    OperatorStatus,
    Page,
    Run,
    SigningKeys,
    Triggered,
)
from punctual_sdk.transport import HttpRequest, Transport, urllib_transport

USER_AGENT = "punctual-sdk/0.1"
DEFAULT_LOCAL_URL = "http://127.0.0.1:8080"
#: How many items `POST /v1/jobs/batch` takes at most.
MAX_BATCH = 25

#: A job definition: a `JobDefinition` (or any pydantic model of one, such as the core's `JobSpec`) or a mapping.
Definition = BaseModel | Mapping[str, Any]
Outcome = Literal["succeeded", "retry"]
BulkAction = Literal["pause", "resume", "cancel"]
M = TypeVar("M", bound=ApiModel)


class Client:
    """Every endpoint of the punctual API (v1) as a typed method.

    `retries` bounds the extra attempts of one call; the wait before each grows from `backoff` seconds (doubling,
    full jitter) up to `max_backoff`. A Retry-After longer than `max_backoff` is not waited for: the error is
    raised at once (`TooManyRequests.retry_after` says how long the server asked for).
    """

    def __init__(
        self,
        base_url: str,
        auth: Auth | None = None,
        *,
        timeout: float = 30.0,
        transport: Transport = urllib_transport,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 20.0,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        user_agent: str = USER_AGENT,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise InvalidArgument(f"base_url is the API's http(s) URL (e.g. {DEFAULT_LOCAL_URL}), not '{base_url}'")
        if retries < 0 or backoff < 0 or max_backoff < 0:
            raise InvalidArgument("retries, backoff and max_backoff are zero or more")
        self.base_url = base_url.rstrip("/")
        self.auth = auth
        self.timeout = timeout
        self.transport = transport
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.sleep = sleep
        self.jitter = jitter
        self.user_agent = user_agent

    @classmethod
    def local(cls, base_url: str = DEFAULT_LOCAL_URL, token: str = "dev-token", **options: Any) -> Client:
        """A client of the local stack (`scripts/dev`), which maps bearer tokens to tenants."""
        return cls(base_url, BearerAuth(token), **options)

    @classmethod
    def aws(cls, base_url: str, *, session: Any = None, region: str | None = None, **options: Any) -> Client:
        """A client of a deployed API (IAM auth): SigV4 with the standard AWS credential chain (needs the `aws`
        extra). The region comes from an execute-api URL, else `region`, else the session."""
        auth = SigV4Auth(region, session) if region else SigV4Auth.for_url(base_url, session)
        return cls(base_url, auth, **options)

    # jobs

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

    def signing_keys(self, job_id: str) -> SigningKeys:
        """`GET /v1/jobs/{id}/signing-keys`: every key that may sign the job's calls now. Keep them secret."""
        return SigningKeys.from_json(self._call("GET", _job(job_id) + "/signing-keys"))

    def rotate_signing_key(
        self, job_id: str, overlap_seconds: int | None = None, if_match: int | None = None
    ) -> SigningKeys:
        """`POST /v1/jobs/{id}/signing-keys/rotate`: make the next version of the job's key current; the replaced one
        keeps signing for `overlap_seconds` (the API's default: a day; 0 revokes it now). Never retried after a lost
        answer (a repeat would rotate twice): read `signing_keys` to see whether it took."""
        body = {"overlap_seconds": overlap_seconds} if overlap_seconds is not None else None
        headers = {"If-Match": f'"{if_match}"'} if if_match is not None else {}
        path = _job(job_id) + "/signing-keys/rotate"
        return SigningKeys.from_json(self._call("POST", path, body=body, headers=headers, retry=False))

    # runs

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

    # backfills

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

    # service

    def forecast(self, minutes: int = 60) -> Forecast:
        """`GET /v1/forecast`: your occurrences due per minute over the next `minutes` (1-180)."""
        return Forecast.from_json(self._call("GET", "/v1/forecast", query={"minutes": str(minutes)}))

    def bulk_action(self, action: BulkAction, labels: Mapping[str, str], idempotency_key: str) -> BulkOperation:
        """`POST /v1/jobs/bulk`: one request's work (up to about 20 s) on the operation the key names, for every job
        with all of `labels`. Its progress: RUNNING means send it again with the same key to go on; DONE is the final
        report. A 5xx or a lost connection is retried: the same key is the same operation, never a second one."""
        body = {"action": action, "selector": {"labels": dict(labels)}}
        headers = {"Idempotency-Key": idempotency_key}
        return BulkOperation.from_json(self._call("POST", "/v1/jobs/bulk", body=body, headers=headers, retry=True))

    def bulk(self, action: BulkAction, labels: Mapping[str, str], idempotency_key: str | None = None) -> BulkOperation:
        """Pause, resume or cancel every job with all of `labels`, as one operation, until it is DONE (its report)."""
        key = idempotency_key or _new_key()
        operation = self.bulk_action(action, labels, key)
        while operation.state != "DONE":
            operation = self.bulk_action(action, labels, key)
        return operation

    def operation(self, operation_id: str) -> BulkOperation:
        """`GET /v1/operations/{id}`: a bulk operation's progress."""
        return BulkOperation.from_json(self._call("GET", f"/v1/operations/{_segment(operation_id)}"))

    def operator_status(self) -> OperatorStatus:
        """`GET /v1/operator/status`: every lane's load and the dispatch lag (for the tenants a deployment names as
        operators; any other gets a 403 ApiError whose detail says so)."""
        return OperatorStatus.from_json(self._call("GET", "/v1/operator/status"))

    def health(self) -> dict[str, Any]:
        """`GET /v1/health` (no auth needed)."""
        return self._call("GET", "/v1/health")

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI 3.1 document the server serves."""
        return self._call("GET", "/v1/openapi.json")

    # plumbing

    def _page(self, method: str, path: str, query: Mapping[str, str | list[str]], noun: str, model: type[M]) -> Page[M]:
        body = self._call(method, path, query=query)
        cursor = body.get("next_cursor") or None
        if cursor is not None and not isinstance(cursor, str):
            raise InvalidResponse(f"the API sent a next_cursor that is not a string: {cursor!r}", body)
        return Page([model.from_json(item) for item in _items(body, noun)], cursor)

    def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | list[str]] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        retry: bool | None = None,
    ) -> dict[str, Any]:
        """Send one request (and its retries); the JSON answer, or the typed error. `retry`: whether a 5xx or a
        lost connection may be retried (default: for GET); a 429 is retried whatever it is (nothing was done)."""
        url = self.base_url + path + (f"?{urlencode(query, doseq=True)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        base = {"Accept": "application/json", "User-Agent": self.user_agent, **(headers or {})}
        if data is not None:
            base["Content-Type"] = "application/json"
        unsigned = HttpRequest(method, url, base, data)
        repeatable = method == "GET" if retry is None else retry
        attempt = 0
        while True:
            attempt += 1
            # Signed for each attempt: a SigV4 signature is valid for a few minutes and credentials may refresh.
            request = self.auth.sign(unsigned) if self.auth is not None else unsigned
            try:
                response = self.transport(request, self.timeout)
            except TransportError:
                if not repeatable or attempt > self.retries:
                    raise
                self.sleep(self._backoff(attempt))
                continue
            if response.status < 400:
                return _json(response.status, response.body)
            error = _error_from_response(response.status, response.body, response.headers)
            delay = self._retry_delay(error, repeatable, attempt)
            if delay is None:
                raise error
            self.sleep(delay)

    def _retry_delay(self, error: ApiError, repeatable: bool, attempt: int) -> float | None:
        """How long to wait before retrying after `error`, or None to raise it."""
        if attempt > self.retries:
            return None
        if isinstance(error, TooManyRequests):
            if error.is_quota:  # the tenant's job quota: waiting does not free it
                return None
        elif not (isinstance(error, ServerError) and repeatable):
            return None
        hinted = retry_after_seconds(error.headers)
        if hinted is None:
            return self._backoff(attempt)
        if hinted > self.max_backoff:
            return None  # a shorter wait would only be refused again
        # At least what the server asked, plus a little jitter so that many clients do not come back together.
        return min(self.max_backoff, hinted + self.jitter() * self.backoff)

    def _backoff(self, attempt: int) -> float:
        """Exponential backoff with full jitter: a random wait up to backoff * 2^(attempt-1), capped."""
        return self.jitter() * min(self.max_backoff, self.backoff * 2.0 ** (attempt - 1))


def _json(status: int, body: bytes) -> dict[str, Any]:
    """A successful answer's JSON (an empty body: {}); `InvalidResponse` when it is not JSON."""
    try:
        text = body.decode() if body else ""
        parsed = json.loads(text) if text.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        shown = body[:200].decode(errors="replace")
        raise InvalidResponse(f"the API answered {status} with a body that is not JSON: {shown!r}", body) from exc
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _items(body: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    """The list `name` of an answer (absent: empty); `InvalidResponse` when it or an item is not what a list of
    documents is."""
    items = body.get(name) or []
    if not isinstance(items, list) or not all(isinstance(item, Mapping) for item in items):
        raise InvalidResponse(f"the API sent a '{name}' that is not a list of JSON objects", body)
    return items


def _new_key() -> str:
    return f"sdk-{uuid.uuid4()}"


def _definition(definition: Definition) -> dict[str, Any]:
    if isinstance(definition, BaseModel):
        dumped: dict[str, Any] = definition.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return dumped
    if isinstance(definition, Mapping):
        return dict(definition)
    raise InvalidArgument(f"a job definition is a JobDefinition or a mapping, not {type(definition).__name__}")


def _rfc3339(value: datetime) -> str:
    """An instant in UTC with a `Z`, milliseconds only when it has them (as the API writes instants)."""
    value = value.astimezone(UTC)
    if ms := value.microsecond // 1000:
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms:03d}Z"
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _page_query(limit: int | None, cursor: str | None) -> dict[str, str]:
    query: dict[str, str] = {}
    if limit:
        query["limit"] = str(limit)
    if cursor:
        query["cursor"] = cursor
    return query


def _every(page: Callable[[str | None], Page[M]]) -> Iterator[M]:
    cursor: str | None = None
    while True:
        current = page(cursor)
        yield from current.items
        if not current.next_cursor:
            return
        cursor = current.next_cursor


def _segment(value: str) -> str:
    """One path segment, percent-encoded (occurrence keys carry ':'; nothing may carry '/')."""
    if not value:
        raise InvalidArgument("an id is a non-empty string")
    return quote(value, safe="")


def _job(job_id: str) -> str:
    return f"/v1/jobs/{_segment(job_id)}"


def _backfill(job_id: str, backfill_id: str) -> str:
    return f"{_job(job_id)}/backfill/{_segment(backfill_id)}"


__all__ = ["DEFAULT_LOCAL_URL", "MAX_BATCH", "USER_AGENT", "Client", "Definition", "InvalidArgument", "Outcome"]
