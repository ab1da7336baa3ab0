"""The key cache: per-job keys fetched once, again after the TTL, and again on an unknown key id at most once per
refresh interval per job; the Receiver verifies across a key rotation without a restart."""

from __future__ import annotations

import contextlib
import json
import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from punctual_sdk.receiver import (
    InMemoryDedupeStore,
    InvalidSignature,
    JobKey,
    KeyCache,
    KeysUnavailable,
    Receiver,
    ReceiverError,
    UnknownKey,
    keys_from_api,
    keys_from_client,
)
from scheduler.security.signing import KeyRing
from tests.sdk.http_server import Quiet, serving
from tests.sdk.receiver.signed import KEYS, NOW, signed_request


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Fetcher:
    """The API's answers, counted: `keys[job_id]`, or LookupError for a job it does not know."""

    def __init__(self, keys: dict[str, dict[str, str | JobKey]]) -> None:
        self.keys = keys
        self.calls: list[str] = []
        self.keys_error: Exception | None = None

    def __call__(self, job_id: str) -> Mapping[str, str | JobKey]:
        self.calls.append(job_id)
        if self.keys_error is not None:
            raise self.keys_error
        if job_id not in self.keys:
            raise LookupError(job_id)
        return dict(self.keys[job_id])


def test_keys_are_fetched_once_per_job_then_again_after_the_ttl() -> None:
    clock, fetch = Clock(), Fetcher({"a": {"k1": "x"}, "b": {"k1": "y"}})
    cache = KeyCache(fetch, ttl_seconds=60, clock=clock)

    assert cache.keys("a") == {"k1": "x"}
    assert cache.keys("a") == {"k1": "x"}
    assert cache.keys("b") == {"k1": "y"}
    assert fetch.calls == ["a", "b"]

    fetch.keys["a"] = {"k2": "z"}
    clock.now += 61
    assert cache.keys("a") == {"k2": "z"}
    assert fetch.calls == ["a", "b", "a"]


def test_a_refresh_fetches_at_most_once_per_interval_per_job() -> None:
    clock, fetch = Clock(), Fetcher({"a": {"k1": "x"}, "b": {"k1": "y"}})
    cache = KeyCache(fetch, refresh_interval_seconds=30, clock=clock)
    cache.keys("a")

    with pytest.raises(KeysUnavailable) as too_soon:  # just fetched: the call is retried later
        cache.refresh("a")
    assert (too_soon.value.status, too_soon.value.retry_after) == (503, 30)
    assert cache.refresh("b") == {"k1": "y"}  # another job has its own interval
    clock.now += 31
    assert cache.refresh("a") == {"k1": "x"}
    with pytest.raises(KeysUnavailable):
        cache.refresh("a")
    assert fetch.calls == ["a", "b", "a"]


def test_an_unknown_job_is_remembered_as_keyless_for_the_negative_ttl() -> None:
    clock, fetch = Clock(), Fetcher({})
    cache = KeyCache(fetch, negative_ttl_seconds=10, clock=clock)

    assert cache.keys("nope") == {}
    assert cache.refresh("nope") == {}
    clock.now += 9
    assert cache.keys("nope") == {}
    assert fetch.calls == ["nope"]
    clock.now += 2
    assert cache.keys("nope") == {}
    assert fetch.calls == ["nope", "nope"]


def test_the_cache_keeps_at_most_max_jobs() -> None:
    fetch = Fetcher({str(n): {"k1": str(n)} for n in range(3)})
    cache = KeyCache(fetch, max_jobs=2, clock=Clock())

    for job in ("0", "1", "0", "2"):  # "1" is the least recently used when "2" arrives
        cache.keys(job)
    cache.keys("0")
    cache.keys("1")

    assert fetch.calls == ["0", "1", "2", "1"]


def test_a_failed_fetch_is_a_503_remembered_for_the_negative_ttl() -> None:
    clock, calls = Clock(), []

    def broken(job_id: str) -> Mapping[str, str]:
        calls.append(job_id)
        raise ConnectionError("API unreachable")

    cache = KeyCache(broken, negative_ttl_seconds=10, clock=clock)
    for retry_after in (10, 6):
        with pytest.raises(KeysUnavailable, match="ConnectionError") as failed:
            cache.keys("a")
        assert (failed.value.status, failed.value.retry_after) == (503, pytest.approx(retry_after))
        clock.now += 4
    assert calls == ["a"]

    clock.now += 3
    with pytest.raises(KeysUnavailable):
        cache.keys("a")
    assert calls == ["a", "a"]


