"""Several sweepers on the real local stack (`SCHEDULER_LOCAL_SWEEPERS=3`), SIGKILLed with the workers while a herd and
recurring jobs go through the time buckets: the three share the buckets through their claims, as fanned-out sweeper
invocations do, and the supervisor restarts each one killed.

The jobs are stored before the stack starts (through the real JobService, on the stack's own tables), so that every
occurrence is dispatched by the bucket sweep rather than at its create (a job due within the look-ahead of a running
sweeper is sent by the api itself): the herd's buckets are swept while the sweepers are being killed. Asserted:
every occurrence takes effect once (a receiver that counts each occurrence key), none is missing, none starts
before its time, each killed sweeper is restarted and more than one of them finishes buckets; and, read from the
jobs table every quarter second while it runs, the watermark never passes a minute with a bucket that is not done.

The stack runs with the values `infra/` deploys (occurrence lease, look-ahead, the ready queue's visibility
timeout, the buckets a sweep takes at once), except two. The bucket lease is 20 s instead of 120 s: it is how long a
sweeper killed in the middle of a bucket keeps it from the others; at 120 s one such kill would keep this test
waiting past two minutes, and the protocol is the same at any lease. And the herd's minute has 16 shards instead of
8 (a deployment's choice for a hot minute): more than one sweep takes at once (8), so the second sweeper finds
buckets the first has not claimed.
"""

from __future__ import annotations

import json
import os
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from harness import LocalStack, Receiver, local_client

from scheduler.adapters.clock import SystemClock
from scheduler.adapters.dynamodb.timers import WATERMARK_KEY
from scheduler.core.jobs.service import Submission
from scheduler.core.model.job import JobSpec
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.timefmt import ONE_MINUTE, from_ms, minute_key, minute_of, rfc3339
from scheduler.core.runtime.metrics import NullMetrics
from scheduler.handlers import wiring
from scheduler.provision import provision
from scheduler.schema import READY_QUEUE
from scheduler.settings import Settings

pytestmark = pytest.mark.system

SWEEPERS = 3
HERD = int(os.environ.get("PUNCTUAL_SWEEPERS_HERD", "600"))
SPREAD = 120  # one-shots due over the 20 s after the herd
RATE_JOBS = 4  # every 5 s for 20 s after the herd
SEED = int(os.environ.get("PUNCTUAL_SWEEPERS_SEED", "20261212"))
BUCKET_LEASE_SECONDS = 20
#: The herd falls due this long after its jobs are stored: the stack starts and sweeps them meanwhile.
LEAD_SECONDS = 25
SHARDS = 16
ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = json.loads((ROOT / "cdk.json").read_text())["context"]["punctual"]


def deployed(name: str) -> Any:
    """A function setting as the stack deploys it: cdk.json's value, or (null there) the functions' own default."""
    value = PRODUCTION[name]
    return Settings.model_fields[name].default if value is None else value


@pytest.fixture
def sweepers_stack(aws_endpoints: dict[str, str], tmp_path: Path) -> Iterator[LocalStack]:
    """The local stack with three sweepers, not started: its tables are provisioned, for the jobs to go in first."""
    env = {
        **aws_endpoints,
        "SCHEDULER_LOCAL_SWEEPERS": str(SWEEPERS),
        "SCHEDULER_LEASE_SECONDS": str(deployed("lease_seconds")),
        "SCHEDULER_LOOKAHEAD_SECONDS": str(deployed("lookahead_seconds")),
        "SCHEDULER_BUCKET_LEASE_SECONDS": str(BUCKET_LEASE_SECONDS),
        "SCHEDULER_SHARD_COUNT": str(SHARDS),
        "SCHEDULER_LOCAL_WORKERS": "2",
    }
    os.environ.pop("SCHEDULER_LOCAL_VISIBILITY_TIMEOUT", None)
    stack = LocalStack(tmp_path / "stack", env)
    try:
        yield stack
    finally:
        stack.stop()


@dataclass
class Violation:
    watermark: datetime
    minute: datetime
    shard: int
    state: str


