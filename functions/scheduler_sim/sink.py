"""The sink: a target that cooperates the way docs/design.md §1 asks of targets, and remembers everything.

It accepts a given occurrence key once (idempotency: a repeat is answered as a duplicate, with no new effect)
and refuses a call whose fencing token is lower than one it has already seen for that key. Every raw call is
recorded too, with whether it reached the point where a non-cooperating target would have acted: that is
what at-most-once jobs are judged by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from scheduler.core.model.job import RunState
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.core.tenancy.flow_control import flow_owner
from scheduler_sim.records import Fate, RawCall, Verdict

if TYPE_CHECKING:
    from scheduler_sim.simulation import Simulation

#: A lease is only counted as live this far inside it, beyond what the actors' clocks may differ by (twice each
#: one's offset, `FaultProfile.skew_seconds`).
SKEW_SLACK = timedelta(seconds=2)
#: The slot lease of an attempt that took no slot (its key had no parallelism when it started).
NO_LEASE = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)


@dataclass
class KeyState:
    max_token: int = 0
    accepted: bool = False


@dataclass
class SinkTarget:
    """A `TargetInvoker` standing in for a cooperating downstream system."""

    sim: Simulation
    calls: list[RawCall] = field(default_factory=list)
    keys: dict[str, KeyState] = field(default_factory=dict)
    #: Accepted effects, by (job_id, scheduled_for): the true identity of an occurrence, whatever key it carried.
    effects: dict[tuple[str, datetime], list[RawCall]] = field(default_factory=dict)
    #: Target calls in progress, by tenant: (occurrence key, the attempt's fencing token).
    in_flight: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    #: Calls that began while their tenant already had `limit` others in progress within their leases.
    over_limit: list[str] = field(default_factory=list)
    #: Target calls in progress, by (tenant, flow-control key), and the calls that began while their key already had
    #: `parallelism` others in progress within their leases.
    keyed_in_flight: dict[tuple[str, str], list[tuple[str, int]]] = field(default_factory=dict)
    over_parallelism: list[str] = field(default_factory=list)

    def invoke(self, call: TargetCall) -> str | None:
        """One target call, counted against its tenant's execution budget while it runs (invariant 9)."""
        tenant = call.job.tenant
        now = self.sim.clock.now()
        running = self.in_flight.setdefault(tenant, [])
        # Others still inside their lease, as their heartbeats renewed it (with a margin for the actors' clock skew):
        # a worker frozen past its lease has lost its slot as it has lost its claim, so it does not count.
        margin = timedelta(seconds=2 * self.sim.profile.skew_seconds) + SKEW_SLACK
        leases = self.sim.slot_leases
        live = [
            key
            for key, token in running
            if (until := self._leased(key, token))
            and until - margin > now
            and self._slot_leased(leases, tenant, key) - margin > now
        ]
        limit = self.sim.concurrency.of(tenant)
        if limit > 0 and len(live) >= limit:
            self.over_limit.append(
                f"tenant {tenant}: {call.occurrence_key} started at {now.isoformat()} while {len(live)} "
                f"({', '.join(live)}) were running, limit {limit}"
            )
        entry = (call.occurrence_key, call.fencing_token)
        keyed = self._keyed(call, now, margin)
        running.append(entry)
        keyed.append(entry)
        try:
            return self._invoke(call)
        finally:
            running.remove(entry)
            keyed.remove(entry)

    def _keyed(self, call: TargetCall, now: datetime, margin: timedelta) -> list[tuple[str, int]]:
        """The calls in progress of the call's flow-control key (invariant 15); a call over its parallelism noted."""
        key = call.job.flow_key
        if key is None:
            return []
        running = self.keyed_in_flight.setdefault((call.job.tenant, key), [])
        owner = flow_owner(call.job.tenant, key)
        live = [
            k
            for k, token in running
            if (until := self._leased(k, token))
            and until - margin > now
            and self._slot_leased(self.sim.flow_slot_leases, owner, k) - margin > now
        ]
        state = self.sim.flow_controls.get(call.job.tenant, key)
        parallelism = state.limits.parallelism if state is not None else None
        if parallelism is not None and len(live) >= parallelism:
            self.over_parallelism.append(
                f"key {key} of {call.job.tenant}: {call.occurrence_key} started at {now.isoformat()} while "
                f"{len(live)} ({', '.join(live)}) were running, parallelism {parallelism}"
            )
        return running

    def _slot_leased(self, leases: dict[tuple[str, str], datetime], owner: str, key: str) -> datetime:
        """Until when the attempt holding `key` holds its slot of `owner` (a tenant, or a tenant's flow-control key),
        as its acquire or last extension granted it (`leases`). An attempt that stalled past that lease (a frozen
        worker) has lost the slot as it would have lost its claim, and no longer counts, even once its heartbeat
        renewed the ledger's lease (nobody claimed the occurrence meanwhile) and before it is told the slot is gone."""
        item = self.sim.ledger.items.get(key)
        if item is None or item.owner is None:
            return NO_LEASE
        return leases.get((owner, item.owner), NO_LEASE)

    def _leased(self, key: str, token: int) -> datetime | None:
        """Until when the attempt of `token` holds its occurrence (the ledger's lease, which its heartbeat renews);
        None once another attempt took it over or it ended."""
        item = self.sim.ledger.items.get(key)
        if item is None or item.epoch != token or item.state != RunState.RUNNING:
            return None
        return item.lease_until

    def _invoke(self, call: TargetCall) -> str | None:
        sim = self.sim
        actor = sim.current_actor()
        fate = self._fate()
        raw = RawCall(
            at=sim.clock.now(),
            actor=actor.name,
            key=call.occurrence_key,
            job_id=call.job.job_id,
            scheduled_for=call.scheduled_for,
            token=call.fencing_token,
            attempt=call.attempt,
            delivery=call.job.spec.delivery,
            job_read_at=actor.job_read_at,
            fate=fate,
        )
        self.calls.append(raw)
        sim.trace(actor.name, f"target {call.occurrence_key} token {call.fencing_token}: {fate}")
        if fate == "retryable":
            raise TargetFailure("retryable", "HTTP 503 (not applied)")
        if fate == "throttled":
            raise TargetFailure("retryable", "HTTP 429 (not applied)", retry_after=sim.rng.uniform(1, 30))
        if fate == "permanent":
            raise TargetFailure("permanent", "HTTP 400 (refused, not applied)")
        if fate == "timeout-before":
            raise TargetFailure("ambiguous", "timed out before the target acted")
        if fate == "pause":
            sim.freeze(actor, "in the target")
            if sim.rng.random() < 0.5:
                # A fencing-aware handler checks its lease before acting (LeaseLost aborts the attempt).
                call.heartbeat()
        if fate == "slow":
            sim.busy(actor, "in the target")
        verdict = self._apply(raw)
        if fate == "timeout-after":
            raise TargetFailure("ambiguous", "timed out after the target acted")
        if verdict == "stale":
            raise TargetFailure("permanent", "HTTP 409: stale fencing token")
        return verdict

    def _fate(self) -> Fate:
        sim = self.sim
        if not sim.faults_on:
            return "ok"
        p = sim.profile
        roll = sim.rng.random()
        for fate, rate in (
            ("retryable", p.target_retryable * 0.6),
            ("throttled", p.target_retryable * 0.4),
            ("permanent", p.target_permanent),
            ("timeout-before", p.target_ambiguous / 2),
            ("timeout-after", p.target_ambiguous / 2),
            ("pause", p.target_pause),
            ("slow", p.target_slow),
        ):
            if roll < rate:
                return fate  # type: ignore[return-value]
            roll -= rate
        return "ok"

    def _apply(self, raw: RawCall) -> Verdict:
        raw.reached = True
        state = self.keys.setdefault(raw.key, KeyState())
        if raw.token < state.max_token:
            raw.verdict = "stale"
            return "stale"
        state.max_token = raw.token
        if state.accepted:
            raw.verdict = "duplicate"
            return "duplicate"
        state.accepted = True
        raw.verdict = "accepted"
        self.effects.setdefault((raw.job_id, raw.scheduled_for), []).append(raw)
        return "accepted"