def test_the_receiver_fetches_the_keys_again_when_a_call_names_a_new_key_id() -> None:
    # Given a receiver that fetched the job's keys before a rotation added k2 (and made it the only signer)
    clock = Clock()
    clock.now = NOW
    rotated = KeyRing.parse('{"current": "k2", "k2": "root-secret-number-two"}').job_keys("job-1")
    fetch = Fetcher({"job-1": dict(KEYS)})
    receiver = Receiver(InMemoryDedupeStore(), KeyCache(fetch, refresh_interval_seconds=30, clock=clock), clock=clock)
    old = signed_request()
    receiver.verify(old.method, old.host, old.path, old.headers, old.body)

    # When a call signed with k2 only arrives after the API started handing out k2
    clock.now += 31
    fetch.keys["job-1"] = {**KEYS, **rotated}
    new = signed_request(keys=rotated, timestamp=int(clock.now))

    # Then the receiver fetches once more and accepts it
    assert receiver.verify(new.method, new.host, new.path, new.headers, new.body).key_id == "k2"
    assert fetch.calls == ["job-1", "job-1"]


def test_forged_key_ids_within_the_interval_cost_no_fetch_and_are_refused() -> None:
    clock = Clock()
    clock.now = NOW
    fetch = Fetcher({"job-1": dict(KEYS)})
    receiver = Receiver(InMemoryDedupeStore(), KeyCache(fetch, refresh_interval_seconds=10, clock=clock), clock=clock)
    real, forged = signed_request(), signed_request(keys={"k7": "guess"})
    receiver.verify(real.method, real.host, real.path, real.headers, real.body)

    # within the interval: told to come back (a real rotation's first call verifies on punctual's retry)
    for _ in range(3):
        with pytest.raises(KeysUnavailable):
            receiver.verify(forged.method, forged.host, forged.path, forged.headers, forged.body)
    assert fetch.calls == ["job-1"]

    # after it: fetched once more, and still unknown: refused for good
    clock.now += 11
    again = signed_request(keys={"k7": "guess"}, timestamp=int(clock.now))
    with pytest.raises(UnknownKey):
        receiver.verify(again.method, again.host, again.path, again.headers, again.body)
    assert fetch.calls == ["job-1", "job-1"]


# -- revokes and expiries ---------------------------------------------------------------------------------------


def verifier(fetch: Fetcher, clock: Clock, **cache: Any) -> Callable[..., Any]:
    """`verify(keys, at)`: a call signed with `keys` at the clock's time, through a receiver whose key cache and
    signature check share `clock` (unix seconds)."""
    receiver = Receiver(InMemoryDedupeStore(), KeyCache(fetch, clock=clock, wall_clock=clock, **cache), clock=clock)

    def verify(keys: dict[str, str], attempt: int = 1) -> Any:
        call = signed_request(keys=keys, timestamp=int(clock.now), attempt=attempt)
        return receiver.verify(call.method, call.host, call.path, call.headers, call.body)

    return verify


def test_a_revoked_key_stops_verifying_within_the_ttl() -> None:
    # Given a receiver that verified a call under the job's key k1
    clock = Clock()
    clock.now = NOW
    fetch = Fetcher({"job-1": dict(KEYS)})
    verify = verifier(fetch, clock)
    assert verify(KEYS).key_id == "k1"

    # When the job's key is revoked (rotated with overlap_seconds 0): the API now hands out only k1.2
    revoked = KeyRing.parse('{"current": "k1", "k1": "root-secret-number-one"}').job_keys("job-1", 2)
    fetch.keys["job-1"] = dict(revoked)

    # Then a call signed with the old key verifies only until the keys are a TTL (60 s) old
    clock.now += 59
    assert verify(KEYS).key_id == "k1"
    clock.now += 2
    with pytest.raises(UnknownKey):
        verify(KEYS)
    assert verify(revoked).key_id == "k1.2"
    assert fetch.calls == ["job-1", "job-1"]


def test_keys_past_the_ttl_that_cannot_be_fetched_again_are_not_used() -> None:
    clock = Clock()
    clock.now = NOW
    fetch = Fetcher({"job-1": dict(KEYS)})
    verify = verifier(fetch, clock)
    assert verify(KEYS).key_id == "k1"

    # the API becomes unreachable (or answers 5xx): past the TTL the old keys are not trusted, the call is retried
    del fetch.keys["job-1"]
    fetch.keys_error = ConnectionError("API unreachable")
    clock.now += 61
    with pytest.raises(KeysUnavailable) as refused:
        verify(KEYS)
    assert refused.value.status == 503


