"""Running an occurrence (docs/design.md §3.4): the Executor (executor.py) and its steps, each in its own module; the
heartbeat that keeps a lease, the bounded recovery of a dead worker's batch, retries and completion events."""
