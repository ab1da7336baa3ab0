"""From timers to ready-queue messages: the sweep over time buckets, dispatch, landing, packing and backfill."""
