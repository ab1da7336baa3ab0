"""The faults the simulator injects, and the gate in front of every port call that injects them.

Every actor (API, sweeper, worker) talks to the shared in-memory stores through its own set of proxies
(`scheduler_sim.faulty_ports`). Each port call passes a `Gate` twice: before delegating (crash, throttling
error, or a pause while another actor runs a step: the conditional-write races) and after it (crash: the write
happened, the caller never learns). A `Crash` is a `BaseException`, as a killed process is: the core's
`except Exception` blocks, right for real errors, must not be able to swallow it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Protocol

from scheduler.core.model.job import Job
from scheduler.core.ports import (
    AdvanceResult,
    BucketClaim,
    BucketId,
    Dispatch,
    Execution,
    Timer,
)


class Crash(BaseException):
    """The actor's process dies at this instruction; whatever it held is abandoned."""


class Throttled(Exception):
    """A transient error from a port, like DynamoDB's ProvisionedThroughputExceeded or an SQS 5xx."""


@dataclass(frozen=True)
class FaultProfile:
    """How often each fault strikes in one run. Rates are per port call, per message or per target call."""

    crash: float = 0.0  #: per port call, half before delegating and half after
    throttle: float = 0.0  #: per port call: a transient error before delegating (a partial send for the queue)
    preempt: float = 0.0  #: per port call: the actor pauses while another actor runs a whole step
    duplicate: float = 0.0  #: per sent message: SQS delivers it twice
    late_copy: float = 0.0  #: per sent or acknowledged message: a copy arrives minutes later
    target_retryable: float = 0.0  #: the target answers 503/429 (not applied)
    target_permanent: float = 0.0  #: the target answers 400 (not applied)
    target_ambiguous: float = 0.0  #: the call times out, the effect applied or not (half each)
    target_pause: float = 0.0  #: the worker freezes inside the target past its lease; others take over
    outage: float = 0.0  #: probability that the run contains an outage (the clock jumps up to an hour)
    skew_seconds: float = 0.0  #: each actor's clock is off by up to this much, and jumps within it
    #: The target takes a while (well inside the lease) and other workers run meanwhile: one tenant's calls overlap.
    target_slow: float = 0.0

    @classmethod
    def calm(cls) -> FaultProfile:
        """No faults at all (the simulator still interleaves actors and reorders messages)."""
        return cls()

    @classmethod
    def draw(cls, rng: random.Random) -> FaultProfile:
        """One seed's mix: sometimes calm, usually a few faults at modest rates, sometimes a storm."""
        mood = rng.random()
        if mood < 0.08:
            return cls()
        scale = 1.0 if mood < 0.85 else 2.5

        def pick(high: float) -> float:
            return rng.choice((0.0, high * 0.3, high)) * scale

        return cls(
            crash=pick(0.01),
            throttle=pick(0.01),
            preempt=pick(0.03),
            duplicate=pick(0.1),
            late_copy=pick(0.04),
            target_retryable=pick(0.1),
            target_permanent=pick(0.02),
            target_ambiguous=pick(0.06),
            target_pause=pick(0.08),
            outage=rng.choice((0.0, 0.0, 0.35)),
            skew_seconds=rng.choice((0.0, 2.0, 5.0)),
            target_slow=pick(0.15),
        )

    def describe(self) -> str:
        parts = [f"{f.name}={getattr(self, f.name):g}" for f in fields(self) if getattr(self, f.name)]
        return ", ".join(parts) if parts else "calm"


@dataclass(frozen=True)
class Exposure:
    """How much of the fault model and the workload a run uses. `Exposure()` is all of it. `KNOWN_BUGS_AVOIDED`
    stays out of the windows where the core bugs this simulator found strike (see the package README), so that
    everything else remains a regression guard while they are open."""

    #: Crashes, throttling and preemption between a chain advance (`JobStore.advance`) and the send of what it
    #: planned (bugs A and D: a re-run after a crash there is refused; a stale next-timer put lands late).
    chain_window_faults: bool = True
    #: The dispatcher's seal margin (bug C: the default 30 s does not cover the rest of a sealed bucket minute).
    seal_margin: timedelta = timedelta(seconds=30)


