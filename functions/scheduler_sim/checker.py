"""The checker: docs/design.md §6, judged after each run from the end state and what was recorded on the
way (the sink's calls, the ledger writes as they were accepted, the first send of every key, the client's
acknowledged calls).

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
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from scheduler.core.backfill import occurrences_in
from scheduler.core.chain import counts_as_active
from scheduler.core.events import event_id
from scheduler.core.keys import occurrence_key
from scheduler.core.model import BackfillState, Job, JobState, RunState
from scheduler.core.ports import Execution
from scheduler.core.schedules import Schedule, first_occurrence
from scheduler.core.timefmt import from_ms, rfc3339, to_ms
from scheduler_sim.determinism import next_occurrence

if TYPE_CHECKING:
    from scheduler_sim.records import JobRecord
    from scheduler_sim.world import Simulation

INVARIANTS: dict[int, str] = {
    0: "the run completes without unexpected errors",
    1: "every occurrence of an accepted job that fell due reaches a terminal state (none lost)",
    2: "each occurrence key produces at most one accepted effect at a cooperating target",
    3: "no write from a worker whose epoch is stale is ever accepted",
    4: "nothing fires after its cancellation was acknowledged (beyond occurrences already running)",
    5: "a recurring job fires each of its occurrences once, and misses none beyond its misfire policy",
    6: "bad input never changes stored state",
    7: "once the run is quiet, each tenant's quota counter equals its jobs that can still fire (ACTIVE or PAUSED)",
    8: "a change of version sends no old version's message again unless that version's last plan was unproven",
    9: "a tenant never has more occurrences running at its target than its execution budget allows",
    10: "what a dead worker held is received again within the hold time (its lease, if claimed) of its death",
    11: "once the run is quiet, every terminal outcome of a job with events on was published and the outbox is empty; "
    "a job with events off publishes none",
    12: "once the run is quiet, a backfill of a live job has completed and every occurrence in its range reached a "
    "terminal state",
    13: "a tenant's dispatch budget holds: no release window of its calendar lets more through than its capacity",
}

#: Added to the hold time: a worker's poll interval (up to 1.5 s) and the clock a few steps take (sub-second
#: early waits) before one receives a message that came back.
RESTART_SLACK_SECONDS = 10.0

#: At most this many violations of one invariant are reported per run.
MAX_PER_INVARIANT = 5
#: Nominal occurrences listed per era at most (a run spans at most a couple of hours).
MAX_NOMINAL = 500


@dataclass(frozen=True)
class Violation:
    invariant: int
    message: str

    def __str__(self) -> str:
        return f"({self.invariant}) {INVARIANTS[self.invariant]}: {self.message}"


@dataclass
class Era:
    """A stretch of a job's life with one version, ACTIVE or not, per the client's acknowledged calls."""

    version: int
    active: bool
    job: Job
    first: datetime | None
    started_by: str
    end: datetime | None = None  # first attempt of the call that ended it (None: it lasts to the end)


def check(sim: Simulation) -> list[Violation]:
    """All invariants, in order. Returns the violations found (empty when the run is correct)."""
    found: list[Violation] = []
    found += [Violation(0, error) for error in sim.errors]
    found += _terminal(sim)
    found += _effects(sim)
    found += [Violation(3, message) for message in sim.stale_writes]
    found += _cancellations(sim)
    found += _chains(sim)
    found += _run_all_skips(sim)
    found += _bad_input(sim)
    found += _quota(sim)
    found += _version_change_costs(sim)
    found += [Violation(9, message) for message in sim.sink.over_limit]
    found += _restarts(sim)
    found += _completion_events(sim)
    found += _backfills(sim)
    found += _dispatch_budgets(sim)
    counts: dict[int, int] = {}
    kept: list[Violation] = []
    for violation in found:
        counts[violation.invariant] = counts.get(violation.invariant, 0) + 1
        if counts[violation.invariant] <= MAX_PER_INVARIANT:
            kept.append(violation)
    return kept


def _quota(sim: Simulation) -> list[Violation]:
    """Invariant 7: the counter the API's quota check reads (created, resumed and edited jobs in, completed and
    cancelled jobs out - some of them released by the sweeper's page checkpoints) matches the jobs themselves."""
    counted: dict[str, int] = {}
    for job in sim.jobs.jobs.values():
        counted.setdefault(job.tenant, 0)
        if counts_as_active(job):
            counted[job.tenant] += 1
    found = []
    for tenant in sorted(set(counted) | set(sim.jobs.active)):
        stored, actual = sim.jobs.active.get(tenant, 0), counted.get(tenant, 0)
        if stored != actual:
            found.append(Violation(7, f"tenant {tenant}: the counter says {stored}, {actual} jobs can still fire"))
    return found


