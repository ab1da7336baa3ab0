"""Invariants 5 and 1 for recurring jobs, judged on each job's chain: every occurrence that fell due ran once,
none missed beyond its misfire policy, and an ACTIVE job's chain is alive at the end.

How "fell due" is decided (invariants 1 and 5). The client's acknowledged calls cut each job's life into
eras: from the acknowledgement of a create, resume or edit that left the job ACTIVE, to the first attempt
of the next call that changed it. Within an era the schedule's nominal occurrences are listed (from the
era's first pending occurrence; the last era stops at the job's final `next_run_at`). An occurrence "ran"
if the ledger has an item for it. A run of consecutive occurrences with no item is allowed only
- at the end of an era that a pause, cancel or edit closed (they may not have been dispatched by then);
- as the misfire policy says: never for `run_all` (the catch-up window is longer than a run); for
  `run_once` and `skip`, only if the chain was found late, i.e. the next occurrence that ran was first sent
  more than the misfire grace after the first missed one's fire time (and, for `run_once`, that one is
  itself overdue when sent, being "the latest missed occurrence");
- at the end of the last era for `skip`, when the job counted skipped occurrences.
A catch-up (a resume's, a `run_all` misfire's) is never SKIPPED for overlap either: it runs one after another.
An ACTIVE job's chain must also be alive at the end: a timer for its `next_run_at` at its current version,
in a bucket not yet done (at or after the watermark) or in the late lane.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from scheduler.core.model.job import Job, JobState, RunState
from scheduler.core.model.schedules import Schedule, first_occurrence
from scheduler.core.ports import Execution
from scheduler_sim.determinism import next_occurrence
from scheduler_sim.invariants import Violation, instant, span

if TYPE_CHECKING:
    from scheduler_sim.observed import Observed
    from scheduler_sim.records import JobRecord

#: Nominal occurrences listed per era at most (a run spans at most a couple of hours).
MAX_NOMINAL = 500


@dataclass
class Era:
    """A stretch of a job's life with one version, ACTIVE or not, per the client's acknowledged calls."""

    version: int
    active: bool
    job: Job
    first: datetime | None
    started_by: str
    end: datetime | None = None  # first attempt of the call that ended it (None: it lasts to the end)


def chains(sim: Observed) -> list[Violation]:
    ran: dict[str, dict[datetime, Execution]] = {}
    for item in sim.ledger.items.values():
        if item.state == RunState.SKIPPED and item.last_error == "job paused" and _resumed_after(sim, item):
            # A resume decides it by its misfire policy: one it sends again reopens the skip and ends in its real
            # outcome (Ledger.claim); one still SKIPPED as paused is one the policy did not run (or never got to).
            continue
        ran.setdefault(item.job_id, {})[item.scheduled_for] = item
    found: list[Violation] = []
    for record in sim.records:
        if record.job_id is None or not record.changes:
            continue
        final = sim.jobs.jobs.get(record.job_id)
        if final is None:
            found.append(Violation(1, f"job-{record.index} ({record.job_id}) was accepted and is gone"))
            continue
        found += _chain_alive(sim, record, final)
        eras = _eras(record)
        if not eras:
            continue
        last = eras[-1]
        if record.uncertain_from is None and last.version != final.version:
            found.append(
                Violation(
                    5,
                    f"job-{record.index} is at version {final.version} ({final.state.value}) but the last "
                    f"acknowledged call left it at version {last.version}",
                )
            )
            continue
        for era in eras:
            if era.active:
                found += _gaps(sim, record, final, era, ran.get(record.job_id, {}))
    return found


def _resumed_after(sim: Observed, item: Execution) -> bool:
    """Whether the item's occurrence fell inside a pause that a resume ended (strictly after the pause's write)."""
    for record in sim.records:
        if record.job_id != item.job_id:
            continue
        for change, following in zip(record.changes, record.changes[1:], strict=False):
            paused = change.job.paused_at
            resumed = change.kind == "pause" and following.kind == "resume" and paused is not None
            if resumed and paused is not None and paused < item.scheduled_for <= following.started:
                return True
    return False


def _eras(record: JobRecord) -> list[Era]:
    eras: list[Era] = []
    for change in record.changes:
        if record.uncertain_from is not None and change.started >= record.uncertain_from:
            break
        job = change.job
        if eras and eras[-1].version == job.version:
            continue  # a call that changed nothing (pause of a paused job, a replayed create)
        if eras:
            eras[-1].end = change.started
        first = first_occurrence(job.spec.schedule, job.created_at) if change.kind == "create" else job.next_run_at
        eras.append(Era(job.version, job.state == JobState.ACTIVE, job, first, change.kind))
    if record.uncertain_from is not None and eras and eras[-1].end is None:
        eras[-1].end = record.uncertain_from
    return eras


def _nominal(
    schedule: Schedule, first: datetime | None, created_at: datetime, bound: datetime | None
) -> list[datetime]:
    out: list[datetime] = []
    at = first
    while at is not None and len(out) < MAX_NOMINAL:
        if bound is not None and at >= bound:
            break
        out.append(at)
        at = next_occurrence(schedule, at, created_at)
    return out


def _gaps(sim: Observed, record: JobRecord, final: Job, era: Era, ran: dict[datetime, Execution]) -> list[Violation]:
    job = era.job
    spec = job.spec
    if era.end is not None:
        bound: datetime | None = era.end
    elif final.state == JobState.ACTIVE:
        bound = final.next_run_at
    else:
        bound = sim.clock.now()
    nominal = _nominal(spec.schedule, era.first, job.created_at, bound)
    name = f"job-{record.index} v{era.version} ({record.job_id}, {spec.misfire_policy})"
    found: list[Violation] = []
    missed: list[datetime] = []
    for at in [*nominal, None]:
        if at is not None and at not in ran:
            missed.append(at)
            continue
        if missed and not (at is None and era.end is not None) and not _misfired(sim, job, era, missed):
            moved_on = f"the job moved on to {instant(final.next_run_at)}"
            after = f"the next one ({instant(at)}) ran" if at is not None else moved_on
            found.append(
                Violation(
                    5,
                    f"{name}: {span(missed)} never ran and {after}; no misfire decision covers them "
                    f"(policy {spec.misfire_policy}, grace {sim.config.misfire_grace.total_seconds():g}s)",
                )
            )
        missed = []
    return found


def _misfired(sim: Observed, job: Job, era: Era, missed: list[datetime]) -> bool:
    """Whether the core decided, for a chain timer it found late, to skip these occurrences, under a policy
    that skips (`run_all` skips nothing within its catch-up window of a day, longer than any run)."""
    grace = sim.config.misfire_grace
    decisions = [m for m in sim.misfires.get(job.job_id, []) if m.policy != "run_all" and m.now - m.fire_at > grace]
    return all(
        any(
            m.version >= era.version  # an edit that keeps the schedule carries the pending occurrence on
            and m.scheduled_for <= at <= m.dispatched_for
            for m in decisions
        )
        for at in missed
    )


def run_all_skips(sim: Observed) -> list[Violation]:
    found: list[Violation] = _catch_up_overlap_skips(sim)
    window = sim.config.catchup_window
    for job_id, decisions in sim.misfires.items():
        for m in decisions:
            if m.policy == "run_all" and m.now - m.scheduled_for < window:
                found.append(
                    Violation(
                        5,
                        f"{job_id} v{m.version} (run_all) skipped {m.skipped} occurrence(s) found late at "
                        f"{instant(m.now)}, all inside the catch-up window",
                    )
                )
    return found


def _catch_up_overlap_skips(sim: Observed) -> list[Violation]:
    """A catch-up is never SKIPPED for overlap, whatever the overlap policy: each waits behind the one before it.
    Judged where the catch-up is certain: for a job whose every known version is `run_all`, an occurrence first
    claimed later than the misfire grace after its fire time (so late whenever its overlap was judged); for any
    job, one that fell due well inside its last pause and was claimed after the resume that sent it."""
    found: list[Violation] = []
    grace, window = sim.config.misfire_grace, sim.config.catchup_window
    for record in sim.records:
        specs = [change.job.spec for change in record.changes]
        if record.job_id is None or record.uncertain_from is not None or not specs:
            continue
        run_all = all(spec.misfire_policy == "run_all" for spec in specs)
        jitter = max(spec.jitter_seconds for spec in specs)
        held = _last_pause(record)
        for item in sim.ledger.items.values():
            if item.job_id != record.job_id or item.state != RunState.SKIPPED or item.created_at is None:
                continue
            if not (item.last_error or "").startswith("overlap:"):
                continue
            late = item.created_at - item.scheduled_for - timedelta(seconds=jitter)
            why = ""
            if run_all and grace < late and item.created_at - item.scheduled_for < window:
                why = f"run_all, caught up {late.total_seconds():.0f}s after its fire time"
            elif held is not None and held[0] < item.scheduled_for < held[1] < item.created_at:
                why = f"fell due while paused, sent by the resume at {instant(held[1])}"
            if why:
                found.append(
                    Violation(5, f"{item.key} (job-{record.index}, {why}) was skipped for overlap: {item.last_error}")
                )
    return found


def _last_pause(record: JobRecord) -> tuple[datetime, datetime] | None:
    """The job's last pause, if a resume ended it and nothing paused it again: from well after the pause was
    acknowledged to well before the resume was first attempted (the API's clock may differ from the sim's)."""
    pause: datetime | None = None
    window: tuple[datetime, datetime] | None = None
    for change in record.changes:
        if change.kind == "pause":
            pause, window = change.acked + timedelta(seconds=10), None
        elif change.kind == "resume" and pause is not None:
            window, pause = (pause, change.started - timedelta(seconds=10)), None
        elif change.kind == "cancel":
            pause, window = None, None
    return window if pause is None and window is not None and window[0] < window[1] else None


def _chain_alive(sim: Observed, record: JobRecord, final: Job) -> list[Violation]:
    if final.state != JobState.ACTIVE:
        return []
    name = f"job-{record.index} ({final.job_id}) v{final.version}"
    due = final.next_run_at
    if due is None:
        return [Violation(1, f"{name} is ACTIVE with no next run")]
    timers = sim.timers
    watermark = timers.watermark()
    where: list[str] = []
    for timer in timers.late.values():
        if timer.job_id == final.job_id and timer.scheduled_for == due and timer.version == final.version:
            return []
    for bucket, items in timers.timer_items.items():
        for timer in items.values():
            if timer.job_id != final.job_id or timer.scheduled_for != due or timer.version != final.version:
                continue
            state = timers.buckets.get(bucket)
            if state is not None and state.done:
                where.append(f"bucket {bucket.minute:%H:%M}/{bucket.shard} is done")
            elif watermark is not None and bucket.minute < watermark:
                where.append(f"bucket {bucket.minute:%H:%M}/{bucket.shard} is behind the watermark")
            else:
                return []
    detail = "; ".join(where) if where else "no timer holds it"
    return [Violation(1, f"{name}: its next run {instant(due)} will never be dispatched ({detail})")]
