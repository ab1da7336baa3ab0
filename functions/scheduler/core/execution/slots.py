"""The execution slot (docs/design.md §3.4, step 2): one of the tenant's slots (its execution budget) held for the
attempt, or the occurrence waits - never dropped. Without a gate (no execution budgets) every attempt holds an unlimited
permit."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.ports import Dispatch, Hold, MessageControl
from scheduler.core.tenancy.concurrency import RESEND_AFTER, ConcurrencyGate, Permit, throttle_wait
from scheduler.core.tenancy.flow_control import FlowKeys, Waiting

log = logging.getLogger(__name__)

#: How many times an attempt waits out its flow-control key's next start in the worker before it waits hidden (each
#: wait is at least the key's gap; all of them within `early_wait_max` of the first try).
PACING_TRIES = 50


@dataclass(frozen=True)
class ExecutionSlots:
    ports: StepPorts
    #: Per-tenant execution slots (None: no execution budgets).
    gate: ConcurrencyGate | None
    #: Flow-control keys' slots, pauses and start pacing (None: no flow control).
    flow: FlowKeys | None = None
    #: How the worker waits out a flow-control key's start pacing when it is short (`early_wait_max`).
    sleep: Callable[[float], None] = time.sleep

    def take(
        self, dispatch: Dispatch, owner: str, message: MessageControl, now: datetime, flow_key: str | None = None
    ) -> Permit | Outcome:
        """Step 2: one of the tenant's slots for this attempt, leased as long as its claim, and one of its
        flow-control key's (`flow_key`, the job's); while all are held, or the key is paused, the occurrence waits
        (`throttled`)."""
        lease_until = now + self.ports.config.lease
        if self.gate is None:
            permit: Permit | None = Permit.unlimited(dispatch.tenant, owner)
        else:
            permit = self.gate.enter(dispatch.tenant, owner, now, lease_until)
        if permit is None:
            return self.throttled(dispatch, message, now)
        if self.flow is None or flow_key is None:
            return permit
        try:
            keyed = self.flow.enter(dispatch.tenant, flow_key, owner, now, lease_until)
            # The key's next start is near (its pacing, or a start another attempt just took: records of one batch
            # race for it): wait it out and try again, for as long as an early message is waited out in the worker.
            # Only then, or past that, does the occurrence wait hidden.
            patience = now + self.ports.config.early_wait_max
            for _ in range(PACING_TRIES):
                if not isinstance(keyed, Waiting) or keyed.until is None or keyed.until > patience:
                    break
                self.sleep(max(0.0, (keyed.until - now).total_seconds()))
                now = self.ports.clock.now()
                lease_until = now + self.ports.config.lease
                keyed = self.flow.enter(dispatch.tenant, flow_key, owner, now, lease_until)
        except BaseException:
            permit.release()
            raise
        if isinstance(keyed, Waiting):
            permit.release()
            if message.receive_count == 1:
                # The hold begins (or goes on in a fresh message): one write, so that the run shows what held it.
                self.mark_held(dispatch, flow_key, keyed)
            log.info(
                "flow-control key at its limit: delayed",
                extra={"tenant": dispatch.tenant, "flow_key": flow_key, "occurrence_key": dispatch.key},
            )
            wait = None if keyed.until is None else max(1.0, (keyed.until - now).total_seconds())
            return self.throttled(dispatch, message, now, wait, metric="FlowControlDelaySeconds")
        permit.flow = keyed
        return permit

    def mark_held(self, dispatch: Dispatch, flow_key: str, waiting: Waiting) -> None:
        """Record on the occurrence's item that its key holds it back (its first claim keeps it on the run). Never
        fails the attempt: the hold is told, not decided, by this write."""
        try:
            self.ports.ledger.mark_held(dispatch, Hold(flow_key, dispatch.fire_at, frozenset({waiting.reason})))
        except Exception:
            log.exception("flow-control hold not recorded", extra={"occurrence_key": dispatch.key})

    def throttled(
        self,
        dispatch: Dispatch,
        message: MessageControl,
        now: datetime,
        wait: float | None = None,
        *,
        metric: str = "TenantConcurrencyDelaySeconds",
    ) -> Outcome:
        """The tenant is at its execution concurrency limit (or the occurrence's flow-control key is, or is paused
        for `wait` seconds): the occurrence waits (never dropped). After a few receives it goes back as a fresh
        message, so the ready queue's maxReceiveCount never dead-letters it."""
        if wait is None:
            wait = throttle_wait(message.receive_count, dispatch.key)
        self.ports.metrics.count(metric, wait, unit="Seconds")
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