@dataclass
class WatermarkWatch:
    """Reads the watermark, then (strongly consistent, after it) the buckets of every minute behind it. A bucket is
    done for good once done, so one found not done (or, for a minute the jobs fall in, never claimed) behind the
    watermark read before it means the watermark passed an unfinished minute."""

    dynamodb: Any
    table: str
    #: Buckets of minutes from here on must exist behind the watermark (the sweep claims each one it passes).
    claimed_from: datetime
    #: Buckets of minutes from here on are read (a first watermark starts up to ten minutes back).
    read_from: datetime
    violations: list[Violation] = field(default_factory=list)
    watermarks: list[datetime] = field(default_factory=list)
    reads: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)

    def watch(self, interval: float = 0.25) -> threading.Thread:
        def loop() -> None:
            while not self.stopped.wait(interval):
                self.check()

        thread = threading.Thread(target=loop, name="watermark-watch", daemon=True)
        thread.start()
        return thread

    def check(self) -> dict[tuple[datetime, int], dict[str, Any]]:
        item = self.dynamodb.get_item(TableName=self.table, Key=WATERMARK_KEY, ConsistentRead=True).get("Item")
        if item is None or "minute_ms" not in item:  # none yet (the item may hold the recorded shard count alone)
            return {}
        watermark = from_ms(int(item["minute_ms"]["N"]))
        if not self.watermarks or self.watermarks[-1] != watermark:
            self.watermarks.append(watermark)
        behind: list[tuple[datetime, int]] = []
        minute = self.read_from
        while minute < watermark:
            behind += [(minute, shard) for shard in range(SHARDS)]
            minute += ONE_MINUTE
        buckets = self.buckets(behind)
        self.reads += 1
        for minute, shard in behind:
            bucket = buckets.get((minute, shard))
            if bucket is None and minute >= self.claimed_from:
                self.violations.append(Violation(watermark, minute, shard, "never claimed"))
            elif bucket is not None and not bucket.get("done", {}).get("BOOL", False):
                state = f"not done (owner {bucket.get('owner', {}).get('S')}, epoch {bucket['epoch']['N']})"
                self.violations.append(Violation(watermark, minute, shard, state))
        return buckets

    def buckets(self, wanted: list[tuple[datetime, int]]) -> dict[tuple[datetime, int], dict[str, Any]]:
        """The bucket items, as `adapters/dynamodb/timers.py` stores them (`BUCKET#<minute>#<shard>`, `BUCKET`)."""
        found: dict[tuple[datetime, int], dict[str, Any]] = {}
        by_pk = {f"BUCKET#{minute_key(m)}#{s}": (m, s) for m, s in wanted}
        keys = [{"PK": {"S": pk}, "SK": {"S": "BUCKET"}} for pk in by_pk]
        for start in range(0, len(keys), 100):
            request: dict[str, Any] = {self.table: {"Keys": keys[start : start + 100], "ConsistentRead": True}}
            while request:
                response = self.dynamodb.batch_get_item(RequestItems=request)
                for bucket in response["Responses"].get(self.table, []):
                    found[by_pk[bucket["PK"]["S"]]] = bucket
                request = response.get("UnprocessedKeys") or {}
        return found


def store_jobs(settings: Settings, clients: wiring.Clients, receiver: Receiver, due: datetime) -> dict[str, datetime]:
    """The herd (due at `due`), one-shots spread over the next 20 s and rate jobs every 5 s, stored through the real
    JobService before any sweeper runs. Returns each occurrence's key and fire time."""
    service = wiring.build(settings, NullMetrics(), clients=clients, clock=SystemClock()).core.job_service()
    rng = random.Random(SEED)
    retry = {"max_attempts": 10, "initial_backoff_seconds": 1, "max_backoff_seconds": 2}
    bodies: list[dict[str, Any]] = []
    for n in range(HERD + SPREAD):
        at = due if n < HERD else due + timedelta(milliseconds=rng.randint(0, 20_000))
        bodies.append(
            {
                "schedule": {"type": "once", "at": rfc3339(at)},
                "target": {"type": "http", "url": receiver.url},
                "payload": {"n": n},
                "retry": retry,
            }
        )
    for _ in range(RATE_JOBS):
        first = due + timedelta(milliseconds=rng.randint(0, 4_999))
        schedule = {"type": "rate", "every_seconds": 5, "start_at": rfc3339(first)}
        schedule["end_at"] = rfc3339(first + timedelta(seconds=20))
        # A killed worker's run keeps its lease; with the default overlap policy (skip) the next occurrence would
        # rightly be SKIPPED. This test is about sweepers, not overlap: allow it.
        bodies.append({"schedule": schedule, "target": {"type": "http", "url": receiver.url},
                       "overlap_policy": "allow", "retry": retry})  # fmt: skip

    def create(chunk: list[dict[str, Any]]) -> list[Any]:
        submissions = [Submission(JobSpec.model_validate(body), None, body) for body in chunk]
        return service.create_many("alice", submissions)

    expected: dict[str, datetime] = {}
    with ThreadPoolExecutor(4) as pool:
        for chunk, answers in zip(
            (bodies[i : i + 25] for i in range(0, len(bodies), 25)),
            pool.map(create, [bodies[i : i + 25] for i in range(0, len(bodies), 25)]),
            strict=True,
        ):
            for body, answer in zip(chunk, answers, strict=True):
                assert not isinstance(answer, Exception), answer
                schedule = body["schedule"]
                if schedule["type"] == "once":
                    at = datetime.fromisoformat(schedule["at"].replace("Z", "+00:00"))
                    expected[occurrence_key(answer.job.job_id, at)] = at
                    continue
                # From the first occurrence the job was created with: one before its creation is not the job's (a
                # loaded machine may take longer than the lead to store them all)
                start = datetime.fromisoformat(schedule["start_at"].replace("Z", "+00:00"))
                end = datetime.fromisoformat(schedule["end_at"].replace("Z", "+00:00"))
                first = answer.job.next_run_at or end + timedelta(seconds=5)
                for k in range(5):
                    at = start + timedelta(seconds=5 * k)
                    if first <= at <= end:
                        expected[occurrence_key(answer.job.job_id, at)] = at
    return expected


