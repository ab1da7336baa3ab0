"""The host lookups of the `http` target's calls: each bounded by its call's deadline, and no tenant holding them all.

`getaddrinfo` cannot be interrupted, so a call with a deadline resolves its host on a thread of its own and stops
waiting at the deadline; a lookup the resolver never answers keeps that thread until the resolver gives up. All of a
worker's calls share its lookup threads, so one tenant whose receivers' DNS hangs could otherwise take every one of
them and stall every other tenant's calls behind its own. Hence:

- a tenant has at most `per_tenant` lookups running at once (answered or not: one its call stopped waiting for still
  counts until the resolver returns). A lookup over its tenant's cap waits for one of them to end - at most until its
  call's deadline, then it fails as a timeout (retryable), so it waits on its own tenant's lookups only;
- a lookup starts on a free thread at once or not at all: with every one of `threads` busy it fails at once
  (`LookupsBusy`, retryable) rather than queue behind lookups that may never end. Other tenants fill the threads
  only once `threads / per_tenant` tenants' lookups hang together.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable

Resolver = Callable[[str, int], list[str]]

#: Lookup threads of a worker (each Lambda container): far more than a batch's records call at once.
LOOKUP_THREADS = 32
#: Lookups one tenant may have running at once: a batch's calls to distinct hosts rarely need more, and they wait
#: for each other (within their deadlines) rather than fail.
LOOKUPS_PER_TENANT = 4


class LookupsBusy(Exception):
    """Every lookup thread is busy (with other tenants' lookups that do not end): the call is not made; try again."""


class HostLookups:
    """Resolves hosts for calls with a deadline on threads of its own, at most `per_tenant` of one tenant at once and
    never more than `threads` in all (thread-safe)."""

    def __init__(
        self,
        resolver: Resolver,
        *,
        threads: int = LOOKUP_THREADS,
        per_tenant: int = LOOKUPS_PER_TENANT,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resolver = resolver
        self.threads = threads
        self.per_tenant = per_tenant
        self.monotonic = monotonic
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="target-resolve")
        self._running = 0
        self._by_tenant: dict[str, int] = {}
        self._changed = threading.Condition()

    def running(self, tenant: str) -> int:
        """The tenant's lookups running now (for tests)."""
        with self._changed:
            return self._by_tenant.get(tenant, 0)

    def resolve(self, tenant: str, host: str, port: int, timeout: float) -> list[str]:
        """`host`'s addresses, within `timeout` seconds: TimeoutError past it (the lookup goes on, on its thread,
        and counts against the tenant until it ends), LookupsBusy when no thread is free; the resolver's own
        errors (OSError) as they are."""
        deadline = self.monotonic() + timeout
        with self._changed:
            while self._by_tenant.get(tenant, 0) >= self.per_tenant:
                left = deadline - self.monotonic()
                if left <= 0:
                    raise TimeoutError(
                        f"resolving host '{host}' waited {timeout:.1f} s for this tenant's other "
                        f"{self.per_tenant} lookups to end"
                    )
                self._changed.wait(left)
            if self._running >= self.threads:
                raise LookupsBusy(f"resolving host '{host}': all {self.threads} lookup threads of this worker are busy")
            self._running += 1
            self._by_tenant[tenant] = self._by_tenant.get(tenant, 0) + 1
        future = self._pool.submit(self._lookup, tenant, host, port)
        try:
            return future.result(max(0.0, deadline - self.monotonic()))
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"resolving host '{host}' took over {timeout:.1f} s") from None

    def _lookup(self, tenant: str, host: str, port: int) -> list[str]:
        try:
            return self.resolver(host, port)
        finally:
            with self._changed:
                self._running -= 1
                left = self._by_tenant[tenant] - 1
                if left:
                    self._by_tenant[tenant] = left
                else:
                    del self._by_tenant[tenant]
                self._changed.notify_all()
