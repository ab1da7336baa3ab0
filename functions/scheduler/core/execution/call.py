"""The call (docs/design.md §3.4, step 6): the target invoked with the occurrence's key and fencing token, the lease
kept by a heartbeat while it runs; what it returned, how it failed, or that the lease was lost meanwhile."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from scheduler.core.errors import LeaseLost
from scheduler.core.execution.heartbeat import Heartbeat
from scheduler.core.execution.lease import Lease
from scheduler.core.execution.outcome import Outcome, Why
from scheduler.core.execution.step_ports import StepPorts
from scheduler.core.ports import Heartbeats, TargetCall, TargetFailure, TargetInvoker

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Called:
    """The target's answer: its result, or how it failed (`failure` set)."""

    result: str | None = None
    failure: TargetFailure | None = None


@dataclass(frozen=True)
class Call:
    ports: StepPorts
    targets: Mapping[str, TargetInvoker]
    #: Extends the lease in the background while a target that cannot heartbeat itself runs.
    heartbeats: Heartbeats | None

    def run(self, lease: Lease) -> Called | Outcome:
        """Invoke the claimed occurrence's target; an Outcome when the lease was lost meanwhile (LeaseLost means
        abort now and never write: the new holder owns the occurrence)."""
        claimed = lease.claimed
        job, execution = claimed.job, claimed.execution
        invoker = self.targets.get(job.spec.target.type)
        call = TargetCall(
            job=job,
            occurrence_key=claimed.key,
            scheduled_for=claimed.dispatch.scheduled_for,
            attempt=execution.attempts,
            fencing_token=execution.epoch,
            heartbeat=lease.beat,
            deadline=self.ports.clock.now() + self.ports.config.lease,
        )
        lease_s = self.ports.config.lease.total_seconds()
        interval = lease_s * self.ports.config.heartbeat_fraction if self.ports.config.heartbeat_fraction else None
        called = Called()
        with Heartbeat(self.heartbeats, lease.beat, interval) as beat:
            try:
                if invoker is None:
                    raise TargetFailure("permanent", f"no target adapter for type '{job.spec.target.type}'")
                called = Called(result=invoker.invoke(call))
            except TargetFailure as exc:
                called = Called(failure=exc)
            except LeaseLost:
                beat.lost = True
            except Exception as exc:
                # A crash inside a handler target: it may have acted before it raised. Ambiguous: retried for an
                # at-least-once job, RECONCILING for an at-most-once one (never run twice).
                log.exception("target raised", extra={"job_id": job.job_id, "occurrence_key": claimed.key})
                called = Called(failure=TargetFailure("ambiguous", f"{type(exc).__name__}: {exc}"))
        if beat.lost:
            self.ports.metrics.count("LeaseLost")
            log.warning("lease lost; aborting", extra={"job_id": job.job_id, "occurrence_key": claimed.key})
            return Outcome.hide(lease_s, Why.LEASE_LOST)
        return called
