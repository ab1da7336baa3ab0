"""The sweeper handler on a timer, as EventBridge would invoke it (every few seconds locally).

With `SCHEDULER_LOCAL_SWEEPERS=K` the supervisor runs K of these processes, each with its slot
(`SCHEDULER_LOCAL_SWEEPER_SLOT`, 0..K-1). Each runs the real handler, one invocation after another, and they share
the buckets exactly as concurrent sweeper invocations do: through the bucket claims (a bucket another one holds is
left to it, one whose lease ran out is taken over), and the watermark moves only past minutes whose buckets are all
done, whoever did them.

Their ticks are staggered: slot i sweeps at i * interval / K into each period of the wall clock, so a process that is
restarted keeps its place. Started together (in lockstep), K sweepers would read the watermark and the late lane
at the same instant: each would send the same late-lane timers (duplicates the ledger absorbs, but sent and paid
K times), race for the same first buckets (conditional writes that fail), and wake on the same cores at once;
and a minute that falls due would still wait up to a whole interval for the next sweep. Staggered, a sweep starts
every interval / K: a due bucket is picked up that much sooner, and a sweeper that wakes while another is in the
middle of a herd takes the buckets it has not claimed yet (work stealing) instead of contending for the same ones.
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback

from scheduler.handlers.local_invocation import LocalContext


def next_tick(now: float, interval: float, slot: int, slots: int) -> float:
    """The first instant at or after `now` (wall-clock seconds) in this sweeper's slot: `slot * interval / slots`
    into a period of `interval`. A sweep that overran its period skips to the next tick of its slot."""
    phase = slot * interval / slots
    return phase + math.ceil((now - phase) / interval) * interval


def main() -> None:
    from scheduler.handlers.sweeper import lambda_handler

    interval = float(os.environ.get("SCHEDULER_SWEEP_INTERVAL_SECONDS", "2"))
    slots = max(1, int(os.environ.get("SCHEDULER_LOCAL_SWEEPERS", "1")))
    slot = min(slots - 1, max(0, int(os.environ.get("SCHEDULER_LOCAL_SWEEPER_SLOT", "0"))))
    offset = slot * interval / slots
    print(f"sweeper {slot + 1} of {slots} running every {interval}s, {offset:.2f}s into each period", flush=True)
    while True:
        time.sleep(max(0.0, next_tick(time.time(), interval, slot, slots) - time.time()))
        try:
            lambda_handler(
                {"source": "aws.events", "detail-type": "Scheduled Event"}, LocalContext("punctual-sweeper", 60)
            )
        except Exception:
            traceback.print_exc(file=sys.stderr)  # a failed sweep is retried on the next tick, like a Lambda retry


if __name__ == "__main__":
    main()
