"""The job keys a receiver verifies with: fetched from punctual (`GET /v1/jobs/{id}/signing-keys`) and cached per
job, fetched again when they age past a TTL or when a call names a key id the cache lacks (a rotation).

A key the API stops handing out (a revoke) is used for at most the TTL after the fetch that got it: past it the
keys are fetched again, and when they cannot be, the call is refused for now (503) rather than verified with the
old ones. A key the API hands out with an `expires_at` (the replaced key during a rotation's overlap) verifies
nothing from that instant on, by the receiver's clock, fetched again or not.

Anyone can send a receiver a call that names any job id, so what calls can make the cache fetch is bounded:

- the Receiver asks for keys only once the call's signature header is well formed and its timestamp fresh;
- every fetch takes a token from one `FetchBudget` for the whole cache (`fetch_rate` a second on average,
  `fetch_burst` at once), whatever the job; a fetch for a job whose keys the cache does not hold may not take the
  bucket's last tokens, which are kept for refreshing the keys of jobs it does hold;
- a job the API does not know, and a fetch that failed, are remembered for `negative_ttl_seconds`, apart from the
  jobs whose keys are held, so made-up job ids never push a real job's keys out;
- a call under a key id the cache lacks fetches its job's keys again at most once per `refresh_interval_seconds`.

When a fetch is not allowed, or fails, the cache raises KeysUnavailable (503 with Retry-After: punctual retries).
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from punctual_sdk.receiver.errors import KeysUnavailable


@dataclass(frozen=True)
class JobKey:
    """A key as the API hands it out: the key, and when it stops verifying (unix seconds; None: not planned)."""

    key: str
    expires_at: float | None = None


#: `fetch_keys(job_id) -> {key id: key}` (a key as a string, or a JobKey with its expiry). Raises LookupError when
#: the job does not exist or is not the caller's (the call is then refused as UnknownKey); any other exception is
#: a failed fetch (the receiver answers 503).
KeyFetcher = Callable[[str], Mapping[str, str | JobKey]]

#: The longest a fetched key is used before the job's keys are fetched again: what bounds a revoke's delay.
DEFAULT_TTL_SECONDS = 60.0
DEFAULT_REFRESH_INTERVAL_SECONDS = 10.0
DEFAULT_MAX_JOBS = 10_000
#: Key fetches a second, on average, over the whole cache.
DEFAULT_FETCH_RATE = 5.0
#: Key fetches at once, after a quiet spell.
DEFAULT_FETCH_BURST = 10
#: How long an unknown job, or a failed fetch, is remembered.
DEFAULT_NEGATIVE_TTL_SECONDS = 10.0
#: How often, at most, refused fetches are logged (with how many there were since the last time).
_LOG_INTERVAL_SECONDS = 60.0

logger = logging.getLogger("punctual_sdk.receiver")


class FetchBudget:
    """A token bucket over every key fetch: `rate` tokens a second, at most `burst` held. A fetch for a job whose
    keys are not held (`known=False`: any caller can name such a job) may not take the last `reserve` tokens
    (half the burst): a flood of calls naming unknown jobs leaves those to the refresh of the jobs that are held."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        if rate <= 0 or burst < 2:
            raise ValueError("fetch_rate must be > 0 and fetch_burst >= 2")
        self.rate = rate
        self.burst = burst
        self.reserve = burst // 2
        self._clock = clock
        self._tokens = float(burst)
        self._at = clock()
        self._lock = threading.Lock()

    def take(self, *, known: bool) -> float:
        """Take a token for one fetch: 0.0 when taken, else how many seconds until one may be."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._at) * self.rate)
            self._at = now
            needed = 1.0 + (0 if known else self.reserve)
            if self._tokens >= needed:
                self._tokens -= 1.0
                return 0.0
            return (needed - self._tokens) / self.rate


@dataclass
class _Entry:
    keys: Mapping[str, JobKey]
    fetched_at: float

    def usable(self, now: float) -> Mapping[str, str]:
        """The keys by key id, but for those whose `expires_at` is past at `now` (unix seconds)."""
        return {kid: k.key for kid, k in self.keys.items() if k.expires_at is None or now < k.expires_at}


@dataclass
class _Miss:
    """A job without keys to use: unknown to the API (`error` None), or whose fetch failed, until `until`."""

    until: float
    error: str | None


class KeyCache:
    """Job keys by job id (see the module docstring). Thread-safe; at most `max_jobs` jobs' keys are kept (least
    recently used first out), and apart from them at most `max_jobs` jobs without keys.
    `fetches` and `refused_fetches` count the fetches made and those the budget refused."""

    def __init__(
        self,
        fetch_keys: KeyFetcher,
        *,
        ttl_seconds: float = DEFAULT_TTL_SECONDS,
        refresh_interval_seconds: float = DEFAULT_REFRESH_INTERVAL_SECONDS,
        max_jobs: int = DEFAULT_MAX_JOBS,
        fetch_rate: float = DEFAULT_FETCH_RATE,
        fetch_burst: int = DEFAULT_FETCH_BURST,
        negative_ttl_seconds: float = DEFAULT_NEGATIVE_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if ttl_seconds <= 0 or refresh_interval_seconds < 0 or max_jobs < 1 or negative_ttl_seconds <= 0:
            raise ValueError(
                "ttl_seconds and negative_ttl_seconds must be > 0, refresh_interval_seconds >= 0 and max_jobs >= 1"
            )
        self._fetch = fetch_keys
        self.ttl_seconds = ttl_seconds
        self.refresh_interval_seconds = refresh_interval_seconds
        self.max_jobs = max_jobs
        self.negative_ttl_seconds = negative_ttl_seconds
        self.budget = FetchBudget(fetch_rate, fetch_burst, clock)
        self.fetches = 0
        self.refused_fetches = 0
        self._clock = clock
        #: Unix seconds, for the keys' `expires_at` (`clock` measures ages and the budget).
        self._wall_clock = wall_clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._misses: OrderedDict[str, _Miss] = OrderedDict()
        self._lock = threading.Lock()
        self._logged_at: float | None = None
        self._refused_since_log = 0

    def keys(self, job_id: str) -> Mapping[str, str]:
        """The job's unexpired keys (key id -> key): the cached ones while younger than the TTL, else fetched; {}
        for a job the API does not know. Raises KeysUnavailable when they cannot be fetched now."""
        return self.lookup(job_id)[0]

    def lookup(self, job_id: str) -> tuple[Mapping[str, str], bool]:
        """`keys`, and whether they are the API's answer of just now (nothing newer to fetch)."""
        with self._lock:
            now = self._clock()
            entry = self._entries.get(job_id)
            if entry is not None and now - entry.fetched_at < self.ttl_seconds:
                self._entries.move_to_end(job_id)
                return entry.usable(self._wall_clock()), False
            remembered = self._remembered(job_id, now)
        if remembered is not None:
            return remembered, False
        return self._load(job_id, known=entry is not None), True

    def refresh(self, job_id: str) -> Mapping[str, str]:
        """Fetch the job's keys again (a call names a key id they lack). Raises KeysUnavailable when they were
        fetched less than `refresh_interval_seconds` ago, or cannot be fetched now."""
        with self._lock:
            now = self._clock()
            entry = self._entries.get(job_id)
            if entry is not None and now - entry.fetched_at < self.refresh_interval_seconds:
                wait = self.refresh_interval_seconds - (now - entry.fetched_at)
                raise KeysUnavailable(
                    f"the keys of job {job_id} were fetched {now - entry.fetched_at:.0f} s ago and lack the call's "
                    f"key id; they are fetched again in {wait:.0f} s at the earliest",
                    retry_after=wait,
                )
            remembered = self._remembered(job_id, now)
        # a call under a key id the job lacks may be forged: its fetch may not take the tokens kept for refreshes
        return remembered if remembered is not None else self._load(job_id, known=False)

    def _remembered(self, job_id: str, now: float) -> Mapping[str, str] | None:
        """Under the lock, what is remembered of a job without keys: {} while it is unknown to the API, and
        KeysUnavailable while its last fetch failed; None when nothing is (a fetch may be tried)."""
        miss = self._misses.get(job_id)
        if miss is None:
            return None
        if miss.until <= now:
            del self._misses[job_id]
            return None
        if miss.error is not None:
            raise KeysUnavailable(miss.error, retry_after=miss.until - now)
        return {}

    def _load(self, job_id: str, *, known: bool) -> Mapping[str, str]:
        wait = self.budget.take(known=known)
        if wait > 0:
            self._note_refused(job_id)
            raise KeysUnavailable(
                f"the keys of job {job_id} cannot be fetched now: this receiver's key fetches are rate limited "
                f"({self.budget.rate:g} a second, {self.budget.burst} at once) and none is left",
                retry_after=wait,
            )
        with self._lock:
            self.fetches += 1
        try:
            keys = {str(k): v if isinstance(v, JobKey) else JobKey(str(v)) for k, v in self._fetch(job_id).items()}
        except LookupError:
            keys = {}
        except Exception as exc:
            # the caller is told the kind of failure only; the receiver's log gets the whole of it
            logger.warning("fetching the keys of job %r failed", job_id, exc_info=True)
            detail = f"the keys of job {job_id} could not be fetched ({type(exc).__name__}); retry later"
            self._remember_miss(job_id, detail)
            raise KeysUnavailable(detail, retry_after=self.negative_ttl_seconds) from exc
        if not keys:
            self._remember_miss(job_id, None)
            return {}
        entry = _Entry(keys, self._clock())
        with self._lock:
            self._misses.pop(job_id, None)
            self._entries[job_id] = entry
            self._entries.move_to_end(job_id)
            while len(self._entries) > self.max_jobs:
                self._entries.popitem(last=False)
        return entry.usable(self._wall_clock())

    def _remember_miss(self, job_id: str, error: str | None) -> None:
        with self._lock:
            if error is None:
                self._entries.pop(job_id, None)  # the API no longer knows the job: its keys go
            self._misses[job_id] = _Miss(self._clock() + self.negative_ttl_seconds, error)
            self._misses.move_to_end(job_id)
            while len(self._misses) > self.max_jobs:
                self._misses.popitem(last=False)

    def _note_refused(self, job_id: str) -> None:
        with self._lock:
            self.refused_fetches += 1
            self._refused_since_log += 1
            now = self._clock()
            if self._logged_at is not None and now - self._logged_at < _LOG_INTERVAL_SECONDS:
                return
            count, self._refused_since_log, self._logged_at = self._refused_since_log, 0, now
        logger.warning(
            "refused %d key fetch(es) (the last for job %r): the fetch budget of %g a second is spent; many calls "
            "naming jobs whose keys are not cached (a flood of forged calls?) answered 503",
            count,
            job_id,
            self.budget.rate,
        )