KNOWN_BUGS_AVOIDED = Exposure(chain_window_faults=False, seal_margin=timedelta(seconds=90))


class GateHost(Protocol):
    """What a gate needs from the simulation (kept abstract to avoid an import cycle)."""

    rng: random.Random
    profile: FaultProfile
    exposure: Exposure
    faults_on: bool
    trace_calls: bool

    def trace(self, actor: str, text: str) -> None: ...

    def preempt(self, actor: str) -> None: ...

    def job_read(self, actor: str) -> None: ...

    def advanced(
        self, timer: Timer, dispatched_for: datetime, skipped: int, result: AdvanceResult, now: datetime
    ) -> None: ...

    def ledger_claimed(self, key: str, epoch: int) -> None: ...

    def ledger_write(self, op: str, key: str, epoch: int, owner: str | None) -> None: ...

    def queue_send(self, actor: str, dispatches: Sequence[Dispatch], now: datetime) -> None: ...

    def timer_stored(self, timer: Timer) -> None: ...

    def watermark_moved(self) -> None: ...


class Gate:
    """The fault point in front of every port call of one actor."""

    def __init__(self, host: GateHost, actor: str) -> None:
        self.host = host
        self.actor = actor
        #: Between a chain advance and its send; faults there are held back unless the exposure allows them.
        self.in_chain_window = False

    def _quiet(self) -> bool:
        host = self.host
        return not host.faults_on or (self.in_chain_window and not host.exposure.chain_window_faults)

    def before(self, op: str, *detail: object) -> None:
        host = self.host
        if host.trace_calls:
            host.trace(self.actor, f"{op}({', '.join(brief_value(d) for d in detail)})" if detail else op)
        if self._quiet():
            return
        profile = host.profile
        roll = host.rng.random()
        if roll < profile.crash / 2:
            raise Crash(f"before {op}")
        roll -= profile.crash / 2
        if roll < profile.throttle:
            raise Throttled(f"{op} throttled")
        roll -= profile.throttle
        if roll < profile.preempt:
            host.preempt(self.actor)

    @contextmanager
    def call(self, op: str, *detail: object) -> Iterator[None]:
        """The port call made in the block, passing the gate before it and after it; an error the block raises
        (the call's own, or a fault the block injects) passes on without the after."""
        self.before(op, *detail)
        yield
        self.after(op)

    def result(self, op: str, value: object) -> None:
        """Trace what a call returned (only when tracing port calls)."""
        if self.host.trace_calls:
            self.host.trace(self.actor, f"  -> {brief_value(value)}")

    def after(self, op: str) -> None:
        host = self.host
        if not self._quiet() and host.rng.random() < host.profile.crash / 2:
            raise Crash(f"after {op}")

    def throttled_part(self, op: str, total: int) -> int | None:
        """For batch writes: how many items go through before a throttling error (None: no error)."""
        host = self.host
        if not self._quiet() and total and host.rng.random() < host.profile.throttle:
            return host.rng.randrange(total)
        return None


def brief_value(value: object) -> str:
    """Short forms of the values port calls carry, for traces."""
    if isinstance(value, Timer):
        return f"timer {value.key} v{value.version} fire {value.fire_at:%H:%M:%S.%f}"[:-3] + f" {value.kind}"
    if isinstance(value, Dispatch):
        return f"{value.key} v{value.version}"
    if isinstance(value, BucketId):
        return f"bucket {value.minute:%H:%M}/{value.shard}"
    if isinstance(value, BucketClaim):
        return f"claim {brief_value(value.bucket)} epoch {value.epoch} cursor {value.cursor}"
    if isinstance(value, Job):
        last = value.last_dispatched_for
        return (
            f"job {value.job_id} v{value.version} {value.state.value} next {value.next_run_at} "
            f"last {last and f'{last:%H:%M:%S}'}"
        )
    if isinstance(value, Execution):
        return f"{value.key} {value.state.value} epoch {value.epoch} attempts {value.attempts}"
    if isinstance(value, datetime):
        return f"{value:%H:%M:%S.%f}"[:-3]
    if isinstance(value, list | tuple):
        return "[" + ", ".join(brief_value(v) for v in value) + "]"
    return str(value)
