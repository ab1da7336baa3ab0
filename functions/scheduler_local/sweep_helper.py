"""One fan-out sweep, run as its own process: what an asynchronous invoke of the sweeper function is on AWS
(`scheduler.adapters.sweep_launchers.ProcessSweepLauncher`). Its argument is the event."""

from __future__ import annotations

import json
import sys

from scheduler.handlers.local_invocation import LocalContext


def main() -> None:
    from scheduler.handlers.sweeper import lambda_handler

    lambda_handler(json.loads(sys.argv[1]), LocalContext("punctual-sweeper", 60))


if __name__ == "__main__":
    main()
