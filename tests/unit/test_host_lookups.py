"""The http target's host lookups: a tenant whose receivers' DNS hangs holds a few of a worker's lookup threads, never
all of them, so other tenants' calls resolve at once; and each lookup ends by its call's deadline. A fake resolver
stands in for DNS; no connection is made (the test refuses them)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.host_lookups import HostLookups, LookupsBusy
from scheduler.adapters.http_target import HttpTargetInvoker
from scheduler.core.model.job import Job, JobSpec, JobState
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS

T0 = datetime(2026, 3, 1, tzinfo=UTC)
PUBLIC = "93.184.216.34"


@pytest.fixture
def hanging() -> Iterator[threading.Event]:
    """Released when the test ends: until then the fake resolver does not answer for `*.hangs.example`."""
    release = threading.Event()
    yield release
    release.set()


def resolver_hanging_on(release: threading.Event) -> Any:
    def resolve(host: str, port: int) -> list[str]:
        if host.endswith(".hangs.example"):
            release.wait(60)
        return [PUBLIC]

    return resolve


def call_of(tenant: str, url: str, timeout: int) -> TargetCall:
    spec = JobSpec.model_validate(
        {
            "schedule": {"type": "once", "at": "2026-03-01T00:00:00Z"},
            "target": {"type": "http", "url": url, "timeout_seconds": timeout},
        }
    )
    job = Job(job_id="j1", tenant=tenant, spec=spec, version=1, state=JobState.ACTIVE, created_at=T0, updated_at=T0)
    return TargetCall(job, "j1:x", T0, 1, 1, lambda: None, T0)


def failure_of(invoker: HttpTargetInvoker, call: TargetCall) -> tuple[TargetFailure, float]:
    started = time.monotonic()
    with pytest.raises(TargetFailure) as failed:
        invoker.invoke(call)
    return failed.value, time.monotonic() - started


def test_a_tenant_whose_dns_hangs_does_not_stall_another_tenants_calls(
    hanging: threading.Event, no_connections: list[Any]
) -> None:
    # Given a tenant whose receivers' DNS never answers, with many calls waiting on it at once in one worker
    invoker = HttpTargetInvoker(
        AddressGuard(False, resolver=resolver_hanging_on(hanging)), KeyRing.parse(LOCAL_SIGNING_KEYS)
    )
    with ThreadPoolExecutor(40) as calls:
        stuck = [
            calls.submit(invoker.invoke, call_of("slow", f"https://r{n}.hangs.example/hook", 30)) for n in range(40)
        ]
        time.sleep(0.3)  # each is waiting on its lookup, or for its tenant's others to end
        assert not any(call.done() for call in stuck)

        # When another tenant's call resolves its host
        failure, took = failure_of(invoker, call_of("other", "https://fine.example/hook", 5))

        # Then its lookup answered at once: the call went on to connect (which this test refuses)
        assert took < 1.0, took
        assert failure.kind == "retryable" and "the test refuses every connection" in failure.message
        assert no_connections == [(PUBLIC, 443)]
        hanging.set()


def test_a_lookup_over_its_tenants_cap_waits_for_its_tenants_others_at_most_until_its_deadline(
    hanging: threading.Event,
) -> None:
    lookups = HostLookups(resolver_hanging_on(hanging), per_tenant=2)
    with ThreadPoolExecutor(2) as running:
        for n in range(2):
            running.submit(lookups.resolve, "slow", f"r{n}.hangs.example", 443, 30)
        deadline = time.monotonic() + 2
        while lookups.running("slow") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert lookups.running("slow") == 2

        # A third lookup of that tenant waits for one of the two, and fails by its own deadline
        started = time.monotonic()
        with pytest.raises(TimeoutError, match=r"waited 0\.5 s for this tenant's other 2 lookups"):
            lookups.resolve("slow", "fine.example", 443, 0.5)
        assert 0.4 <= time.monotonic() - started < 1.5

        # ... while another tenant's resolves at once, and the first tenant's goes on once one of its own ends
        assert lookups.resolve("other", "fine.example", 443, 5) == [PUBLIC]
        hanging.set()
        assert lookups.resolve("slow", "fine.example", 443, 5) == [PUBLIC]


def test_a_lookup_fails_at_once_when_every_thread_is_taken(hanging: threading.Event) -> None:
    # Two tenants at their caps fill a two-thread worker: a third tenant's lookup does not queue behind theirs
    lookups = HostLookups(resolver_hanging_on(hanging), threads=2, per_tenant=1)
    with ThreadPoolExecutor(2) as running:
        for tenant in ("a", "b"):
            running.submit(lookups.resolve, tenant, f"{tenant}.hangs.example", 443, 30)
        deadline = time.monotonic() + 2
        while lookups.running("a") + lookups.running("b") < 2 and time.monotonic() < deadline:
            time.sleep(0.01)

        started = time.monotonic()
        with pytest.raises(LookupsBusy, match="all 2 lookup threads of this worker are busy"):
            lookups.resolve("c", "fine.example", 443, 5)
        assert time.monotonic() - started < 0.5
        hanging.set()


def test_a_busy_worker_fails_the_call_as_retryable(hanging: threading.Event, no_connections: list[Any]) -> None:
    guard = AddressGuard(False, resolver=resolver_hanging_on(hanging))
    guard.lookups = HostLookups(guard.resolver, threads=1, per_tenant=1)
    invoker = HttpTargetInvoker(guard, KeyRing.parse(LOCAL_SIGNING_KEYS))
    with ThreadPoolExecutor(1) as running:
        running.submit(invoker.invoke, call_of("slow", "https://r.hangs.example/hook", 30))
        deadline = time.monotonic() + 2
        while guard.lookups.running("slow") < 1 and time.monotonic() < deadline:
            time.sleep(0.01)

        failure, took = failure_of(invoker, call_of("other", "https://fine.example/hook", 5))

        assert failure.kind == "retryable" and failure.message.startswith("not sent: resolving host 'fine.example'")
        assert took < 0.5 and no_connections == []
        hanging.set()
