"""One seed's workload: a handful of jobs and the API calls that create, change, pause, cancel and trigger
them, plus a few requests that must be rejected without changing anything."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

from scheduler.core.model.timefmt import rfc3339
from scheduler.core.tenancy.fairness import Budget, FairnessConfig

TENANT = "tenant-a"
OTHER_TENANT = "tenant-b"
#: The burst's tenant: its own quota, execution slots and (when the run has dispatch budgets) a budget far below the
#: burst, so that some of its occurrences wait past SQS's horizon (deferred timers).
BURST_TENANT = "tenant-c"

#: Where a run starts. Two of them put the window across a Europe/Berlin DST transition at 01:00Z.
START_POINTS: tuple[datetime, ...] = (
    datetime(2026, 3, 29, 0, 41, 17, tzinfo=UTC),  # spring forward: local 02:00-03:00 does not exist
    datetime(2026, 10, 25, 0, 23, 41, tzinfo=UTC),  # fall back: local 02:00-03:00 happens twice
    datetime(2026, 1, 5, 8, 51, 3, tzinfo=UTC),
)

SCHEDULE_FIELDS = ("at", "delay_seconds", "every_seconds", "start_at", "end_at", "expression", "timezone")

CallKind = Literal["create", "cancel", "pause", "resume", "update", "trigger", "backfill"]

#: Requests that must be refused (or, for the no-ops, accepted) without changing stored state.
INVALID_CALLS: tuple[str, ...] = (
    "payload-too-large",
    "no-future-occurrence",
    "bad-cron",
    "unknown-zone",
    "unknown-job",
    "other-tenant-update",
    "other-tenant-trigger",
    "stale-if-match",
    "invalid-patch",
    "idempotency-conflict",
    "resume-active",
)


@dataclass
class PlannedCall:
    """One API call of the workload, made at `at` (true time), about workload job number `job`."""

    seq: int
    at: datetime
    kind: CallKind
    job: int
    body: dict[str, Any] | None = None
    idempotency_key: str | None = None
    tenant: str = TENANT


@dataclass(frozen=True)
class InvalidCall:
    seq: int
    at: datetime
    name: str
    job: int


@dataclass
class Workload:
    start: datetime
    window: timedelta
    calls: list[PlannedCall]
    invalid: list[InvalidCall]
    jobs: int

    def describe(self, index: int) -> str:
        create = next(c for c in self.calls if c.job == index and c.kind == "create")
        assert create.body is not None
        return describe_body(create.body)


def describe_body(body: dict[str, Any]) -> str:
    schedule = body["schedule"]
    if schedule["type"] == "once":
        what = f"once at {schedule['at']}" if "at" in schedule else f"once in {schedule['delay_seconds']}s"
    elif schedule["type"] == "rate":
        what = f"every {schedule['every_seconds']}s"
        if "start_at" in schedule:
            what += f" from {schedule['start_at']}"
        if "end_at" in schedule:
            what += f" to {schedule['end_at']}"
    else:
        what = f"cron '{schedule['expression']}' {schedule.get('timezone', 'UTC')}"
    return (
        f"{what}, jitter {body.get('jitter_seconds', 0)}s, {body.get('misfire_policy', 'run_once')}, "
        f"{body.get('delivery', 'at_least_once')}, {body.get('retry', {}).get('max_attempts', 5)} attempts"
    )


def _instant(rng: random.Random, at: datetime) -> str:
    """RFC 3339 with a `Z` or with an explicit non-UTC offset (both must mean the same instant)."""
    if rng.random() < 0.3:
        return at.astimezone(timezone(timedelta(hours=2))).isoformat()
    return rfc3339(at)


def draw_schedule(rng: random.Random, start: datetime, cron_allowed: bool) -> dict[str, Any]:
    """A schedule: one-shot (`at` or `delay_seconds`), rate (optionally bounded) or cron (UTC or Berlin)."""
    kinds = ["once_delay", "once_at", "rate"] + (["cron", "cron"] if cron_allowed else [])
    kind = rng.choice(kinds)
    if kind == "once_delay":
        # Bias towards the edge of the sweep horizon (lookahead + seal margin), where the seal matters.
        delay = rng.choice((rng.randint(0, 40), rng.randint(280, 400), rng.randint(0, 900)))
        return {"type": "once", "delay_seconds": delay}
    if kind == "once_at":
        at = start + timedelta(milliseconds=rng.randint(-300_000, 1_200_000))
        return {"type": "once", "at": _instant(rng, at)}
    if kind == "rate":
        schedule: dict[str, Any] = {"type": "rate", "every_seconds": rng.choice((45, 60, 90, 150, 300))}
        if rng.random() < 0.3:
            begin = start + timedelta(seconds=rng.randint(0, 900))
            schedule["start_at"] = _instant(rng, begin)
            if rng.random() < 0.5:
                schedule["end_at"] = _instant(rng, begin + timedelta(seconds=rng.randint(300, 1800)))
        return schedule
    if rng.random() < 0.6:
        # Around the DST transitions these exercise the gap (spring) and the repeated hour (autumn).
        expression = rng.choice(("*/10 2 * * *", "30 2 * * *", "*/15 * * * *", "*/5 * * * *"))
        return {"type": "cron", "expression": expression, "timezone": "Europe/Berlin"}
    return {"type": "cron", "expression": rng.choice(("*/5 * * * *", "*/3 * * * *", "7,23,41 * * * *"))}


def draw_body(rng: random.Random, index: int, start: datetime, cron_allowed: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": f"job-{index}",
        "schedule": draw_schedule(rng, start, cron_allowed),
        "target": {"type": "handler", "name": "sink"},
        "payload": {"job": index},
        "retry": {
            "max_attempts": rng.randint(1, 4),
            "initial_backoff_seconds": rng.choice((1, 2, 5, 10)),
            "max_backoff_seconds": 60,
            "max_event_age_seconds": rng.choice((120, 3600)),
        },
        "jitter_seconds": rng.choice((0, 0, 5, 45)),
        "misfire_policy": rng.choice(("run_once", "skip", "run_all")),
        "overlap_policy": rng.choice(("skip", "buffer_one", "allow")),
        "delivery": rng.choice(("at_least_once", "at_least_once", "at_most_once")),
    }
    events = rng.random()
    if events < 0.4:
        body["events"] = True  # its terminal outcomes are published as completion events
    elif events < 0.5:
        body["events"] = False  # said explicitly; left out, it is the deployment's default (off)
    return body


def draw_update(rng: random.Random, start: datetime, cron_allowed: bool) -> dict[str, Any]:
    """A JSON merge patch: a new schedule (most often), or a payload, jitter or policy change."""
    roll = rng.random()
    if roll < 0.6:
        # A merge patch merges objects: clear every schedule field the new schedule does not set.
        schedule: dict[str, Any] = dict.fromkeys(SCHEDULE_FIELDS)
        schedule.update(draw_schedule(rng, start, cron_allowed))
        return {"schedule": schedule}
    if roll < 0.75:
        return {"payload": {"edited": rng.randint(1, 99)}}
    if roll < 0.9:
        return {"jitter_seconds": rng.choice((0, 7, 30))}
    return {"misfire_policy": rng.choice(("run_once", "skip", "run_all"))}


#: How often a run has a burst: several one-shot jobs of the tenant due at one instant (its execution budget then
#: throttles some, its dispatch budget delays or defers some).
BURST_CHANCE = 0.3
#: How often a recurring job is backfilled over a past range (once, at a random time of the run).
BACKFILL_CHANCE = 0.2


def draw_burst(rng: random.Random, first: int, due: datetime) -> list[dict[str, Any]]:
    """3-6 one-shot jobs due at the same instant, numbered from `first`."""
    bodies = []
    for index in range(first, first + rng.randint(3, 6)):
        body = draw_body(rng, index, due, cron_allowed=False)
        body["schedule"] = {"type": "once", "at": _instant(rng, due)}
        body["jitter_seconds"] = 0
        bodies.append(body)
    return bodies


def draw_backfill_range(rng: random.Random, start: datetime, call_at: datetime) -> dict[str, Any]:
    """A past range for a backfill: from up to 30 minutes before the run (before the job existed) for 5-20 minutes,
    at times into the job's own occurrences (the ledger absorbs those); it ends at least 10 s before the call (the
    API's clock may run behind)."""
    begin = start - timedelta(seconds=rng.randint(0, 1800))
    end = min(begin + timedelta(seconds=rng.randint(300, 1200)), call_at - timedelta(seconds=10))
    return {"from": rfc3339(begin), "to": rfc3339(end)}