def _backlogged(sim: Simulation, deadline: datetime, again: datetime) -> bool:
    """Whether the queue had more visible messages than the workers took, from the restart bound (less the poll's
    slack) until the message was received: every receive in that span came back full. A receive that came back
    short took every visible message, so a message visible then would have been received."""
    since = deadline - timedelta(seconds=RESTART_SLACK_SECONDS)
    polls = [full for at, full in sim.queue.polls if since <= at < again]
    return bool(polls) and all(polls)


def _completion_events(sim: Simulation) -> list[Violation]:
    """Invariant 11 (the outbox): the terminal write and its outbox entry are one fact, and the worker's publish or
    a sweep's drain announces it at least once. Judged on each occurrence's final outcome (event id: key, epoch,
    state) once the queue and the outbox were drained."""
    found: list[Violation] = []
    published = sim.bus.event_ids()
    for key, item in sim.ledger.items.items():
        job = sim.jobs.jobs.get(item.job_id)
        announced = job is not None and job.spec.events is True
        if item.outbox:
            found.append(Violation(11, f"{key} still has {len(item.outbox)} outcome(s) in its outbox after the drain"))
        if announced and item.state.terminal and event_id(key, item.epoch, item.state) not in published:
            found.append(
                Violation(11, f"{key} ended {item.state.value} (epoch {item.epoch}); no completion event announced it")
            )
    quiet = {job_id for job_id, job in sim.jobs.jobs.items() if job.spec.events is not True}
    for entry in sim.bus.published:
        if entry.event.job_id in quiet:
            found.append(
                Violation(11, f"{entry.actor} published {entry.event.event_id}; its job has completion events off")
            )
    return found


def _backfills(sim: Simulation) -> list[Violation]:
    """Invariant 12: every backfill the store holds (acknowledged or not: a client that lost the answer still made
    it) of a job neither cancelled nor paused at the end has sent its whole range, and each occurrence of the range
    has a terminal ledger item under its normal key (one accepted effect at most: invariant 2 judges every key)."""
    found: list[Violation] = []
    for backfill in sim.backfills.items.values():
        job = sim.jobs.jobs.get(backfill.job_id)
        if job is None or job.state in (JobState.CANCELLED, JobState.PAUSED):
            continue  # a cancel stops its waves; a pause holds them until the resume
        name = (
            f"backfill {backfill.backfill_id} of {backfill.job_id} [{_t(backfill.range_from)}, {_t(backfill.range_to)})"
        )
        if backfill.state != BackfillState.COMPLETED:
            found.append(
                Violation(12, f"{name} is {backfill.state.value}: {backfill.dispatched}/{backfill.total} sent")
            )
        instants = occurrences_in(backfill.plan, None, backfill.range_from, backfill.range_to, backfill.total + 1)
        missing = [at for at in instants if not _terminal_item(sim, occurrence_key(backfill.job_id, at))]
        if missing:
            found.append(Violation(12, f"{name}: {_span(missing)} never reached a terminal state"))
    return found


