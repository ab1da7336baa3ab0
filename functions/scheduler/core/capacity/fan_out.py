"""The fan-out (docs/design.md §3.3): how many sweeps run at once in a tick, decided from what is known.

The scheduled tick is one sweep. When the work due inside the look-ahead is more than one sweep dispatches in a tick
(its dispatch budget), the tick starts more sweeps beside itself (`SweepLauncher`: on AWS, asynchronous invokes of
the sweeper function). Every sweep claims the buckets the others have not (work stealing through the bucket claims),
so nothing in the protocol changes: claims keep the sweeps disjoint, a stuck or killed sweep loses its buckets at its
lease's end, and the watermark moves only past minutes whose buckets are all done, whichever sweep finishes last.

Two signals size it:

- **the forecast** (known herds, before they fall due): the sweeper's forecast of the next minutes
  (`scheduler.core.capacity.forecast`) is recorded once a minute, and a tick adds up what it says is due from the
  watermark to the look-ahead's end: one sweep per dispatch budget of it;
- **the backlog** (herds nobody forecast: jobs created a moment before, an outage's missed minutes): a sweep that
  ran out of budget or time with buckets left records that twice its tick's sweeps were needed, so a backlog that
  outlasts a tick doubles the fan-out every minute until the sweeps keep up.

Both are bounded by `max_sweeps`, and each goes stale after `freshness`, so a fan-out winds down by itself. The
record is advisory: lost or wrong, it costs time or idle invocations, never an occurrence.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from scheduler.core.capacity.forecast import Forecast
from scheduler.core.model.timefmt import minute_of
from scheduler.core.ports import Clock, FanOutRecord, FanOutStore, HelperSweep, Metrics, SweepLauncher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FanOutConfig:
    #: Sweeps a tick runs at most, itself included (1: no fan-out).
    max_sweeps: int
    #: What one sweep dispatches at most in a tick (the dispatch budget).
    fires_per_sweep: int
    lookahead: timedelta
    #: A forecast or a backlog older than this is not acted on.
    freshness: timedelta = timedelta(minutes=3)


@dataclass(frozen=True)
class FanOutDecision:
    sweeps: int
    #: Occurrences the forecast says are due from the watermark to the look-ahead's end.
    due_in_window: int
    backlog_sweeps: int
    #: "forecast", "backlog", "one sweep" or "fanned out this minute already".
    reason: str


def decide(record: FanOutRecord, watermark: datetime | None, now: datetime, config: FanOutConfig) -> FanOutDecision:
    """The sweeps this tick runs: enough for the forecast's work in the window and for a fresh backlog, at most
    `max_sweeps`, at least one."""
    window_end = minute_of(now + config.lookahead)
    first = watermark if watermark is not None else minute_of(now)
    due = 0
    if record.forecast_at is not None and now - record.forecast_at <= config.freshness:
        due = sum(count for minute, count in record.due.items() if first <= minute <= window_end)
    by_forecast = math.ceil(due / max(1, config.fires_per_sweep))
    backlog = 0
    if record.backlog_at is not None and now - record.backlog_at <= config.freshness:
        backlog = record.backlog_sweeps
    wanted = max(1, by_forecast, backlog)
    reason = "one sweep" if wanted == 1 else ("forecast" if by_forecast >= backlog else "backlog")
    return FanOutDecision(min(config.max_sweeps, wanted), due, backlog, reason)


def backlog_sweeps(sweeps_in_tick: int, config: FanOutConfig) -> int:
    """What a sweep that ran out with buckets left asks the next tick for: twice its tick's sweeps."""
    return min(config.max_sweeps, max(2, 2 * sweeps_in_tick))


@dataclass(eq=False)
class FanOut:
    store: FanOutStore
    launcher: SweepLauncher
    clock: Clock
    metrics: Metrics
    config: FanOutConfig

    def start(self, tick: str, watermark: datetime | None) -> FanOutDecision:
        """Decide this tick's sweeps and start all but this one. A refused start is counted (`SweepFanOutFailures`)
        and leaves its share to the sweeps that did start and to the next tick."""
        if self.config.max_sweeps <= 1:
            return FanOutDecision(1, 0, 0, "one sweep")
        now = self.clock.now()
        try:
            decision = decide(self.store.read(), watermark, now, self.config)
            claimed = decision.sweeps <= 1 or self.store.claim_launch(minute_of(now))
        except Exception as exc:
            # The fan-out never keeps a tick from sweeping: without its record, this tick sweeps alone.
            log.warning("the fan-out record could not be read", extra={"tick": tick, "error": str(exc)})
            self.metrics.count("SweepFanOutFailures")
            return FanOutDecision(1, 0, 0, "fan-out record unavailable")
        if not claimed:
            # Another tick of this minute fanned out already (a retried tick; the local stack ticks every few
            # seconds): its sweeps are at work, and this one sweeps beside them.
            return replace(decision, sweeps=1, reason="fanned out this minute already")
        self.metrics.count("SweepFanOut", decision.sweeps)
        failed = 0
        for index in range(1, decision.sweeps):
            try:
                self.launcher.launch(HelperSweep(tick, index, decision.sweeps))
            except Exception as exc:
                failed += 1
                log.warning("a fan-out sweep was not started", extra={"tick": tick, "index": index, "error": str(exc)})
        if failed:
            self.metrics.count("SweepFanOutFailures", failed)
        return decision

    def finish(self, ran_out: bool, sweeps_in_tick: int) -> int:
        """After a sweep: when it ran out of budget or time with buckets left, ask the next tick for more sweeps.
        Returns what it asked for (0: nothing)."""
        if self.config.max_sweeps <= 1 or not ran_out:
            return 0
        wanted = backlog_sweeps(sweeps_in_tick, self.config)
        try:
            self.store.record_backlog(wanted, self.clock.now())
        except Exception as exc:  # the sweep's work is done; the next sweep that runs out asks again
            log.warning("the fan-out's backlog could not be recorded", extra={"error": str(exc)})
            self.metrics.count("SweepFanOutFailures")
            return 0
        return wanted

    def record_forecast(self, forecast: Forecast) -> None:
        """Keep the forecast's due occurrences per minute for the next ticks (once a minute, after the sweep)."""
        if self.config.max_sweeps <= 1:
            return
        self.store.record_forecast({m.minute: m.due for m in forecast.minutes if m.due}, self.clock.now())
