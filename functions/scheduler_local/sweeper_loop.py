"""The sweeper handler on a timer, as EventBridge would invoke it (every few seconds locally)."""

from __future__ import annotations

import os
import sys
import time
import traceback

from scheduler.handlers.local_invocation import LocalContext


def main() -> None:
    from scheduler.handlers.sweeper import lambda_handler

    interval = float(os.environ.get("SCHEDULER_SWEEP_INTERVAL_SECONDS", "2"))
    print(f"sweeper running every {interval}s", flush=True)
    while True:
        started = time.monotonic()
        try:
            lambda_handler(
                {"source": "aws.events", "detail-type": "Scheduled Event"}, LocalContext("punctual-sweeper", 60)
            )
        except Exception:
            traceback.print_exc(file=sys.stderr)  # a failed sweep is retried on the next tick, like a Lambda retry
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


if __name__ == "__main__":
    main()
