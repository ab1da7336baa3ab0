"""The lease (docs/design.md §3.4, step 5): the claimed occurrence's lease in the ledger, its execution slot and its
message's visibility, extended together - before the call when the attempt was paused since its claim, and by the
heartbeat during it - or the attempt given back, uncalled, when they cannot be kept."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from datetime import datetime

from scheduler.core.errors import Fenced, LeaseLost
from scheduler.core.execution.claimed import Claimed
from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.slots import ExecutionSlots
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.model.job import RunState
from scheduler.core.ports import AttemptEnd

log = logging.getLogger(__name__)

#: Renewals of an aged lease before a target call, before the attempt is given back (each renewal paused as long).
RENEWALS_BEFORE_CALL = 3


@dataclass
class Lease:
    """The claimed occurrence's lease, held by this attempt (one per attempt: it remembers its last renewal)."""

    claimed: Claimed
    ports: StepPorts
    slots: ExecutionSlots
    #: Until when the ledger's lease was last extended.
    held_until: datetime | None = field(init=False)

    def __post_init__(self) -> None:
        self.held_until = self.claimed.execution.lease_until

    def renew(self) -> bool:
        """Extend the lease (conditional on owner and epoch: LeaseLost if another attempt took it), the execution
        slot and the message's visibility. Returns whether the slot is still this attempt's."""
        claimed = self.claimed
        lease_until = self.ports.clock.now() + self.ports.config.lease
        self.ports.ledger.heartbeat(claimed.key, claimed.owner, claimed.execution.epoch, lease_until)
        self.held_until = lease_until
        kept = claimed.permit.extend(lease_until)
        visible = math.ceil(self.ports.config.lease.total_seconds()) + self.ports.config.lease_margin_seconds
        claimed.message.extend_visibility(visible)
        return kept

    def beat(self) -> None:
        """One heartbeat during the call (TargetCall.heartbeat, and the background heartbeat)."""
        self.renew()

    def renew_before_call(self) -> Lease | Outcome:
        """Paused since the claim (the overlap check's read, a starved CPU) for longer than a heartbeat's interval,
        the lease, and the execution slot's with it, may have ended, and another attempt may have taken the slot:
        a target called now would run beside it. Renew both first (again if the renewal itself was paused that
        long); never call the target on a lease or a slot that is gone. The lease itself: call the target."""
        renewals = 0
        while self._aged():
            if renewals == RENEWALS_BEFORE_CALL:
                return self._give_back("lease kept ageing")
            renewals += 1
            self.ports.metrics.count("LeaseRenewedBeforeCall")
            try:
                kept = self.renew()
            except LeaseLost:
                self.ports.metrics.count("LeaseLost")
                log.warning(
                    "lease lost before the call: not called",
                    extra={"job_id": self.claimed.job.job_id, "occurrence_key": self.claimed.key},
                )
                return Outcome.hide(self.ports.config.lease.total_seconds(), Why.LEASE_LOST)
            if not kept:
                return self._give_back("execution slot lost")
        return self

    def _aged(self) -> bool:
        """Whether a heartbeat would have been due by now had the target been called when the lease was last
        renewed: less of it (or of the slot's) is left than what the background heartbeat keeps."""
        fraction = self.ports.config.heartbeat_fraction or 0.5
        keeps = self.ports.config.lease * (1 - fraction)
        permit = self.claimed.permit
        keyed = permit.flow.lease_until if permit.flow is not None else None
        ends = [end for end in (self.held_until, permit.lease_until, keyed) if end is not None]
        return bool(ends) and min(ends) - self.ports.clock.now() < keeps

    def _give_back(self, why: str) -> Outcome:
        """The claim is still this attempt's but its execution slot may not be (another attempt took it while this
        one was paused, or the renewals kept ageing): give the attempt back, uncalled, and wait for a slot like a
        throttled attempt."""
        claimed = self.claimed
        now = self.ports.clock.now()
        log.warning(f"{why} before the call: not called", extra={"occurrence_key": claimed.key})
        try:
            refund = AttemptEnd(
                RunState.RETRY_WAIT, error=f"{why} before the call", next_attempt_at=now, refund_attempt=True
            )
            self.ports.ledger.finish(claimed.key, claimed.owner, claimed.execution.epoch, now, refund)
        except Fenced:
            self.ports.metrics.count("FencedWrites")
            return Outcome.hide(self.ports.config.lease.total_seconds(), Why.FENCED)
        return self.slots.throttled(claimed.dispatch, claimed.message, now)