def draw_workload(rng: random.Random) -> Workload:
    """The jobs (3-5, at most two cron: cron is the slow part; sometimes a burst of 3-6 one-shot jobs due at one
    instant) and their calls over a 15-35 min window."""
    start = rng.choice(START_POINTS) + timedelta(milliseconds=rng.randint(0, 59_999))
    window = timedelta(minutes=rng.randint(15, 35))
    span = window.total_seconds()
    count = rng.randint(3, 5)
    calls: list[PlannedCall] = []
    seq = 0
    crons = 0

    def at(offset: float) -> datetime:
        return start + timedelta(milliseconds=round(offset * 1000))

    for index in range(count):
        body = draw_body(rng, index, start, cron_allowed=crons < 2)
        if body["schedule"]["type"] == "cron":
            crons += 1
        created = rng.uniform(0, span / 3)
        calls.append(PlannedCall(seq, at(created), "create", index, body, f"create-{index}"))
        seq += 1
        later: list[tuple[float, CallKind, dict[str, Any] | None]] = []
        if rng.random() < 0.2:
            later.append((rng.uniform(created, span), "cancel", None))
        if rng.random() < 0.25:
            paused = rng.uniform(created, span)
            later.append((paused, "pause", None))
            if rng.random() < 0.8:
                later.append((rng.uniform(paused, span + 60), "resume", None))
        if rng.random() < 0.35:
            later.append((rng.uniform(created, span), "update", draw_update(rng, start, crons < 2)))
        for _ in range(rng.choice((0, 0, 1, 2))):
            later.append((rng.uniform(created, span), "trigger", None))
        if body["schedule"]["type"] != "once" and rng.random() < BACKFILL_CHANCE:
            offset = rng.uniform(created, span)
            later.append((offset, "backfill", draw_backfill_range(rng, start, at(offset))))
        for offset, kind, patch in sorted(later, key=lambda item: item[0]):
            calls.append(PlannedCall(seq, at(offset), kind, index, patch))
            seq += 1
    invalid = [
        InvalidCall(seq + n, at(rng.uniform(0, span)), rng.choice(INVALID_CALLS), rng.randrange(count))
        for n in range(rng.randint(1, 3))
    ]
    seq += len(invalid)
    if rng.random() < BURST_CHANCE:
        for body in draw_burst(rng, count, start + timedelta(seconds=rng.uniform(span / 3, span))):
            when = at(rng.uniform(0, span / 3))
            calls.append(PlannedCall(seq, when, "create", count, body, f"create-{count}", BURST_TENANT))
            seq += 1
            count += 1
    return Workload(start, window, calls, invalid, count)