def test_a_replaced_key_stops_verifying_at_its_expiry_even_while_cached() -> None:
    # Given a rotation's overlap: the API hands out the new key and the replaced one until NOW + 100
    clock = Clock()
    clock.now = NOW
    new = {"k1.2": "the-new-version-of-the-job-key"}
    fetch = Fetcher({"job-1": {"k1.2": new["k1.2"], "k1": JobKey(KEYS["k1"], expires_at=NOW + 100)}})
    verify = verifier(fetch, clock, ttl_seconds=3600)

    # Then the replaced key verifies until its expiry, by the receiver's clock, without a fetch...
    assert verify(KEYS).key_id == "k1"
    clock.now += 99
    assert verify(KEYS, attempt=2).key_id == "k1"
    assert fetch.calls == ["job-1"]

    # ...and not from then on, fetched again or not; a call signed with both keys, as punctual signs them during
    # the overlap, verifies with the new one
    clock.now += 1
    with pytest.raises(UnknownKey):
        verify(KEYS, attempt=3)
    assert verify({**new, **KEYS}, attempt=4).key_id == "k1.2"


def test_both_fetchers_read_expires_at() -> None:
    from punctual_sdk.models import SigningKeys

    answer = {
        "job_id": "job-1",
        "keys": [
            {"key_id": "k1.2", "key": "new", "version": 2, "expires_at": None},
            {"key_id": "k1", "key": "old", "version": 1, "expires_at": "2026-12-01T08:00:00Z"},
            {"key_id": "k0", "key": "odd", "version": 0, "expires_at": "next tuesday"},
        ],
    }
    expected = {"k1.2": JobKey("new"), "k1": JobKey("old", expires_at=1_796_112_000.0)}

    class Client:
        def signing_keys(self, job_id: str) -> SigningKeys:
            return SigningKeys.from_json(answer)

    class Api(Quiet, BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    assert keys_from_client(Client())("job-1") == expected
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Api)) as url:
        assert keys_from_api(url, {})("job-1") == expected


# -- a flood of forged calls ---------------------------------------------------------------------------------


def flood_receiver(fetch: Fetcher, cache_clock: Clock, **cache: Any) -> Receiver:
    """A receiver whose signature clock stays at NOW (every call is fresh) while its key cache's clock is the
    test's, and that already holds job-1's keys."""
    receiver = Receiver(InMemoryDedupeStore(), KeyCache(fetch, clock=cache_clock, **cache), clock=lambda: NOW)
    real = signed_request()
    receiver.verify(real.method, real.host, real.path, real.headers, real.body)
    return receiver


def forged(job_id: str, signature: str | None) -> dict[str, str]:
    headers = {k: v for k, v in signed_request().headers.items() if k != "X-Scheduler-Signature"}
    headers["X-Scheduler-Job-Id"] = job_id
    if signature is not None:
        headers["X-Scheduler-Signature"] = signature
    return headers


def test_unsigned_malformed_or_stale_calls_fetch_no_key_whatever_job_they_name() -> None:
    # Given a receiver that holds job-1's keys, and calls that name 10,000 random job ids
    clock, fetch = Clock(), Fetcher({"job-1": dict(KEYS)})
    receiver = flood_receiver(fetch, clock)
    rng = random.Random(7)
    signatures = [
        None,
        "garbage",
        f"t={NOW}",
        f"t={NOW},v2=k1:{'0' * 63}",
        f"t={NOW},v2=k1:{'Z' * 64}",
        f"t={NOW - 301},v2=k1:{'0' * 64}",
    ]

    # When each arrives (the clock moving a millisecond between them)
    for n in range(10_000):
        clock.now += 0.001
        headers = forged(f"{rng.getrandbits(128):032x}", signatures[n % len(signatures)])
        with pytest.raises(InvalidSignature):
            receiver.verify("POST", "receiver.example:8080", "/hooks/pay?x=1", headers, b"{}")

    # Then none made the receiver call the API
    assert fetch.calls == ["job-1"]


