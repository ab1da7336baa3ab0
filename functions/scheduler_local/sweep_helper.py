"""One fan-out sweep, run as its own process: what an asynchronous invoke of the sweeper function is on AWS
(`scheduler.adapters.sweep_launchers.ProcessSweepLauncher`). Its argument is the event."""

from __future__ import annotations

import json
import sys
from typing import Any

from scheduler.handlers.local_invocation import LocalContext


def main() -> dict[str, Any]:
    """Runs the sweep; returns its summary (the handler's answer)."""
    from scheduler.handlers.sweeper import lambda_handler

    summary: dict[str, Any] = lambda_handler(json.loads(sys.argv[1]), LocalContext("punctual-sweeper", 60))
    return summary


if __name__ == "__main__":
    main()