#: How often a run has flow control: the burst's jobs name one destination's key, and each of the main tenant's jobs
#: another's with this chance.
FLOW_CONTROL_CHANCE = 0.5
SHARED_KEY_CHANCE = 0.4


def add_flow_control(workload: Workload, rng: random.Random) -> None:
    """Flow-control keys in some runs (drawn from their own stream, so the rest of the seed's run is unchanged):
    parallelism 1 (below most tenants' execution budgets, so the key's slots bind, not the tenant's), sometimes
    with a rate of one call every few seconds."""
    if rng.random() >= FLOW_CONTROL_CHANCE:
        return
    for call in workload.calls:
        if call.kind != "create" or call.body is None:
            continue
        key = "burst-dest" if call.tenant == BURST_TENANT else "shared-dest"
        if key == "shared-dest" and rng.random() >= SHARED_KEY_CHANCE:
            continue
        flow: dict[str, Any] = {"key": key, "parallelism": 1}
        if rng.random() < 0.5:
            flow.update(rate=1, period_seconds=rng.choice((2, 5)))
        call.body["flow_control"] = flow


def draw_fairness(rng: random.Random) -> FairnessConfig | None:
    """Dispatch budgets in half the runs: every tenant paced (a few seconds between releases at most, well above
    the recurring jobs' rate, so nothing falls behind for good), and the burst's tenant at one release every 1.5 or
    3.3 minutes: a burst of 3-6 takes longer than SQS's horizon to release, the rest waits as deferred timers."""
    if rng.random() < 0.5:
        return None
    default = Budget(rng.choice((0.25, 0.5, 2.0)), rng.choice((1, 2, 5)))
    return FairnessConfig(default, {BURST_TENANT: Budget(rng.choice((1 / 90, 1 / 200)), 1)})
