"""Benchmarks of punctual on real components (`python -m scheduler_bench`, or `scripts/bench`).

What is measured, and how (details in docs/benchmarks.md):

1. AWS request units per fired occurrence, counted exactly by hooking the boto3 clients of the real services
   (`metering`), priced per million fires beside EventBridge Scheduler (`cost`, `prices`).
2. Sweep cost against the size of the pending set, beside a Scan-based scheduler (`sweep_scaling`).
3. A burst of jobs due in the same second through the local stack's processes (`burst`).
4. The batching baseline: one SendMessage per occurrence against SendMessageBatch (`sweep_scaling`).

Results go to `bench/results.json`, `bench/results.md` and `bench/lateness.png`.
"""
