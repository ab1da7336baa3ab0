"""The forecast drives the local worker pool: the local sweeper's pre-scaler writes each lane's
MinimumPollers into `<state dir>/prescale.json` (`scheduler.adapters.file_pollers`), and the supervisor's pool asks
`forecast_workers` how many worker pollers that stands for, and keeps at least that many running ahead of a peak.

To turn it on for a local stack, give its processes `SCHEDULER_PRESCALE_ENABLED=true` and
`SCHEDULER_PRESCALE_STATE_FILE=<state dir>/prescale.json` (and, to size for this machine,
`SCHEDULER_PRESCALE_SECONDS_PER_OCCURRENCE`), and let the pool's wanted size be at least
`minimum + forecast_workers(state_dir, ...)`."""

from __future__ import annotations

import math
from pathlib import Path

from scheduler.adapters.file_pollers import BASELINE, read_pollers

FILE_NAME = "prescale.json"
#: Concurrent invocations one provisioned poller drives on AWS (the unit the pre-scaler sizes in).
INVOCATIONS_PER_POLLER = 10


def forecast_workers(state_dir: Path, invocations_per_worker: int, ceiling: int | None = None) -> int:
    """Worker pollers to add for the forecast: the lanes' pollers above the floor, as concurrent invocations, over
    what one local worker poller runs at once (its batch's records on threads). 0 with no peak ahead."""
    pollers = read_pollers(state_dir / FILE_NAME)
    invocations = sum(max(0, n - BASELINE) for n in pollers.values()) * INVOCATIONS_PER_POLLER
    wanted = math.ceil(invocations / max(1, invocations_per_worker))
    return wanted if ceiling is None else min(wanted, ceiling)