class _SigningKeysClient(Protocol):
    def signing_keys(self, job_id: str) -> Any: ...


def keys_from_client(client: _SigningKeysClient) -> KeyFetcher:
    """A fetcher over `punctual_sdk.Client.signing_keys`: the job's keys by key id. A 403 or 404 (not this
    tenant's job, or no such job) becomes LookupError; other errors (auth, network, 5xx) propagate."""

    def fetch(job_id: str) -> Mapping[str, JobKey]:
        try:
            answer = client.signing_keys(job_id)
        except Exception as exc:
            if getattr(exc, "status", None) in (403, 404):
                raise LookupError(f"no signing keys for job {job_id}: {exc}") from exc
            raise
        return _job_keys((k.key_id, k.key, getattr(k, "expires_at", None)) for k in answer.keys)

    return fetch


def keys_from_api(base_url: str, headers: Mapping[str, str], timeout: float = 10.0) -> KeyFetcher:
    """A fetcher that calls `GET {base_url}/v1/jobs/{job_id}/signing-keys` with `headers` (e.g. a bearer token),
    with the standard library only. On AWS, where the API wants SigV4, use `keys_from_client`."""
    root = base_url.rstrip("/")

    def fetch(job_id: str) -> Mapping[str, JobKey]:
        url = f"{root}/v1/jobs/{urllib.parse.quote(job_id, safe='')}/signing-keys"
        request = urllib.request.Request(url, headers=dict(headers))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                body = json.loads(response.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code in (403, 404):
                raise LookupError(f"no signing keys for job {job_id}: HTTP {exc.code}") from exc
            raise
        return _job_keys((k["key_id"], k["key"], k.get("expires_at")) for k in body["keys"])

    return fetch


def _job_keys(keys: Iterable[tuple[Any, Any, Any]]) -> dict[str, JobKey]:
    """The API's keys (key id, key, `expires_at`) by key id. A key whose `expires_at` cannot be read is left out:
    only a replaced key has one, and the current key signs every call it does."""
    found: dict[str, JobKey] = {}
    for kid, key, expires in keys:
        if expires is None:
            found[str(kid)] = JobKey(str(key))
            continue
        try:
            when = expires if isinstance(expires, datetime) else datetime.fromisoformat(str(expires))
        except ValueError:
            logger.warning("left out key %r: its expires_at %r is not a date", kid, expires)
            continue
        found[str(kid)] = JobKey(str(key), (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp())
    return found
