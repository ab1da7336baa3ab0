"""The executor's settings: the lease, the early wait, the heartbeat, the misfire grace (composed from Settings)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class ExecuteConfig:
    lease: timedelta
    #: A message this early (or less) waits in the worker instead of being hidden again (sub-second precision).
    early_wait_max: timedelta = timedelta(seconds=2)
    #: Added to hides that wait for someone else's lease, so the lease has surely ended when we look again.
    lease_margin_seconds: int = 2
    #: Heartbeat period as a fraction of the lease; None disables the background heartbeat (which needs the
    #: Executor's `heartbeats`).
    heartbeat_fraction: float | None = 1 / 3
    #: Whether a job that does not say (`events` left out of its spec) has its outcomes announced, when there is
    #: an outbox at all. The deployed default is off (Settings.completion_events_default).
    events_by_default: bool = True
    #: An occurrence started later than this after its fire time is a misfire: a `run_all` job catches it up.
    misfire_grace: timedelta = timedelta(seconds=60)
