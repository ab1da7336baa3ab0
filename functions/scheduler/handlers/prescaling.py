"""After a sweep: forecast the next minutes (the metric ForecastDueOccurrences), record it for the next ticks'
fan-out (scheduler.core.capacity.fan_out) and, when pre-scaling is on, set the worker mappings' provisioned pollers for
the peaks ahead (scheduler.core.capacity.prescale). At most once a minute
per execution environment (the local stack sweeps every two seconds; the forecast's reads are per minute). Its failure
never fails the sweep: the sweep's work is done, and the next minute decides again."""

from __future__ import annotations

import logging
import math
from datetime import datetime
from typing import Any

from scheduler.core.model.timefmt import minute_of, rfc3339
from scheduler.handlers.wiring import AwsContainer

log = logging.getLogger(__name__)
#: The minute of this environment's last forecast.
_last_minute: list[datetime] = []


def after_sweep(container: AwsContainer) -> dict[str, Any]:
    """Returns what it saw and did, for the sweep's log line."""
    settings = container.core.settings
    fan_out = settings.fan_out_max_sweeps > 1
    if settings.forecast_minutes <= 0 and not settings.prescale_enabled and not fan_out:
        return {}
    minute = minute_of(container.core.clock.now())
    if _last_minute and _last_minute[0] == minute:
        return {}
    _last_minute[:] = [minute]
    try:
        # The pre-scaler must see at least `lead` ahead (and the peak minute itself).
        minutes = max(settings.forecast_minutes, math.ceil(settings.prescale_lead_seconds / 60) + 1)
        # The fan-out sizes a tick by what is due up to the end of its look-ahead.
        if fan_out:
            minutes = max(minutes, math.ceil(settings.lookahead_seconds / 60) + 2)
        result = container.core.forecast_service().forecast(min(minutes, 180))
        if fan_out:
            container.fan_out().record_forecast(result)
        peak = result.peak
        container.core.metrics.count("ForecastDueOccurrences", peak.due if peak else 0)
        summary: dict[str, Any] = {
            "forecast_minutes": minutes,
            "forecast_peak_due": peak.due if peak else 0,
            "forecast_peak_minute": rfc3339(peak.minute) if peak and peak.due else None,
            "forecast_timers_read": result.timers_read,
        }
        if settings.prescale_enabled and (settings.prescale_mappings or settings.prescale_state_file):
            changes = container.prescaler().run(result, container.core.clock.now())
            summary["prescale"] = [
                {"lane": c.lane, "from": c.current, "to": c.target, "applied": c.applied, "reason": c.reason}
                for c in changes
            ]
        return summary
    except Exception as exc:
        log.exception("forecast or pre-scaling failed", extra={"error": str(exc)})
        container.core.metrics.count("PrescaleFailures")
        return {"prescale_error": str(exc)}