def test_fresh_calls_with_wrong_signatures_fetch_within_the_budget_and_keep_the_real_jobs_keys() -> None:
    # Given a receiver that holds job-1's keys (the budget: 5 fetches a second, 10 at once)
    clock, fetch = Clock(), Fetcher({"job-1": dict(KEYS)})
    receiver = flood_receiver(fetch, clock, fetch_rate=5, fetch_burst=10)
    rng = random.Random(11)
    started = clock.now

    # When 10,000 well-formed, fresh calls with wrong signatures name random job ids, a millisecond apart
    answers: Counter[str] = Counter()
    for _ in range(10_000):
        clock.now += 0.001
        headers = forged(f"{rng.getrandbits(128):032x}", f"t={NOW},v2=k1:{rng.getrandbits(256):064x}")
        with pytest.raises(ReceiverError) as refused:
            receiver.verify("POST", "receiver.example:8080", "/hooks/pay?x=1", headers, b"{}")
        answers[type(refused.value).__name__] += 1

    # Then the API was asked no more than the budget allows over those 10 seconds
    flood_fetches = len(fetch.calls) - 1
    assert 0 < flood_fetches <= 10 + 5 * (clock.now - started)
    assert answers == {"UnknownKey": flood_fetches, "KeysUnavailable": 10_000 - flood_fetches}
    assert receiver.keys is not None and receiver.keys.refused_fetches == 10_000 - flood_fetches

    # And job-1's keys are still held: its next call verifies without a fetch
    real = signed_request(attempt=2)
    assert receiver.verify(real.method, real.host, real.path, real.headers, real.body).key_id == "k1"
    assert fetch.calls.count("job-1") == 1


def test_jobs_the_api_does_not_know_never_push_out_the_keys_of_jobs_it_does() -> None:
    fetch = Fetcher({"a": {"k1": "x"}, "b": {"k1": "y"}})
    clock = Clock()
    cache = KeyCache(fetch, max_jobs=2, fetch_rate=1000, fetch_burst=1000, clock=clock)
    cache.keys("a")
    cache.keys("b")

    for n in range(50):
        clock.now += 0.01
        assert cache.keys(f"made-up-{n}") == {}

    assert (cache.keys("a"), cache.keys("b")) == ({"k1": "x"}, {"k1": "y"})
    assert fetch.calls.count("a") == fetch.calls.count("b") == 1


def test_a_flood_of_unknown_jobs_cannot_hold_off_the_refresh_of_a_known_jobs_keys(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a cache holding job-1's keys, and a flood naming unknown jobs that has spent what it may of the budget
    clock, fetch = Clock(), Fetcher({"job-1": {"k1": "x"}})
    cache = KeyCache(fetch, ttl_seconds=60, fetch_rate=5, fetch_burst=10, clock=clock)
    cache.keys("job-1")
    with caplog.at_level(logging.WARNING, logger="punctual_sdk.receiver"):
        for n in range(100):
            with contextlib.suppress(KeysUnavailable):
                cache.keys(f"made-up-{n}")
    assert cache.refused_fetches > 0
    with pytest.raises(KeysUnavailable, match="rate limited"):
        cache.keys("made-up-again")

    # When job-1's keys age past the TTL
    clock.now += 61
    for n in range(100):
        with contextlib.suppress(KeysUnavailable):
            cache.keys(f"more-made-up-{n}")

    # Then their refresh still gets a fetch, from the tokens a flood may not take
    assert cache.keys("job-1") == {"k1": "x"}
    assert fetch.calls.count("job-1") == 2
    # and the refusals were logged at most once a minute, with how many there were, not once each
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert cache.refused_fetches > 100
    assert [m.split(" key fetch")[0] for m in refusals] == ["refused 1", "refused 97"]


class _Key:
    def __init__(self, key_id: str, key: str) -> None:
        self.key_id, self.key = key_id, key


class _Answer:
    def __init__(self, keys: list[_Key]) -> None:
        self.keys = keys


class _NotFound(Exception):
    status = 404


class _Client:
    def signing_keys(self, job_id: str) -> _Answer:
        if job_id == "gone":
            raise _NotFound("no such job")
        if job_id == "down":
            raise _ServerDown("503")
        return _Answer([_Key("k1", "a"), _Key("k2", "b")])


class _ServerDown(Exception):
    status = 503


def test_keys_from_client_maps_every_key_and_turns_403_404_into_lookup_errors() -> None:
    fetch = keys_from_client(_Client())

    assert fetch("job-1") == {"k1": JobKey("a"), "k2": JobKey("b")}
    with pytest.raises(LookupError):
        fetch("gone")
    with pytest.raises(_ServerDown):
        fetch("down")
