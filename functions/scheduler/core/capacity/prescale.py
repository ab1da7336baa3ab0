"""Pre-scaling the workers before a known peak: how many provisioned event pollers a forecast minute
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

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.core.capacity.forecast import Forecast
from scheduler.core.model.timefmt import ONE_MINUTE, rfc3339
from scheduler.core.ports import Metrics, PollerControl

log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class PrescaleConfig:
    """When and how far to raise each lane's provisioned pollers ahead of a forecast peak."""

    capacity: WorkerCapacity
    #: Raise this long before the peak minute begins: what the change needs to take effect (the mapping's update
    #: and its pollers coming up; an assumption, see docs/capacity.md) plus a sweep period.
    lead: timedelta = timedelta(minutes=5)


@dataclass(frozen=True)
class PollerChange:
    """One lane's decision at one sweep: what its MinimumPollers is and should be, and why."""

    lane: str
    current: int | None
    target: int
    reason: str
    peak_minute: datetime | None = None
    applied: bool = False

    @property
    def changes(self) -> bool:
        return self.current != self.target


def target_pollers(
    lane: str, forecast: Forecast, now: datetime, config: PrescaleConfig
) -> tuple[int, str, datetime | None]:
    """The lane's MinimumPollers now: the most any forecast minute needs whose raise window - from `lead` before it
    begins to its end - holds `now`; the baseline when none does (so pollers come down after the peak). Pure."""
    wanted, why, peak = config.capacity.baseline_pollers, "no peak ahead: baseline", None
    for minute in forecast.minutes:
        due, peak_second = minute.by_lane.get(lane, (0, 0))
        if not due or not minute.minute - config.lead <= now < minute.minute + ONE_MINUTE:
            continue
        needed = pollers_for(peak_second, due, config.capacity)
        if needed > wanted:
            wanted, peak = needed, minute.minute
            why = f"{due:,} due in the minute of {rfc3339(minute.minute)} ({peak_second:,} in its busiest second)"
    if wanted == config.capacity.ceiling_pollers and peak is not None:
        why += f"; capped at the ceiling of {config.capacity.ceiling_pollers}"
    return wanted, why, peak


class Prescaler:
    """Sets each worker mapping's MinimumPollers to what the forecast asks for. Idempotent and safe with several
    sweepers: each computes the target from the forecast and the time alone and writes only when the mapping differs
    from it, so a repeated or concurrent run writes the same value or nothing; a write another update is holding
    up is left to the next sweep. Every change is logged and counted."""

    def __init__(self, control: PollerControl, config: PrescaleConfig, metrics: Metrics) -> None:
        self.control = control
        self.config = config
        self.metrics = metrics

    def run(self, forecast: Forecast, now: datetime) -> list[PollerChange]:
        decisions = []
        for lane in self.control.lanes():
            target, reason, peak = target_pollers(lane, forecast, now, self.config)
            current = self.control.minimum_pollers(lane)
            change = PollerChange(lane, current, target, reason, peak)
            if change.changes:
                applied = self.control.set_minimum_pollers(lane, target)
                change = PollerChange(lane, current, target, reason, peak, applied)
                direction = "raised" if current is None or target > current else "lowered"
                log.info(
                    f"provisioned pollers {direction}" if applied else "provisioned pollers change deferred",
                    extra={"lane": lane, "from": current, "to": target, "reason": reason, "applied": applied},
                )
                self.metrics.count("PrescalePollerChanges" if applied else "PrescaleChangesDeferred")
            self.metrics.count("PrescaleMinimumPollers", target)
            decisions.append(change)
        return decisions
