"""The peer in the herd benchmark: APScheduler 3 with a SQLAlchemy job store on SQLite, in one process or in
several sharing the store. Run with the peer's own interpreter (`scheduler_bench.peer` installs it); this file
imports nothing of the project.

    python peer_apscheduler.py create STORE JOBS_JSON       # add the jobs (a paused scheduler), then exit
    python peer_apscheduler.py run STORE SECONDS THREADS    # run a scheduler on the store for SECONDS

JOBS_JSON is a list of {"id", "run_at" (epoch seconds), "url", "key"}; each job POSTs to `url` with the
occurrence's key as `Idempotency-Key` (what the receiver counts duplicates by). misfire_grace_time is None, so a
job that is late runs however late (APScheduler's default of 1 s would drop it, and count as missing here).
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from datetime import UTC, datetime
from typing import Any


def fire(url: str, key: str, job_id: str, scheduled_for: str) -> None:
    request = urllib.request.Request(
        url,
        data=b"{}",
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Idempotency-Key": key,
            "X-Scheduler-Job-Id": job_id,
            "X-Scheduler-Scheduled-For": scheduled_for,
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()


def scheduler(store: str, threads: int) -> Any:
    from apscheduler.executors.pool import ThreadPoolExecutor  # type: ignore[import-not-found]
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore  # type: ignore[import-not-found]
    from apscheduler.schedulers.background import BackgroundScheduler  # type: ignore[import-not-found]

    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=store)},
        executors={"default": ThreadPoolExecutor(threads)},
        job_defaults={"misfire_grace_time": None, "coalesce": False, "max_instances": 1},
        timezone=UTC,
    )


def create(store: str, jobs_file: str) -> None:
    """Add the jobs to a scheduler that is not started (kept in memory), then start it paused: that writes them
    to the store without running any; prints how long the writing took (the benchmark calibrates with it)."""
    with open(jobs_file) as handle:
        jobs = json.load(handle)
    sched = scheduler(store, 1)
    began = time.perf_counter()
    for job in jobs:
        sched.add_job(
            fire,
            "date",
            run_date=datetime.fromtimestamp(job["run_at"], tz=UTC),
            args=[job["url"], job["key"], job["id"], job["scheduled_for"]],
            id=job["id"],
            replace_existing=True,
        )
    sched.start(paused=True)
    sched.shutdown(wait=False)
    print(f"added {len(jobs)} {time.perf_counter() - began:.3f}", flush=True)


def run(store: str, seconds: float, threads: int) -> None:
    sched = scheduler(store, threads)
    sched.start()
    time.sleep(seconds)
    sched.shutdown(wait=True)


def main() -> None:
    command, store = sys.argv[1], sys.argv[2]
    if command == "create":
        create(store, sys.argv[3])
    elif command == "run":
        run(store, float(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
