"""The key cache: per-job keys fetched once, again after the TTL, and again on an unknown key id at most once per
refresh interval per job; the Receiver verifies across a key rotation without a restart."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from punctual_sdk.receiver import InMemoryDedupeStore, KeyCache, Receiver, UnknownKey, keys_from_client
from scheduler.security.signing import KeyRing
from tests.sdk.receiver.signed import KEYS, NOW, signed_request


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Fetcher:
    """The API's answers, counted: `keys[job_id]`, or LookupError for a job it does not know."""

    def __init__(self, keys: dict[str, dict[str, str]]) -> None:
        self.keys = keys
        self.calls: list[str] = []

    def __call__(self, job_id: str) -> Mapping[str, str]:
        self.calls.append(job_id)
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

    assert cache.refresh("a") is None  # just fetched
    assert cache.refresh("b") == {"k1": "y"}  # another job has its own interval
    clock.now += 31
    assert cache.refresh("a") == {"k1": "x"}
    assert cache.refresh("a") is None
    assert fetch.calls == ["a", "b", "a"]


def test_an_unknown_job_is_remembered_as_keyless_so_forged_job_ids_do_not_hammer_the_api() -> None:
    clock, fetch = Clock(), Fetcher({})
    cache = KeyCache(fetch, refresh_interval_seconds=30, clock=clock)

    assert cache.keys("nope") == {}
    assert cache.refresh("nope") is None
    assert fetch.calls == ["nope"]


def test_the_cache_keeps_at_most_max_jobs() -> None:
    fetch = Fetcher({str(n): {"k1": str(n)} for n in range(3)})
    cache = KeyCache(fetch, max_jobs=2, clock=Clock())

    for job in ("0", "1", "0", "2"):  # "1" is the least recently used when "2" arrives
        cache.keys(job)
    cache.keys("0")
    cache.keys("1")

    assert fetch.calls == ["0", "1", "2", "1"]


def test_an_error_other_than_lookup_propagates_and_is_not_cached() -> None:
    calls = []

    def broken(job_id: str) -> Mapping[str, str]:
        calls.append(job_id)
        raise ConnectionError("API unreachable")

    cache = KeyCache(broken, clock=Clock())
    for _ in range(2):
        with pytest.raises(ConnectionError):
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
    receiver = Receiver(InMemoryDedupeStore(), KeyCache(fetch, clock=clock), clock=clock)
    forged = signed_request(keys={"k7": "guess"})

    for _ in range(3):
        with pytest.raises(UnknownKey):
            receiver.verify(forged.method, forged.host, forged.path, forged.headers, forged.body)
    assert fetch.calls == ["job-1"]


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

    assert fetch("job-1") == {"k1": "a", "k2": "b"}
    with pytest.raises(LookupError):
        fetch("gone")
    with pytest.raises(_ServerDown):
        fetch("down")
