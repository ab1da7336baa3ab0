"""The checker: docs/design.md §6, judged after each run from the end state and what was recorded on the
way (the sink's calls, the ledger writes as they were accepted, the first send of every key, the client's
acknowledged calls). How "fell due" is decided for recurring jobs: `scheduler_sim.recurrence`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from scheduler.core.execution.events import event_id
from scheduler.core.jobs.chain import counts_as_active
from scheduler.core.model.job import BackfillState, JobState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.model.timefmt import from_ms, to_ms
from scheduler.core.sweep.backfill import occurrences_in
from scheduler_sim.invariants import INVARIANTS, Violation, instant, span
from scheduler_sim.recurrence import chains, run_all_skips

if TYPE_CHECKING:
    from scheduler_sim.observed import Observed

#: Added to the hold time: a worker's poll interval (up to 1.5 s) and the clock a few steps take (sub-second
#: early waits) before one receives a message that came back.
RESTART_SLACK_SECONDS = 10.0

#: At most this many violations of one invariant are reported per run.
MAX_PER_INVARIANT = 5


def check(sim: Observed) -> list[Violation]:
    """All invariants, in order. Returns the violations found (empty when the run is correct)."""
    found: list[Violation] = []
    found += [Violation(0, error) for error in sim.errors]
    found += _terminal(sim)
    found += _effects(sim)
    found += [Violation(3, message) for message in sim.stale_writes]
    found += _cancellations(sim)
    found += chains(sim)
    found += run_all_skips(sim)
    found += _bad_input(sim)
    found += _quota(sim)
    found += _version_change_costs(sim)
    found += [Violation(9, message) for message in sim.over_limit]
    found += [Violation(15, message) for message in sim.over_parallelism]
    found += _restarts(sim)
    found += _completion_events(sim)
    found += _backfills(sim)
    found += _dispatch_budgets(sim)
    found += [Violation(14, message) for message in sim.watermark_passed]
    counts: dict[int, int] = {}
    kept: list[Violation] = []
    for violation in found:
        counts[violation.invariant] = counts.get(violation.invariant, 0) + 1
        if counts[violation.invariant] <= MAX_PER_INVARIANT:
            kept.append(violation)
    return kept


def _quota(sim: Observed) -> list[Violation]:
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


def _backlogged(sim: Observed, deadline: datetime, again: datetime) -> bool:
    """Whether the queue had more visible messages than the workers took, from the restart bound (less the poll's
    slack) until the message was received: every receive in that span came back full. A receive that came back
    short took every visible message, so a message visible then would have been received."""
    since = deadline - timedelta(seconds=RESTART_SLACK_SECONDS)
    polls = [full for at, full in sim.polls if since <= at < again]
    return bool(polls) and all(polls)


def _completion_events(sim: Observed) -> list[Violation]:
    """Invariant 11 (the outbox): the terminal write and its outbox entry are one fact, and the worker's publish or
    a sweep's drain announces it at least once. Judged on each occurrence's final outcome (event id: key, epoch,
    state) once the queue and the outbox were drained."""
    found: list[Violation] = []
    published = sim.event_ids()
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
    for entry in sim.published:
        if entry.event.job_id in quiet:
            found.append(
                Violation(11, f"{entry.actor} published {entry.event.event_id}; its job has completion events off")
            )
    return found


def _backfills(sim: Observed) -> list[Violation]:
    """Invariant 12: every backfill the store holds (acknowledged or not: a client that lost the answer still made
    it) of a job neither cancelled nor paused at the end has sent its whole range, and each occurrence of the range
    has a terminal ledger item under its normal key (one accepted effect at most: invariant 2 judges every key)."""
    found: list[Violation] = []
    for backfill in sim.backfills.items.values():
        job = sim.jobs.jobs.get(backfill.job_id)
        if job is None or job.state in (JobState.CANCELLED, JobState.PAUSED):
            continue  # a cancel stops its waves; a pause holds them until the resume
        covered = f"[{instant(backfill.range_from)}, {instant(backfill.range_to)})"
        name = f"backfill {backfill.backfill_id} of {backfill.job_id} {covered}"
        if backfill.state != BackfillState.COMPLETED:
            found.append(
                Violation(12, f"{name} is {backfill.state.value}: {backfill.dispatched}/{backfill.total} sent")
            )
        instants = occurrences_in(backfill.plan, None, backfill.range_from, backfill.range_to, backfill.total + 1)
        missing = [at for at in instants if not _terminal_item(sim, occurrence_key(backfill.job_id, at))]
        if missing:
            found.append(Violation(12, f"{name}: {span(missing)} never reached a terminal state"))
    return found


def _dispatch_budgets(sim: Observed) -> list[Violation]:
    """Invariant 13: every dispatch a tenant admission let through carries its release instant (its fire time, or
    the later instant its budget gave it), booked in one window of the tenant's calendar; a window holds at most the
    budget's capacity, so no window sees more releases than that (what bounds a tenant's burst, `fairness.py`)."""
    found: list[Violation] = []
    if sim.fairness is None:
        return found
    for tenant, releases in sorted(sim.releases.items()):
        budget = sim.fairness.of(tenant)
        windows: dict[int, list[str]] = {}
        for release, key in releases:
            windows.setdefault(to_ms(release) // budget.window_ms, []).append(key)
        for window, keys in sorted(windows.items()):
            if len(keys) > budget.capacity:
                start = from_ms(window * budget.window_ms)
                found.append(
                    Violation(
                        13,
                        f"tenant {tenant}: {len(keys)} releases in the {budget.window_ms} ms window from "
                        f"{instant(start)} (capacity {budget.capacity}): {', '.join(keys)}",
                    )
                )
    return found


def _terminal_item(sim: Observed, key: str) -> bool:
    item = sim.ledger.items.get(key)
    return item is not None and item.state.terminal


def _restarts(sim: Observed) -> list[Violation]:
    """Invariant 10 (bounded recovery): every message a worker held when it died, its batch's hold applied, is
    received again within the hold time (the lease, for the occurrence it had claimed) plus a poll's slack of the
    death - not after the queue's visibility timeout. Time the fault model injected meanwhile (an outage, a
    frozen or paused actor, the jump into quiescence) is added."""
    found: list[Violation] = []
    hold = sim.hold_config.hold_seconds
    # A message whose occurrence the dead worker had claimed is back after the hold, or after its last renewal's
    # extension to the lease (and its margin), whichever it had last; it then waits for the lease to end.
    leased = max(hold, sim.execute_config.lease.total_seconds() + sim.execute_config.lease_margin_seconds)
    for abandoned in sim.abandoned:
        started = abandoned.started or (False,) * len(abandoned.message_ids)
        for message_id, key, claimed in zip(abandoned.message_ids, abandoned.keys, started, strict=True):
            deadline = abandoned.at + timedelta(seconds=(leased if claimed else hold) + RESTART_SLACK_SECONDS)
            for start, seconds in sorted(sim.stalls):
                if abandoned.at <= start <= deadline:
                    deadline += timedelta(seconds=seconds)
            again = next((t for t in sim.receives.get(message_id, []) if t >= abandoned.at), None)
            if again is not None and again > deadline and _backlogged(sim, deadline, again):
                continue  # visible in time, but every receive meanwhile came back full: the workers were behind
            if again is None or again > deadline:
                when = f"at {instant(again)}" if again else "never"
                found.append(
                    Violation(
                        10,
                        f"{key} ({message_id}), held by {abandoned.actor} when it died at {instant(abandoned.at)}, was "
                        f"received again {when}; the bound was {instant(deadline)} "
                        f"({'its lease' if claimed else f'the {hold}s hold'})",
                    )
                )
    return found


def _terminal(sim: Observed) -> list[Violation]:
    found: list[Violation] = []
    items = sim.ledger.items
    for key, item in items.items():
        if not item.state.terminal:
            found.append(
                Violation(
                    1,
                    f"{key} is still {item.state.value} after quiescence (epoch {item.epoch}, "
                    f"attempts {item.attempts}, owner {item.owner}, lease until {instant(item.lease_until)})",
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
                    Violation(1, f"trigger of job-{record.index} acknowledged at {instant(acked)}: {key} never ran")
                )
    return found


def _effects(sim: Observed) -> list[Violation]:
    found: list[Violation] = []
    for (job_id, scheduled_for), effects in sim.effects.items():
        if len(effects) > 1:
            keys = ", ".join(f"{e.key} (token {e.token}, {e.actor} at {instant(e.at)})" for e in effects)
            found.append(
                Violation(2, f"occurrence {job_id} @ {instant(scheduled_for)} took effect {len(effects)} times: {keys}")
            )
    acted: dict[tuple[str, datetime], int] = {}
    for call in sim.calls:
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
                    f"at-most-once occurrence {job_id} @ {instant(scheduled_for)} reached the target {times} times "
                    "(a target that cannot deduplicate would have acted twice)",
                )
            )
    return found


def _cancellations(sim: Observed) -> list[Violation]:
    cancelled = {r.job_id: r.cancel_acked for r in sim.records if r.job_id and r.cancel_acked}
    found: list[Violation] = []
    for call in sim.calls:
        acked = cancelled.get(call.job_id)
        if acked is None or call.at <= acked:
            continue
        # "Already running" = its worker had checked the job before the cancellation was acknowledged.
        if call.job_read_at is not None and call.job_read_at >= acked:
            found.append(
                Violation(
                    4,
                    f"{call.actor} called the target for {call.key} at {instant(call.at)}, after reading the job at "
                    f"{instant(call.job_read_at)}; its cancellation was acknowledged at {instant(acked)}",
                )
            )
    return found


def _pause_windows(sim: Observed) -> dict[str, list[tuple[datetime, datetime]]]:
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


def _version_change_costs(sim: Observed) -> list[Violation]:
    """Invariant 8: a pause, resume, edit or cancel does not send its chain's look-ahead
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


def _bad_input(sim: Observed) -> list[Violation]:
    found: list[Violation] = []
    for outcome in sim.invalid_outcomes:
        if outcome.changed:
            found.append(Violation(6, f"request '{outcome.name}' ({outcome.outcome}) changed stored state"))
        if outcome.outcome.startswith("error"):
            found.append(Violation(6, f"request '{outcome.name}' failed unexpectedly: {outcome.outcome}"))
        elif outcome.must_reject and outcome.outcome == "accepted":
            found.append(Violation(6, f"request '{outcome.name}' was accepted"))
    return found


__all__ = ["INVARIANTS", "Violation", "check"]
