"""The core's Clock port on the system's clock (the deployed functions, the local stack, real-time tests and
benchmarks; the simulator and the unit fixtures use clocks they move themselves)."""

from __future__ import annotations

from datetime import UTC, datetime


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)
