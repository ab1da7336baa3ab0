"""The execution slot (docs/design.md §3.4, step 2): one of the tenant's slots (its execution budget) held for the
attempt, or the occurrence waits - never dropped. Without a gate (no execution budgets) every attempt holds an unlimited
permit."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.ports import Dispatch, MessageControl
from scheduler.core.tenancy.concurrency import RESEND_AFTER, ConcurrencyGate, Permit, throttle_wait

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExecutionSlots:
    ports: StepPorts
    #: Per-tenant execution slots (None: no execution budgets).
    gate: ConcurrencyGate | None

    def take(self, dispatch: Dispatch, owner: str, message: MessageControl, now: datetime) -> Permit | Outcome:
        """Step 2: one of the tenant's slots for this attempt, leased as long as its claim; while all are held, the
        occurrence waits (`throttled`)."""
        if self.gate is None:
            return Permit.unlimited(dispatch.tenant, owner)
        permit = self.gate.enter(dispatch.tenant, owner, now, now + self.ports.config.lease)
        return self.throttled(dispatch, message, now) if permit is None else permit

    def throttled(self, dispatch: Dispatch, message: MessageControl, now: datetime) -> Outcome:
        """The tenant is at its execution concurrency limit: the occurrence waits (never dropped). After a few
        receives it goes back as a fresh message, so the ready queue's maxReceiveCount never dead-letters it."""
        wait = throttle_wait(message.receive_count, dispatch.key)
        self.ports.metrics.count("TenantConcurrencyDelaySeconds", wait, unit="Seconds")
        log.info(
            "tenant at its execution concurrency limit: delayed",
            extra={
                "tenant": dispatch.tenant,
                "job_id": dispatch.job_id,
                "occurrence_key": dispatch.key,
                "wait_s": wait,
            },
        )
        if message.receive_count >= RESEND_AFTER:
            try:
                self.ports.queue.send([dispatch.deferred_to(now + timedelta(seconds=wait))], now)
            except Exception:  # keep this message instead; the next receive tries again
                log.exception("throttled occurrence not sent again", extra={"occurrence_key": dispatch.key})
                return Outcome.hide(wait, Why.THROTTLED)
            return Outcome.acknowledge(Why.THROTTLED, "sent again")
        return Outcome.hide(wait, Why.THROTTLED)
