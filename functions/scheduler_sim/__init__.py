"""Deterministic simulation of the scheduler's real protocol code under faults (STYLE.md test layer 6).

One integer seed decides everything: the workload (jobs created through the real `JobService`, with edits,
pauses, cancellations and triggers racing dispatch, and a few invalid requests), the actors (1-3 sweepers
and 1-3 workers running the real `Sweeper` and `Executor` on the in-memory adapters), their interleaving as
a fake clock advances, and the faults. After each run the checker judges the invariants of docs/design.md
section 6; a failure prints the seed, the violation, the last events and a one-line replay command.

Fault model (what the seed may choose, see `faults.FaultProfile`):
- a crash before or after any port call of any actor (job store, timer store, ledger, ready queue, the
  tenants' execution slots (each seed limits tenants to 1-3 concurrent executions), and the
  worker's receive/delete/change-visibility): the actor's work is abandoned, its message comes back after
  the visibility timeout, its bucket lease runs out;
- throttling-like transient errors at any port call (a partial batch for queue sends);
- preemption at any port call: another actor runs a whole step in between (conditional-write races, and
  cancellations and edits landing between a sweeper's read and its write);
- messages delivered twice, redelivered minutes later (also after being acknowledged), in random order;
- a worker frozen inside the target past its lease, or past its message's visibility timeout, while other
  workers take over; a fencing-aware target may then heartbeat (and get LeaseLost);
- a slow target (1-30 s, up to two leases, which its background heartbeat renews meanwhile) while other workers
  take messages: one tenant's calls overlap;
- target failures: 503/429 (not applied), 400, and timeouts with the effect applied or not;
- an outage (the clock jumps 10-60 minutes), per-actor clock skew of up to 5 s with jumps within it.

Backfills of recurring jobs run in waves through the same faults (the checker wants each one completed, every
occurrence of its range terminal). Completion events are on: the outbox's publish and clear go through the same
faults, and the checker wants every terminal outcome of a job with events on announced once the run is quiet.

The lease and the heartbeat are the deployed ones (`SimConfig`); the heartbeat beats on the simulated clock while a
slow target runs (`scheduler_sim.heartbeats`), never while an actor is frozen. Not modelled: DynamoDB's eventual
consistency (the protocol only relies on strongly consistent reads), the DLQ redrive, concurrency finer
than one port call, and the API's HTTP layer (the handler's validation is called directly).
"""

from scheduler_sim.faults import Crash, FaultProfile, Throttled
from scheduler_sim.invariants import INVARIANTS, Violation
from scheduler_sim.report import format_failure, replay_command, run_seed, run_seeds
from scheduler_sim.simulation import SimConfig, SimResult, Simulation
from scheduler_sim.variants import VARIANTS, Variant

__all__ = [
    "INVARIANTS",
    "VARIANTS",
    "Crash",
    "FaultProfile",
    "SimConfig",
    "SimResult",
    "Simulation",
    "Throttled",
    "Variant",
    "Violation",
    "format_failure",
    "replay_command",
    "run_seed",
    "run_seeds",
]
