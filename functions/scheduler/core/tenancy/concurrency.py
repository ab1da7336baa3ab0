"""Per-tenant execution budgets: how many occurrences of one tenant may run at once.

The dispatch budget (scheduler.core.tenancy.fairness) bounds how fast a tenant's occurrences *reach* the workers; it
cannot stop a tenant whose targets are slow from holding every worker: at 100 starts a second, a target that
takes a minute keeps 6,000 executions of that tenant open. So every attempt also takes one of its tenant's
`limit` execution slots before it claims the occurrence, holds it (with the same lease and heartbeat as its ledger
claim) while the target runs, and gives it back when it is done.

A slot is a leased item (`TenantSlots`): taken with a conditional write that succeeds only when the slot is free
or its holder's lease has ended, so a worker that crashes holding one frees it when its lease runs out, as the
ledger frees its occurrence. An attempt that finds no free slot does not run and is not dropped: its message comes
back a few seconds later (`throttle_wait`), re-sent as a fresh message once it has been received `RESEND_AFTER`
times so the queue's maxReceiveCount can never move a throttled occurrence to the dead-letter queue.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime

from scheduler.core.ports import Metrics, TenantSlots
from scheduler.core.tenancy.per_tenant import PerTenant

log = logging.getLogger(__name__)

#: Receives of one message a throttled occurrence may use before it is re-sent as a new message (the ready queues
#: dead-letter a message after 50 receives).
RESEND_AFTER = 5
#: The longest a throttled occurrence waits before it tries again (seconds).
MAX_THROTTLE_WAIT = 16.0


#: Execution slots per tenant: `default` for everyone, `overrides` by tenant id; 0 means unlimited.
ConcurrencyConfig = PerTenant[int]


def throttle_wait(receive_count: int, key: str) -> float:
    """Seconds a throttled occurrence waits: doubling with each receive of its message (1, 2, 4 ... 16 s), with
    +-25% jitter seeded by the occurrence key so a tenant's waiting occurrences do not all come back together."""
    base = min(MAX_THROTTLE_WAIT, 2.0 ** max(0, receive_count - 1))
    return base * random.Random(f"{key}/{receive_count}").uniform(0.75, 1.25)


@dataclass
class Permit:
    """A held execution slot (`slots` is None for a tenant without a limit: nothing held). Extended with the
    ledger lease; released when the attempt is over."""

    slots: TenantSlots | None
    tenant: str
    slot: int
    holder: str
    #: When the slot's lease ends unless extended (None: nothing held).
    lease_until: datetime | None = None
    #: The attempt's flow-control key's slot (scheduler.core.tenancy.flow_control), held beside this one: extended
    #: and released with it.
    flow: Permit | None = None

    @classmethod
    def unlimited(cls, tenant: str, holder: str) -> Permit:
        """An attempt of a tenant without a limit: nothing is held."""
        return cls(None, tenant, -1, holder)

    def extend(self, lease_until: datetime) -> bool:
        """Whether the slot (and the key's, if any) is still this attempt's, its lease now `lease_until` (True when
        nothing is held). Never raises: the slot is a budget, not a safety property (the ledger's lease and fencing
        are); an extension that failed counts as not kept."""
        kept = self._extend(lease_until)
        if self.flow is not None:
            kept = self.flow.extend(lease_until) and kept
        return kept

    def _extend(self, lease_until: datetime) -> bool:
        if self.slots is None:
            return True
        try:
            kept = self.slots.extend(self.tenant, self.slot, self.holder, lease_until)
        except Exception:
            log.exception(
                "execution slot not extended; tried again at the next heartbeat", extra={"tenant": self.tenant}
            )
            return False
        if not kept:
            # Our lease ran out and another attempt took the slot: the ledger fences this attempt the same way.
            log.warning("execution slot lost", extra={"tenant": self.tenant, "slot": self.slot})
            return False
        self.lease_until = lease_until
        return True

    def release(self) -> None:
        if self.flow is not None:
            self.flow.release()
        if self.slots is None:
            return
        try:
            self.slots.release(self.tenant, self.slot, self.holder)
        except Exception:  # the slot's lease frees it anyway; never fail an occurrence over it
            log.exception("execution slot not released; it frees when its lease ends", extra={"tenant": self.tenant})


@dataclass(eq=False)
class ConcurrencyGate:
    """Hands out per-tenant execution slots."""

    slots: TenantSlots
    config: ConcurrencyConfig
    metrics: Metrics

    def enter(self, tenant: str, holder: str, now: datetime, lease_until: datetime) -> Permit | None:
        """A permit for one attempt, or None when the tenant is at its limit."""
        limit = self.config.of(tenant)
        if limit <= 0:
            return Permit.unlimited(tenant, holder)
        slot = self.slots.acquire(tenant, limit, holder, now, lease_until)
        if slot is None:
            self.metrics.count("TenantConcurrencyThrottled")
            return None
        return Permit(self.slots, tenant, slot, holder, lease_until)
