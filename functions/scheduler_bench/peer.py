"""The herd's peer, measured in the same run, on the same machine and against the same receiver as punctual:
APScheduler 3 with a SQLAlchemy job store on SQLite, in one process, and in two processes sharing the store (how
one would make it highly available). Installed by the benchmark into its own venv, pinned
(`.local/peers/apscheduler`).

The same jobs: one-shot jobs due at one instant (plus the same deterministic jitter punctual gives each job id),
each POSTing to the receiver with its occurrence key. The same measures: lateness = arrival - fire_at, early
starts, duplicates (calls per key), missing occurrences.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scheduler.core.model.keys import fire_at
from scheduler.core.model.timefmt import rfc3339
from scheduler_bench.burst import summary
from scheduler_bench.cpu_profile import CpuWindow
from scheduler_bench.environment import ROOT
from scheduler_bench.receiver import Receiver

#: Pinned: APScheduler 3 (the 3.x line; 4 is a rewrite) and its job store's SQLAlchemy.
PINS = ("APScheduler==3.11.3", "SQLAlchemy==2.1.9", "tzlocal==5.4.5")
SCRIPT = Path(__file__).with_name("peer_apscheduler.py")
#: The thread pool of each APScheduler process (its default is 10; punctual's pollers run 10 threads each).
THREADS = 20


def venv() -> Path:
    return ROOT / ".local" / "peers" / "apscheduler"


def ensure_installed(log: Callable[[str], None]) -> Path:
    """The peer's interpreter; creates its venv and installs the pins first when they are not there."""
    where = venv()
    marker = where / ".installed"
    wanted = " ".join(PINS)
    if marker.exists() and marker.read_text().strip() == wanted:
        return where / "bin" / "python"
    log(f"peer: installing {wanted} into {where}")
    where.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(where)], check=True)
    subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", *PINS],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    marker.write_text(wanted)
    return where / "bin" / "python"


def run_one(
    python: Path,
    jobs: int,
    jitter: int,
    processes: int,
    receiver: Receiver,
    work_dir: Path,
    log: Callable[[str], None],
) -> dict[str, Any]:
    """One herd of `jobs` jobs on APScheduler with `processes` scheduler processes on one SQLite store."""
    run_dir = work_dir / f"aps-{uuid.uuid4().hex[:8]}"
    run_dir.mkdir(parents=True)
    store = f"sqlite:///{run_dir / 'jobs.sqlite'}"
    # Room to add the jobs (one SQLite transaction each; calibrated on 100 into a scratch store, with 50 % to
    # spare) and start the schedulers before the due instant
    per_job = _calibrate(python, run_dir, receiver.url)
    lead = 15 + 1.5 * jobs * per_job  # + the schedulers' own start (Python, SQLAlchemy) on a busy machine
    due = (datetime.now(UTC) + timedelta(seconds=lead)).replace(microsecond=0) + timedelta(seconds=1)
    ids = [f"aps{uuid.uuid4().hex[:12]}" for _ in range(jobs)]
    expected = {job_id: fire_at(job_id, due, jitter) for job_id in ids}
    keys = {f"{job_id}:{rfc3339(due)}" for job_id in ids}
    spec = [
        {
            "id": job_id,
            "run_at": expected[job_id].timestamp(),
            "url": receiver.url,
            "key": f"{job_id}:{rfc3339(due)}",
            "scheduled_for": rfc3339(due),
        }
        for job_id in ids
    ]
    (run_dir / "jobs.json").write_text(json.dumps(spec))
    log(f"peer: APScheduler x{processes}: adding {jobs} jobs due at {rfc3339(due)} (jitter {jitter}s)")
    began = time.time()
    subprocess.run(
        [str(python), str(SCRIPT), "create", store, str(run_dir / "jobs.json")],
        check=True,
        timeout=1800,
        stdout=subprocess.DEVNULL,
    )
    created = time.time()
    seconds = max(5.0, due.timestamp() + jitter - time.time()) + 30 + jobs * 0.01
    cpu = CpuWindow().start()
    runners = []
    for i in range(processes):
        err = open(run_dir / f"scheduler-{i}.err", "wb")  # noqa: SIM115 - the child writes to it until it exits
        runners.append(
            subprocess.Popen(
                [str(python), str(SCRIPT), "run", store, f"{seconds:.1f}", str(THREADS)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
        )
    try:
        arrived = receiver.wait_for(keys, timeout=seconds)
        time.sleep(1.5)  # a late duplicate
    finally:
        for proc in runners:
            proc.terminate()
        for proc in runners:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    profile = cpu.stop()
    lateness = receiver.lateness(expected)
    errors = [_errors(run_dir / f"scheduler-{i}.err") for i in range(processes)]
    late = summary(lateness)
    p99 = late.get("p99", float("nan"))
    log(f"peer: APScheduler x{processes}: {len(lateness)}/{jobs} arrived; lateness p99 {p99:.2f}s")
    return {
        "system": f"APScheduler {PINS[0].split('==')[1]}, {processes} process{'es' if processes > 1 else ''}",
        "jobs": jobs,
        "jitter_seconds": jitter,
        "processes": processes,
        "due_at": rfc3339(due),
        "lead_seconds": lead,
        "setup_seconds": created - began,
        "setup_finished_before_due_seconds": due.timestamp() - created,
        "arrived": arrived,
        "lateness_seconds": late,
        "early_starts": sum(1 for x in lateness if x < 0),
        "receiver": receiver.summary(keys),
        "scheduler_errors": errors,
        "lateness_samples": sorted(round(x, 4) for x in lateness),
        "cpu_profile": profile,
    }


def _calibrate(python: Path, run_dir: Path, url: str, count: int = 100) -> float:
    """Seconds APScheduler takes here to write one job into its SQLite store."""
    far = datetime.now(UTC) + timedelta(days=365)
    jobs = [
        {"id": f"cal{i}", "run_at": far.timestamp(), "url": url, "key": f"cal{i}", "scheduled_for": ""}
        for i in range(count)
    ]
    (run_dir / "calibration.json").write_text(json.dumps(jobs))
    store = f"sqlite:///{run_dir / 'calibration.sqlite'}"
    done = subprocess.run(
        [str(python), str(SCRIPT), "create", store, str(run_dir / "calibration.json")],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = float(done.stdout.split()[-1])
    return seconds / count


def _errors(path: Path) -> dict[str, Any]:
    """What a scheduler process wrote to stderr: its tracebacks (e.g. a crashed scheduler thread) and a sample."""
    text = path.read_text(errors="replace") if path.exists() else ""
    lines = [line for line in text.splitlines() if line.strip()]
    return {
        "tracebacks": text.count("Traceback"),
        "last_lines": lines[-3:],
    }


def run(
    sizes: Sequence[int],
    jitters: Sequence[int],
    processes: Sequence[int],
    receiver: Receiver,
    work_dir: Path,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    python = ensure_installed(log)
    return [
        run_one(python, size, jitter, count, receiver, work_dir, log)
        for size in sizes
        for jitter in jitters
        for count in processes
    ]
