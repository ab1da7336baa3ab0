"""Pre-scaling the workers before a known peak (issue 18): how many provisioned event pollers a forecast minute
needs, and what to set the worker event source mappings to now. Pure: the forecast comes in, a decision goes out;
the AWS call is behind the `PollerControl` port.

The sizing rule, in the units AWS documents (docs/capacity.md lists the sources):

- a worker invocation runs its batch's occurrences one after another, `seconds_per_occurrence` each (measured by
  `scripts/bench`), so one busy invocation starts `1 / seconds_per_occurrence` occurrences a second;
- to start `peak_second` occurrences due in the same second within `target_start_seconds`, they must all be
  handed out within `target - slack` seconds (the slack covers a cold start, the poll and the wait inside a batch);
- a minute's occurrences must also keep up on average (with 20 % headroom), whatever the peak second;
- a provisioned event poller drives up to `invocations_per_poller` (10) concurrent invocations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerCapacity:
    """What one occurrence costs a worker, and the start-lateness goal the pollers are sized for."""

    seconds_per_occurrence: float
    target_start_seconds: float = 5.0
    slack_seconds: float = 2.0
    invocations_per_poller: int = 10
    #: The provisioned mode floor (AWS: MinimumPollers >= 2 for SQS) and the configured ceiling (AWS: <= 200).
    baseline_pollers: int = 2
    ceiling_pollers: int = 200
    #: Sustained headroom over a minute's average rate.
    sustained_headroom: float = 1.2

    def __post_init__(self) -> None:
        if self.seconds_per_occurrence <= 0:
            raise ValueError("seconds_per_occurrence must be positive")
        if not 2 <= self.baseline_pollers <= self.ceiling_pollers <= 200:
            raise ValueError("need 2 <= baseline_pollers <= ceiling_pollers <= 200 (AWS MinimumPollers range)")


def concurrency_for(peak_second: int, per_minute: int, capacity: WorkerCapacity) -> int:
    """Concurrent worker invocations that start `peak_second` occurrences due in one second within the target,
    and keep up with `per_minute` over the minute."""
    if peak_second <= 0 and per_minute <= 0:
        return 0
    drain_seconds = max(capacity.target_start_seconds - capacity.slack_seconds, 1.0)
    rate = max(peak_second / drain_seconds, per_minute / 60 * capacity.sustained_headroom)
    return math.ceil(rate * capacity.seconds_per_occurrence)


def pollers_for(peak_second: int, per_minute: int, capacity: WorkerCapacity) -> int:
    """Provisioned pollers (MinimumPollers) for that load, within [baseline, ceiling]."""
    wanted = math.ceil(concurrency_for(peak_second, per_minute, capacity) / capacity.invocations_per_poller)
    return max(capacity.baseline_pollers, min(capacity.ceiling_pollers, wanted))