def _dispatch_budgets(sim: Simulation) -> list[Violation]:
    """Invariant 13: every dispatch a tenant admission let through carries its release instant (its fire time, or
    the later instant its budget gave it), booked in one window of the tenant's calendar; a window holds at most the
    budget's capacity, so no window sees more releases than that (what bounds a tenant's burst, `fairness.py`)."""
    found: list[Violation] = []
    if sim.fairness is None:
        return found
    for tenant, releases in sorted(sim.releases.items()):
        budget = sim.fairness.budget(tenant)
        windows: dict[int, list[str]] = {}
        for release, key in releases:
            windows.setdefault(to_ms(release) // budget.window_ms, []).append(key)
        for window, keys in sorted(windows.items()):
            if len(keys) > budget.capacity:
                start = from_ms(window * budget.window_ms)
                found.append(
                    Violation(
                        13,
                        f"tenant {tenant}: {len(keys)} releases in the {budget.window_ms} ms window from {_t(start)} "
                        f"(capacity {budget.capacity}): {', '.join(keys)}",
                    )
                )
    return found


def _terminal_item(sim: Simulation, key: str) -> bool:
    item = sim.ledger.items.get(key)
    return item is not None and item.state.terminal


def _restarts(sim: Simulation) -> list[Violation]:
    """Invariant 8 (bounded recovery): every message a worker held when it died, its batch's hold applied, is
    received again within the hold time (the lease, for the occurrence it had claimed) plus a poll's slack of the
    death - not after the queue's visibility timeout. Time the fault model injected meanwhile (an outage, a
    frozen or paused actor, the jump into quiescence) is added."""
    found: list[Violation] = []
    hold = sim.hold_config.hold_seconds
    leased = sim.execute_config.lease.total_seconds() + sim.execute_config.lease_margin_seconds
    for abandoned in sim.abandoned:
        started = abandoned.started or (False,) * len(abandoned.message_ids)
        for message_id, key, claimed in zip(abandoned.message_ids, abandoned.keys, started, strict=True):
            # A message whose occurrence the dead worker had claimed may have been extended to the lease by its
            # own heartbeat: the next worker could not take it over before the lease ends anyway.
            deadline = abandoned.at + timedelta(seconds=(leased if claimed else hold) + RESTART_SLACK_SECONDS)
            for start, seconds in sorted(sim.stalls):
                if abandoned.at <= start <= deadline:
                    deadline += timedelta(seconds=seconds)
            again = next((t for t in sim.queue.receives.get(message_id, []) if t >= abandoned.at), None)
            if again is not None and again > deadline and _backlogged(sim, deadline, again):
                continue  # visible in time, but every receive meanwhile came back full: the workers were behind
            if again is None or again > deadline:
                when = f"at {_t(again)}" if again else "never"
                found.append(
                    Violation(
                        10,
                        f"{key} ({message_id}), held by {abandoned.actor} when it died at {_t(abandoned.at)}, was "
                        f"received again {when}; the bound was {_t(deadline)} "
                        f"({'its lease' if claimed else f'the {hold}s hold'})",
                    )
                )
    return found


def _terminal(sim: Simulation) -> list[Violation]:
    found: list[Violation] = []
    items = sim.ledger.items
    for key, item in items.items():
        if not item.state.terminal:
            found.append(
                Violation(
                    1,
                    f"{key} is still {item.state.value} after quiescence (epoch {item.epoch}, "
                    f"attempts {item.attempts}, owner {item.owner}, lease until {_t(item.lease_until)})",
                )
            )
    windows = _pause_windows(sim)
    for key in sim.first_send:
        if key not in items:
            dispatch = sim.sent_dispatch[key]
            if any(start < dispatch.scheduled_for <= end for start, end in windows.get(dispatch.job_id, [])):
                continue  # fell due while paused: the worker left it to the resume's misfire policy (invariant 5)
            found.append(Violation(1, f"{key} was dispatched but never reached the ledger"))
    for record in sim.records:
        for key, acked in record.triggers:
            if key not in items:
                found.append(
                    Violation(1, f"trigger of job-{record.index} acknowledged at {_t(acked)}: {key} never ran")
                )
    return found


def _effects(sim: Simulation) -> list[Violation]:
    found: list[Violation] = []
    for (job_id, scheduled_for), effects in sim.sink.effects.items():
        if len(effects) > 1:
            keys = ", ".join(f"{e.key} (token {e.token}, {e.actor} at {_t(e.at)})" for e in effects)
            found.append(
                Violation(2, f"occurrence {job_id} @ {_t(scheduled_for)} took effect {len(effects)} times: {keys}")
            )
    acted: dict[tuple[str, datetime], int] = {}
    for call in sim.sink.calls:
        derived = occurrence_key(call.job_id, call.scheduled_for)
        if call.key != derived:
            found.append(Violation(2, f"{call.actor} called the target with key {call.key}, not the derived {derived}"))
        if call.reached and call.delivery == "at_most_once":
            ident = (call.job_id, call.scheduled_for)
            acted[ident] = acted.get(ident, 0) + 1
    for (job_id, scheduled_for), times in acted.items():
        if times > 1:
            found.append(
                Violation(
                    2,
                    f"at-most-once occurrence {job_id} @ {_t(scheduled_for)} reached the target {times} times "
                    "(a target that cannot deduplicate would have acted twice)",
                )
            )
    return found


def _cancellations(sim: Simulation) -> list[Violation]:
    cancelled = {r.job_id: r.cancel_acked for r in sim.records if r.job_id and r.cancel_acked}
    found: list[Violation] = []
    for call in sim.sink.calls:
        acked = cancelled.get(call.job_id)
        if acked is None or call.at <= acked:
            continue
        # "Already running" = its worker had checked the job before the cancellation was acknowledged.
        if call.job_read_at is not None and call.job_read_at >= acked:
            found.append(
                Violation(
                    4,
                    f"{call.actor} called the target for {call.key} at {_t(call.at)}, after reading the job at "
                    f"{_t(call.job_read_at)}; its cancellation was acknowledged at {_t(acked)}",
                )
            )
    return found


def _pause_windows(sim: Simulation) -> dict[str, list[tuple[datetime, datetime]]]:
    """Per job, from the first attempt of each pause to the acknowledgement of the resume that ended it (or the
    end of the run): the occurrences scheduled inside are the resume's to decide, not the paused worker's."""
    windows: dict[str, list[tuple[datetime, datetime]]] = {}
    for record in sim.records:
        if record.job_id is None:
            continue
        start: datetime | None = None
        for change in record.changes:
            if change.kind == "pause" and start is None:
                start = change.started - timedelta(seconds=10)  # the API's clock may run behind the sim's
            elif change.kind in ("resume", "cancel") and start is not None:
                windows.setdefault(record.job_id, []).append((start, change.acked + timedelta(seconds=10)))
                start = None
        if start is not None or record.uncertain_from is not None:
            windows.setdefault(record.job_id, []).append((start or record.uncertain_from or sim.clock.now(), _END))
    return windows


_END = datetime.max.replace(tzinfo=UTC)


def _version_change_costs(sim: Simulation) -> list[Violation]:
    """Invariant 8 (issue 20, item 5): a pause, resume, edit or cancel does not send its chain's look-ahead
    again. It may send the old version's last plan once only while that plan is unproven (a sweep lost or still
    running between its advance and its next timer's write); a pause or cancel starts no chain, so sends no more."""
    found: list[Violation] = []
    for change in sim.version_changes:
        name = f"job-{change.job_index} {change.kind} to v{change.version}"
        if change.resent and not change.plan_open:
            found.append(Violation(8, f"{name} sent {change.resent} older message(s) again; its last plan was sent"))
        if change.kind in ("pause", "cancel") and change.sent > change.resent:
            found.append(Violation(8, f"{name} sent {change.sent - change.resent} message(s) of a new chain"))
    return found


def _chains(sim: Simulation) -> list[Violation]:
    ran: dict[str, dict[datetime, Execution]] = {}
    for item in sim.ledger.items.values():
        if item.state == RunState.SKIPPED and item.last_error == "job paused" and _resumed_after(sim, item):
            continue  # a resume must decide it by the misfire policy, not find it skipped as paused (issue 20)
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


def _resumed_after(sim: Simulation, item: Execution) -> bool:
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


def _gaps(sim: Simulation, record: JobRecord, final: Job, era: Era, ran: dict[datetime, Execution]) -> list[Violation]:
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
            after = f"the next one ({_t(at)}) ran" if at is not None else f"the job moved on to {_t(final.next_run_at)}"
            found.append(
                Violation(
                    5,
                    f"{name}: {_span(missed)} never ran and {after}; no misfire decision covers them "
                    f"(policy {spec.misfire_policy}, grace {sim.config.misfire_grace.total_seconds():g}s)",
                )
            )
        missed = []
    return found


def _misfired(sim: Simulation, job: Job, era: Era, missed: list[datetime]) -> bool:
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


def _run_all_skips(sim: Simulation) -> list[Violation]:
    found: list[Violation] = _catch_up_overlap_skips(sim)
    window = sim.config.catchup_window
    for job_id, decisions in sim.misfires.items():
        for m in decisions:
            if m.policy == "run_all" and m.now - m.scheduled_for < window:
                found.append(
                    Violation(
                        5,
                        f"{job_id} v{m.version} (run_all) skipped {m.skipped} occurrence(s) found late at {_t(m.now)}, "
                        f"all inside the catch-up window",
                    )
                )
    return found


def _catch_up_overlap_skips(sim: Simulation) -> list[Violation]:
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
                why = f"fell due while paused, sent by the resume at {_t(held[1])}"
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


def _chain_alive(sim: Simulation, record: JobRecord, final: Job) -> list[Violation]:
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
    return [Violation(1, f"{name}: its next run {_t(due)} will never be dispatched ({detail})")]


def _bad_input(sim: Simulation) -> list[Violation]:
    found: list[Violation] = []
    for outcome in sim.invalid_outcomes:
        if outcome.changed:
            found.append(Violation(6, f"request '{outcome.name}' ({outcome.outcome}) changed stored state"))
        if outcome.outcome.startswith("error"):
            found.append(Violation(6, f"request '{outcome.name}' failed unexpectedly: {outcome.outcome}"))
        elif outcome.must_reject and outcome.outcome == "accepted":
            found.append(Violation(6, f"request '{outcome.name}' was accepted"))
    return found


def _t(at: datetime | None) -> str:
    return rfc3339(at) if at is not None else "-"


def _span(instants: list[datetime]) -> str:
    if len(instants) == 1:
        return _t(instants[0])
    return f"{len(instants)} occurrences {_t(instants[0])} .. {_t(instants[-1])}"