def sweeps_by_process(stack: LocalStack) -> dict[str, dict[str, int]]:
    """Per sweeper process, its sweeps' totals from their "sweep finished" lines."""
    totals: dict[str, dict[str, int]] = {}
    for path in sorted((stack.state_dir / "logs").glob("sweeper*.log")):
        counts = Counter[str]()
        for line in path.read_text(errors="replace").splitlines():
            if '"sweep finished"' in line:
                record = json.loads(line)
                counts["sweeps"] += 1
                counts["dispatched"] += int(record.get("dispatched", 0))
                counts["buckets_done"] += int(record.get("buckets_done", 0))
                counts["buckets_busy"] += int(record.get("buckets_busy", 0))
        totals[path.stem] = dict(counts)
    return totals


def test_three_sweepers_killed_with_the_workers_fire_each_occurrence_once_and_hold_the_watermark(
    sweepers_stack: LocalStack, aws_endpoints: dict[str, str]
) -> None:
    stack = sweepers_stack
    dynamodb, sqs = local_client("dynamodb", aws_endpoints), local_client("sqs", aws_endpoints)
    events = local_client("events", aws_endpoints)
    resources = provision(stack.env["SCHEDULER_LOCAL_PREFIX"], dynamodb, sqs, events=events)
    visibility = sqs.get_queue_attributes(QueueUrl=resources.ready_queue_url, AttributeNames=["VisibilityTimeout"])
    assert int(visibility["Attributes"]["VisibilityTimeout"]) == READY_QUEUE.visibility_timeout_seconds == 720
    settings = Settings(
        jobs_table=resources.jobs_table,
        executions_table=resources.executions_table,
        ready_queue_url=resources.ready_queue_url,
        dlq_url=resources.dlq_url,
        shard_count=SHARDS,
        allow_private_targets=True,
        local_mode=True,
    )
    rng = random.Random(SEED)
    receiver = Receiver().start()
    watch: WatermarkWatch | None = None
    try:
        # Given a herd due in one second, one-shots after it and rate jobs, stored before any sweeper runs
        began = datetime.now(UTC)
        due = (began + timedelta(seconds=LEAD_SECONDS)).replace(microsecond=0)
        expected = store_jobs(settings, wiring.Clients(dynamodb, sqs, events), receiver, due)
        print(f"sweepers: stored {len(expected)} occurrences in {(datetime.now(UTC) - began).total_seconds():.1f}s")
        watch = WatermarkWatch(dynamodb, resources.jobs_table, minute_of(due), minute_of(began) - 11 * ONE_MINUTE)
        watcher = watch.watch()

        # When the stack starts with three sweepers, which are SIGKILLed while they sweep the herd's buckets, and the
        # workers are SIGKILLed in the middle of their batches while the herd runs
        failed: list[BaseException] = []

        def start() -> None:
            try:
                stack.start()
            except BaseException as exc:  # reported below, in the test's thread
                failed.append(exc)

        starting = threading.Thread(target=start, name="stack-start", daemon=True)
        starting.start()
        names = ["sweeper", *(f"sweeper-{n}" for n in range(2, SWEEPERS + 1))]
        deadline = time.time() + 60
        while not all((stack.state_dir / "pids" / f"{name}.pid").exists() for name in names):
            assert time.time() < deadline and not failed, f"the sweepers did not start: {failed}"
            time.sleep(0.05)
        kills: Counter[str] = Counter()

        def kill(victim: str) -> None:
            try:
                stack.kill(victim)
                kills[victim] += 1
            except (ProcessLookupError, FileNotFoundError, ValueError):
                pass  # it was already being restarted

        for _ in range(6):
            time.sleep(rng.uniform(0.3, 1.5))
            kill(rng.choice(names))
        starting.join(timeout=120)
        assert not starting.is_alive() and not failed, f"the stack did not start: {failed}"
        while datetime.now(UTC) < due:
            time.sleep(0.05)
        for victim in rng.sample(["worker-1", "worker-2", "worker-1", "worker-2", *names[:2]], 6):
            if victim.startswith("worker"):
                seen = len(receiver.calls)  # mid-batch: right after a target call
                wait_until = time.time() + 3
                while len(receiver.calls) == seen and time.time() < wait_until:
                    time.sleep(0.005)
            else:
                time.sleep(rng.uniform(0.3, 1.0))
            kill(victim)

        # Then, once the system has settled, every occurrence took effect - once - and none is lost
        last_due = max(expected.values())
        settle = max(0.0, (last_due - datetime.now(UTC)).total_seconds()) + deployed("lease_seconds") + 20
        deadline = time.time() + settle
        while time.time() < deadline and not set(expected) <= {c.headers["idempotency-key"] for c in receiver.calls}:
            time.sleep(0.5)
        # and the sweeps go on past the jobs' minutes (a sweep advances the watermark when it ends)
        while time.time() < deadline + 30 and not (watch.watermarks and watch.watermarks[-1] > minute_of(last_due)):
            time.sleep(0.5)
        watch.stopped.set()
        watcher.join(timeout=10)
        final = watch.check()
        first_call: dict[str, float] = {}
        received: Counter[str] = Counter()
        for call in receiver.calls:
            key = call.headers["idempotency-key"]
            received[key] += 1
            first_call.setdefault(key, call.at)
        missing = set(expected) - set(received)
        assert not missing, (
            f"{len(missing)} occurrences never took effect (kills: {dict(kills)}): {sorted(missing)[:5]}"
        )
        assert set(received) <= set(expected), set(received) - set(expected)
        # and none started before its time
        lateness = sorted(first_call[key] - at.timestamp() for key, at in expected.items())
        assert lateness[0] >= -0.05, f"an occurrence started {-lateness[0]:.3f}s before its time"

        # And the watermark never passed a minute with an unfinished bucket, and it did pass the jobs' minutes
        assert not watch.violations, watch.violations[:5]
        assert watch.watermarks and watch.watermarks[-1] > minute_of(last_due), watch.watermarks
        assert all((minute_of(due), shard) in final for shard in range(SHARDS)), "the herd's buckets were not read"

        # And every killed sweeper was restarted, and every sweeper swept
        assert sum(kills[name] for name in names) >= 4 and sum(kills.values()) >= 8, kills
        out = stack.log.read_text()
        for name in names:
            if kills[name]:
                assert f"{name} exited (code -9); restarting it" in out, name
        shares = sweeps_by_process(stack)
        assert sorted(shares) == sorted(names), shares
        # (each sweeper ran sweeps alongside the others; which one claims the herd's buckets first is the machine's
        # scheduling, so the share each took is printed, not asserted)
        assert all(totals.get("sweeps", 0) >= 1 for totals in shares.values()), shares
        herd_owners = {final[(minute_of(due), shard)]["owner"]["S"] for shard in range(SHARDS)}
        taken_over = sum(1 for bucket in final.values() if int(bucket["epoch"]["N"]) > 1)
        duplicates = sum(n - 1 for n in received.values())
        print(
            f"sweepers: {len(expected)} occurrences, {sum(kills.values())} kills {dict(kills)}, 0 missing, "
            f"{duplicates} re-deliveries absorbed by the key; lateness p50 {lateness[len(lateness) // 2]:.2f}s, "
            f"max {lateness[-1]:.2f}s; watermark read {watch.reads} times, moved {len(watch.watermarks) - 1} "
            f"times, never past an unfinished bucket; {taken_over} buckets claimed more than once; the herd's minute "
            f"finished by {len(herd_owners)} invocations; per sweeper {shares}"
        )
    finally:
        if watch is not None:
            watch.stopped.set()
        receiver.stop()
