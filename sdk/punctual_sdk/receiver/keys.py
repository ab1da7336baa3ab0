"""The job keys a receiver verifies with: fetched from punctual (`GET /v1/jobs/{id}/signing-keys`), cached per job,
fetched again when they age past a TTL or when a call names a key id the cache lacks (a rotation), at most once
per `refresh_interval_seconds` per job so that forged calls cannot make the receiver hammer the API."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

#: `fetch_keys(job_id) -> {key id: key}`. Raises LookupError when the job does not exist or is not the caller's
#: (the call is then refused as UnknownKey); any other exception propagates (the receiver answers 5xx: retried).
KeyFetcher = Callable[[str], Mapping[str, str]]

DEFAULT_TTL_SECONDS = 3600.0
DEFAULT_REFRESH_INTERVAL_SECONDS = 30.0
DEFAULT_MAX_JOBS = 10_000


@dataclass
class _Entry:
    keys: Mapping[str, str]
    fetched_at: float


class KeyCache:
    """Job keys by job id. Thread-safe; at most `max_jobs` jobs are kept (least recently used first out)."""

    def __init__(
        self,
        fetch_keys: KeyFetcher,
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        refresh_interval_seconds: float = DEFAULT_REFRESH_INTERVAL_SECONDS,
        max_jobs: int = DEFAULT_MAX_JOBS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if ttl_seconds <= 0 or refresh_interval_seconds < 0 or max_jobs < 1:
            raise ValueError("ttl_seconds must be > 0, refresh_interval_seconds >= 0 and max_jobs >= 1")
        self._fetch = fetch_keys
        self.ttl_seconds = ttl_seconds
        self.refresh_interval_seconds = refresh_interval_seconds
        self.max_jobs = max_jobs
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._lock = threading.Lock()

    def _load(self, job_id: str) -> Mapping[str, str]:
        try:
            keys = dict(self._fetch(job_id))
        except LookupError:
            keys = {}  # remembered like any answer, so an unknown job is asked about once per interval at most
        with self._lock:
            self._entries[job_id] = _Entry(keys, self._clock())
            self._entries.move_to_end(job_id)
            while len(self._entries) > self.max_jobs:
                self._entries.popitem(last=False)
        return keys

    def keys(self, job_id: str) -> Mapping[str, str]:
        """The job's keys (key id -> key): the cached ones while younger than the TTL, else fetched."""
        with self._lock:
            entry = self._entries.get(job_id)
            if entry is not None and self._clock() - entry.fetched_at < self.ttl_seconds:
                self._entries.move_to_end(job_id)
                return entry.keys
        return self._load(job_id)

    def refresh(self, job_id: str) -> Mapping[str, str] | None:
        """Fetch the job's keys again, unless they were fetched less than `refresh_interval_seconds` ago (then
        None: the caller keeps what it had)."""
        with self._lock:
            entry = self._entries.get(job_id)
            if entry is not None and self._clock() - entry.fetched_at < self.refresh_interval_seconds:
                return None
        return self._load(job_id)


class _SigningKeysClient(Protocol):
    def signing_keys(self, job_id: str) -> Any: ...


def keys_from_client(client: _SigningKeysClient) -> KeyFetcher:
    """A fetcher over `punctual_sdk.Client.signing_keys`: the job's keys by key id. A 403 or 404 (not this
    tenant's job, or no such job) becomes LookupError; other errors (auth, network, 5xx) propagate."""

    def fetch(job_id: str) -> Mapping[str, str]:
        try:
            answer = client.signing_keys(job_id)
        except Exception as exc:
            if getattr(exc, "status", None) in (403, 404):
                raise LookupError(f"no signing keys for job {job_id}: {exc}") from exc
            raise
        return {str(k.key_id): str(k.key) for k in answer.keys}

    return fetch


def keys_from_api(base_url: str, headers: Mapping[str, str], timeout: float = 10.0) -> KeyFetcher:
    """A fetcher that calls `GET {base_url}/v1/jobs/{job_id}/signing-keys` with `headers` (e.g. a bearer token),
    with the standard library only. On AWS, where the API wants SigV4, use `keys_from_client`."""
    root = base_url.rstrip("/")

    def fetch(job_id: str) -> Mapping[str, str]:
        url = f"{root}/v1/jobs/{urllib.parse.quote(job_id, safe='')}/signing-keys"
        request = urllib.request.Request(url, headers=dict(headers))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body = json.loads(response.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code in (403, 404):
                raise LookupError(f"no signing keys for job {job_id}: HTTP {exc.code}") from exc
            raise
        return {str(k["key_id"]): str(k["key"]) for k in body["keys"]}

    return fetch
