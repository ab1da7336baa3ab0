"""Ledger contract: the same tests run against MemoryLedger and DynamoLedger (DynamoDB Local)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from scheduler.core.errors import ClaimRefused, Fenced, LeaseLost
from scheduler.core.model.job import RunState
from scheduler.core.records import Attempt, AttemptEnd, Between, Hold

LEASE = timedelta(seconds=60)


def claim(ledger: Any, dispatch: Any, owner: str, now: Any, take_over: bool = True) -> Any:
    return ledger.claim(dispatch, Attempt(owner, now, now + LEASE, take_over))


def after_one_attempt(ledger: Any, make: Any, end: AttemptEnd, at: Any = None) -> Any:
    """A new occurrence whose first attempt worker w1 claimed at t0 and ended at `at` (t0 if not given) with `end`:
    its dispatch."""
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    ledger.finish(d.key, "w1", held.epoch, make.t0 if at is None else at, end)
    return d


def taken_over(ledger: Any, make: Any) -> tuple[Any, Any, Any]:
    """A new occurrence that w1 claimed at t0 and w2 took over once w1's lease had expired: its dispatch, w1's stale
    claim and w2's."""
    d = make.dispatch()
    old = claim(ledger, d, "w1", make.t0)
    return d, old, claim(ledger, d, "w2", make.t0 + LEASE + timedelta(seconds=1))


def history(execution: Any) -> list[tuple[int, str, Any, str | None]]:
    """History entries as (epoch, state, instant, error); the instant's text form is not part of the contract."""
    return [(h.epoch, h.state.value, h.at, h.error) for h in execution.history]


# -- claim --------------------------------------------------------------------------------------------------


def test_claim_of_a_new_occurrence(ledger, make) -> None:
    d = make.dispatch()

    got = claim(ledger, d, "w1", make.t0)

    assert (got.key, got.job_id, got.tenant, got.scheduled_for) == (d.key, d.job_id, d.tenant, d.scheduled_for)
    assert (got.state, got.epoch, got.attempts, got.owner) == (RunState.RUNNING, 1, 1, "w1")
    assert got.lease_until == make.t0 + LEASE
    assert got.created_at == make.t0
    assert got.next_attempt_at is None and got.finished_at is None
    assert ledger.get(d.key) == got


# -- holds of a flow-control key -----------------------------------------------------------------------------


def test_a_claim_keeps_what_held_the_occurrence_merged_with_the_marks_before_it(ledger, make) -> None:
    d = make.dispatch()
    due = d.fire_at
    ledger.mark_held(d, Hold("slow-api", due, frozenset({"parallelism"})))
    ledger.mark_held(d, Hold("slow-api", due + timedelta(seconds=3), frozenset({"paused"})))  # a later hold of it
    assert ledger.get(d.key) is None  # a mark is no run: the occurrence is still new
    assert ledger.runs(d.job_id, 10, None)[0] == []

    rate = Hold("slow-api", due, frozenset({"rate"}))
    got = ledger.claim(d, Attempt("w1", make.t0, make.t0 + LEASE, held=rate))

    assert got.held == Hold("slow-api", due, frozenset({"parallelism", "paused", "rate"}))
    assert ledger.get(d.key).held == got.held
    assert ledger.runs(d.job_id, 10, None)[0][0].held == got.held


def test_a_mark_after_the_first_claim_changes_nothing_and_an_unheld_claim_has_no_hold(ledger, make) -> None:
    d, unheld = make.dispatch(), make.dispatch()
    claim(ledger, d, "w1", make.t0)
    ledger.mark_held(d, Hold("slow-api", d.fire_at, frozenset({"parallelism"})))

    assert ledger.get(d.key).held is None
    assert claim(ledger, unheld, "w1", make.t0).held is None


def test_get_unknown_is_none(ledger) -> None:
    assert ledger.get("nope:2026-01-05T09:00:00Z") is None


@pytest.mark.parametrize("take_over", [False, True])
def test_claim_is_refused_while_a_live_lease_holds(ledger, make, take_over) -> None:
    d = make.dispatch()
    claim(ledger, d, "w1", make.t0)

    with pytest.raises(ClaimRefused) as refused:
        claim(ledger, d, "w2", make.t0 + timedelta(seconds=59), take_over)

    current = refused.value.current
    assert (current.state, current.owner, current.epoch, current.attempts) == (RunState.RUNNING, "w1", 1, 1)
    assert current.lease_until == make.t0 + LEASE
    assert ledger.get(d.key).owner == "w1"


def test_an_expired_lease_is_taken_over_only_when_asked(ledger, make) -> None:
    d = make.dispatch()
    claim(ledger, d, "w1", make.t0)
    later = make.t0 + LEASE + timedelta(milliseconds=1)

    # at-most-once jobs never take over
    with pytest.raises(ClaimRefused) as refused:
        claim(ledger, d, "w2", later, take_over=False)
    assert refused.value.current.state == RunState.RUNNING

    taken = claim(ledger, d, "w2", later, take_over=True)

    assert (taken.state, taken.owner, taken.epoch, taken.attempts) == (RunState.RUNNING, "w2", 2, 2)
    assert taken.lease_until == later + LEASE
    assert taken.created_at == make.t0


def test_a_lease_is_live_up_to_its_last_instant(ledger, make) -> None:
    d = make.dispatch()
    claim(ledger, d, "w1", make.t0)
    with pytest.raises(ClaimRefused):
        claim(ledger, d, "w2", make.t0 + LEASE, take_over=True)


def test_retry_wait_is_claimable_once_due(ledger, make) -> None:
    retry_at = make.t0 + timedelta(seconds=30)
    failed = AttemptEnd(RunState.RETRY_WAIT, error="HTTP 503", next_attempt_at=retry_at)
    d = after_one_attempt(ledger, make, failed, at=make.t0 + timedelta(seconds=1))

    with pytest.raises(ClaimRefused) as early:
        claim(ledger, d, "w2", retry_at - timedelta(milliseconds=1), take_over=False)
    assert early.value.current.state == RunState.RETRY_WAIT
    assert early.value.current.next_attempt_at == retry_at

    second = claim(ledger, d, "w2", retry_at, take_over=False)
    assert (second.state, second.owner, second.epoch, second.attempts) == (RunState.RUNNING, "w2", 2, 2)
    assert second.next_attempt_at is None
    assert second.last_error == "HTTP 503"


@pytest.mark.parametrize("state", [RunState.SUCCEEDED, RunState.DEAD, RunState.CANCELLED, RunState.RECONCILING])
def test_a_finished_occurrence_is_never_claimed_again(ledger, make, state) -> None:
    d = after_one_attempt(ledger, make, AttemptEnd(state), at=make.t0 + timedelta(seconds=1))
    with pytest.raises(ClaimRefused) as refused:
        claim(ledger, d, "w2", make.t0 + timedelta(days=1), take_over=True)
    assert refused.value.current.state == state


# -- a pause skip, reopened by the resumed chain ------------------------------------------------------------

#: How the worker records an occurrence it claimed while its job was paused at version 2 (guards.skip_reason).
PAUSE_SKIP = AttemptEnd(RunState.SKIPPED, error="job paused", refund_attempt=True, paused_version=2)


def paused_skip(ledger: Any, make: Any) -> tuple[Any, Any]:
    """An occurrence dispatched at version 1 whose first attempt w1 failed (retry due at once), and whose retry w2
    claimed and skipped because the job was paused at version 2, with its completion event: its dispatch and the
    item as the skip left it."""
    d = after_one_attempt(ledger, make, AttemptEnd(RunState.RETRY_WAIT, error="HTTP 429", next_attempt_at=make.t0))
    retry = claim(ledger, d, "w2", make.t0 + timedelta(seconds=5))
    return d, ledger.finish(d.key, "w2", retry.epoch, make.t0 + timedelta(seconds=5), PAUSE_SKIP)


def test_a_pause_skip_keeps_the_paused_version_and_gives_its_attempt_back(ledger, make) -> None:
    _, skipped = paused_skip(ledger, make)

    assert (skipped.state, skipped.paused_version, skipped.epoch, skipped.attempts) == (RunState.SKIPPED, 2, 2, 1)
    assert skipped.finished_at == make.t0 + timedelta(seconds=5)
    assert [e.state for e in skipped.outbox] == [RunState.SKIPPED]


def test_a_pause_skip_is_reopened_by_a_later_versions_dispatch_and_then_runs_once(ledger, make) -> None:
    d, skipped = paused_skip(ledger, make)
    resumed = replace(d, version=3)  # the resumed chain's dispatch of the same occurrence
    now = make.t0 + timedelta(minutes=3)

    reopened = claim(ledger, resumed, "w3", now, take_over=False)

    # A claim as any other: the next epoch (the fencing token), the next attempt, a lease; nothing of the skip's end
    assert (reopened.state, reopened.owner, reopened.epoch, reopened.attempts) == (RunState.RUNNING, "w3", 3, 2)
    assert reopened.lease_until == now + LEASE
    assert reopened.finished_at is None and reopened.paused_version is None
    # The skip's history and its outbox entry (not yet published) are kept
    assert history(reopened) == history(skipped)
    assert reopened.outbox == skipped.outbox
    assert ledger.get(d.key) == reopened
    # Reopened once: a second copy of the resumed chain's message finds it running
    with pytest.raises(ClaimRefused) as running:
        claim(ledger, resumed, "w4", now + timedelta(seconds=1), take_over=False)
    assert running.value.current.state == RunState.RUNNING

    done = ledger.finish(d.key, "w3", reopened.epoch, now, AttemptEnd(RunState.SUCCEEDED, result="HTTP 200"))

    # Its outcome follows the skip: two completion events with their own ids, and never reopened again
    assert (done.state, done.finished_at, done.paused_version) == (RunState.SUCCEEDED, now, None)
    assert [(e.state, e.epoch) for e in done.outbox] == [(RunState.SKIPPED, 2), (RunState.SUCCEEDED, 3)]
    assert [h.state for h in done.history] == [RunState.RETRY_WAIT, RunState.SKIPPED, RunState.SUCCEEDED]
    with pytest.raises(ClaimRefused) as finished:
        claim(ledger, replace(d, version=4), "w5", now + timedelta(days=1))
    assert finished.value.current.state == RunState.SUCCEEDED


@pytest.mark.parametrize("version", [1, 2])
def test_a_pause_skip_is_not_reopened_at_or_below_the_paused_version(ledger, make, version) -> None:
    # The message that was skipped, delivered again, or any other dispatch from before the resume
    d, skipped = paused_skip(ledger, make)

    with pytest.raises(ClaimRefused) as refused:
        claim(ledger, replace(d, version=version), "w3", make.t0 + timedelta(days=1))

    assert refused.value.current.state == RunState.SKIPPED
    assert ledger.get(d.key) == skipped


@pytest.mark.parametrize(
    "end",
    [
        AttemptEnd(RunState.CANCELLED, error="job cancelled"),
        AttemptEnd(RunState.SKIPPED, error="overlap: h is still running", overlapped="h"),
        AttemptEnd(RunState.SKIPPED, error="superseded: the schedule changed in version 2"),
    ],
    ids=["cancelled", "overlap-skipped", "superseded"],
)
def test_no_other_skip_is_ever_reopened(ledger, make, end) -> None:
    d = after_one_attempt(ledger, make, end)
    before = ledger.get(d.key)
    assert before.paused_version is None

    with pytest.raises(ClaimRefused) as refused:
        claim(ledger, replace(d, version=99), "w2", make.t0 + timedelta(days=1))

    assert refused.value.current.state == end.state
    assert ledger.get(d.key) == before


# -- heartbeat and finish (fencing) -------------------------------------------------------------------------


def test_heartbeat_extends_the_lease_of_the_holder(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    ledger.heartbeat(d.key, "w1", held.epoch, make.t0 + timedelta(minutes=5))
    assert ledger.get(d.key).lease_until == make.t0 + timedelta(minutes=5)
    with pytest.raises(ClaimRefused):
        claim(ledger, d, "w2", make.t0 + timedelta(minutes=2))


def test_heartbeat_of_a_stale_or_foreign_holder_is_lease_lost(ledger, make) -> None:
    d, old, new = taken_over(ledger, make)
    before = ledger.get(d.key)

    with pytest.raises(LeaseLost):
        ledger.heartbeat(d.key, "w1", old.epoch, make.t0 + timedelta(hours=1))  # stale epoch
    with pytest.raises(LeaseLost):
        ledger.heartbeat(d.key, "w1", new.epoch, make.t0 + timedelta(hours=1))  # right epoch, wrong owner
    with pytest.raises(LeaseLost):
        ledger.heartbeat("unknown:2026-01-05T09:00:00Z", "w1", 1, make.t0)

    assert ledger.get(d.key) == before


def test_heartbeat_after_finishing_is_lease_lost(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    ledger.finish(d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.SUCCEEDED))
    with pytest.raises(LeaseLost):
        ledger.heartbeat(d.key, "w1", held.epoch, make.t0 + timedelta(minutes=1))


def test_finish_of_a_stale_or_foreign_holder_is_fenced_and_changes_nothing(ledger, make) -> None:
    d, old, new = taken_over(ledger, make)
    before = ledger.get(d.key)

    with pytest.raises(Fenced):
        ledger.finish(
            d.key, "w1", old.epoch, make.t0 + timedelta(minutes=2), AttemptEnd(RunState.SUCCEEDED, result="late")
        )
    with pytest.raises(Fenced):
        ledger.finish(d.key, "w1", new.epoch, make.t0 + timedelta(minutes=2), AttemptEnd(RunState.SUCCEEDED))
    with pytest.raises(Fenced):
        ledger.finish("unknown:2026-01-05T09:00:00Z", "w1", 1, make.t0, AttemptEnd(RunState.SUCCEEDED))

    assert ledger.get(d.key) == before


def test_finish_twice_is_fenced(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    ledger.finish(d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.SUCCEEDED, result="HTTP 200"))
    with pytest.raises(Fenced):
        ledger.finish(d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.DEAD, error="again"))
    assert ledger.get(d.key).state == RunState.SUCCEEDED


def test_finish_records_the_outcome_and_appends_history(ledger, make) -> None:
    d = make.dispatch()
    t1, t2 = make.t0 + timedelta(seconds=1), make.t0 + timedelta(seconds=40)
    first = claim(ledger, d, "w1", make.t0)
    ledger.finish(d.key, "w1", first.epoch, t1, AttemptEnd(RunState.RETRY_WAIT, error="HTTP 503", next_attempt_at=t1))

    waiting = ledger.get(d.key)
    assert (waiting.state, waiting.last_error, waiting.next_attempt_at) == (RunState.RETRY_WAIT, "HTTP 503", t1)
    assert waiting.lease_until is None and waiting.finished_at is None
    assert waiting.updated_at == t1

    second = claim(ledger, d, "w2", t1 + timedelta(seconds=1))
    ledger.finish(d.key, "w2", second.epoch, t2, AttemptEnd(RunState.SUCCEEDED, result="HTTP 200"))

    done = ledger.get(d.key)
    assert (done.state, done.result, done.attempts, done.epoch) == (RunState.SUCCEEDED, "HTTP 200", 2, 2)
    assert done.last_error == "HTTP 503"  # the last error is kept for the record
    assert done.finished_at == t2 and done.updated_at == t2
    assert done.lease_until is None and done.next_attempt_at is None
    assert history(done) == [(1, "RETRY_WAIT", t1, "HTTP 503"), (2, "SUCCEEDED", t2, None)]


# -- void_copies (a one-shot job's message carries a copy of the job: Dispatch.job_copy) --------------------


def on_copy(ledger: Any, dispatch: Any, owner: str, now: Any) -> Any:
    return ledger.claim(dispatch, Attempt(owner, now, now + LEASE, on_copy=True))


def test_a_claim_on_a_copy_is_refused_once_the_copies_are_void_and_a_claim_after_a_read_is_not(ledger, make) -> None:
    d = make.dispatch()
    ledger.void_copies(d.key, make.t0)
    ledger.void_copies(d.key, make.t0 + timedelta(seconds=1))  # idempotent

    # The mark alone is not an execution: the occurrence is still new
    assert ledger.get(d.key) is None
    assert ledger.runs(d.job_id, 10, None) == ([], None)
    with pytest.raises(ClaimRefused) as refused:
        on_copy(ledger, d, "w1", make.t0)
    assert refused.value.void_copy and refused.value.current is None
    assert ledger.get(d.key) is None

    got = claim(ledger, d, "w1", make.t0)  # the worker read the job: its claim is a first claim
    assert (got.state, got.epoch, got.attempts, got.owner) == (RunState.RUNNING, 1, 1, "w1")
    assert ledger.get(d.key) == got
    with pytest.raises(ClaimRefused) as again:
        on_copy(ledger, d, "w2", make.t0 + LEASE + timedelta(seconds=1))  # even once the lease is over
    assert again.value.void_copy and again.value.current.owner == "w1"


def test_a_claim_on_a_copy_that_no_change_voided_is_an_ordinary_claim(ledger, make) -> None:
    d = make.dispatch()
    got = on_copy(ledger, d, "w1", make.t0)
    assert (got.state, got.epoch, got.owner) == (RunState.RUNNING, 1, "w1")
    with pytest.raises(ClaimRefused) as refused:
        on_copy(ledger, d, "w2", make.t0 + timedelta(seconds=1))
    assert not refused.value.void_copy and refused.value.current.owner == "w1"
    # Voided while it runs (a cancel after the claim): its holder still finishes it
    ledger.void_copies(d.key, make.t0 + timedelta(seconds=2))
    done = ledger.finish(d.key, "w1", got.epoch, make.t0 + timedelta(seconds=3), AttemptEnd(RunState.SUCCEEDED))
    assert done.state == RunState.SUCCEEDED and ledger.get(d.key) == done


def test_an_occurrence_whose_copies_are_void_can_still_be_recorded_unclaimed(ledger, make) -> None:
    d = make.dispatch()
    ledger.void_copies(d.key, make.t0)
    assert ledger.record_unclaimed(d, RunState.CANCELLED, make.t0, "job cancelled") is True
    assert ledger.get(d.key).state == RunState.CANCELLED
    assert ledger.record_unclaimed(d, RunState.CANCELLED, make.t0, "again") is False


# -- record_unclaimed, expire_to, mark_dead_lettered --------------------------------------------------------


def test_record_unclaimed_is_create_only(ledger, make) -> None:
    d = make.dispatch()
    assert ledger.record_unclaimed(d, RunState.SKIPPED, make.t0, "job paused") is True

    item = ledger.get(d.key)
    assert (item.state, item.epoch, item.attempts, item.last_error) == (RunState.SKIPPED, 0, 0, "job paused")
    assert (item.job_id, item.tenant, item.scheduled_for) == (d.job_id, d.tenant, d.scheduled_for)
    assert item.created_at == item.finished_at == make.t0
    assert history(item) == [(0, "SKIPPED", make.t0, "job paused")]

    assert ledger.record_unclaimed(d, RunState.CANCELLED, make.t0 + timedelta(seconds=5), "again") is False
    assert ledger.get(d.key) == item

    running = make.dispatch()
    claim(ledger, running, "w1", make.t0)
    assert ledger.record_unclaimed(running, RunState.CANCELLED, make.t0, "job gone") is False
    assert ledger.get(running.key).state == RunState.RUNNING
    # and an unclaimed terminal item cannot be claimed
    with pytest.raises(ClaimRefused):
        claim(ledger, d, "w1", make.t0 + timedelta(days=1))


def test_expire_to_moves_an_expired_running_item(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    now = make.t0 + LEASE + timedelta(seconds=1)

    assert ledger.expire_to(d.key, held.epoch, RunState.RECONCILING, now, "worker lost") is True

    item = ledger.get(d.key)
    assert (item.state, item.last_error, item.epoch) == (RunState.RECONCILING, "worker lost", 1)
    assert item.finished_at == now and item.updated_at == now
    assert history(item) == [(1, "RECONCILING", now, "worker lost")]
    assert item.lease_until is None


def test_expire_to_refuses_everything_else(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    expired = make.t0 + LEASE + timedelta(seconds=1)

    assert ledger.expire_to(d.key, held.epoch, RunState.RECONCILING, make.t0 + LEASE, "live") is False
    assert ledger.expire_to(d.key, held.epoch + 1, RunState.RECONCILING, expired, "wrong epoch") is False
    assert ledger.expire_to("unknown:2026-01-05T09:00:00Z", 1, RunState.RECONCILING, expired, "none") is False
    assert ledger.get(d.key).state == RunState.RUNNING

    ledger.finish(d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.SUCCEEDED))
    assert ledger.expire_to(d.key, held.epoch, RunState.RECONCILING, expired, "done") is False
    assert ledger.get(d.key).state == RunState.SUCCEEDED


def test_mark_dead_lettered(ledger, make) -> None:
    d = after_one_attempt(ledger, make, AttemptEnd(RunState.DEAD, error="HTTP 400"))
    assert ledger.get(d.key).dead_lettered is False

    ledger.mark_dead_lettered(d.key)
    ledger.mark_dead_lettered(d.key)

    item = ledger.get(d.key)
    assert item.dead_lettered is True and item.state == RunState.DEAD


def test_mark_dead_lettered_of_an_unknown_key_is_a_no_op(ledger) -> None:
    ledger.mark_dead_lettered("unknown:2026-01-05T09:00:00Z")
    assert ledger.get("unknown:2026-01-05T09:00:00Z") is None


# -- runs ---------------------------------------------------------------------------------------------------


def _five_runs(ledger: Any, make: Any) -> tuple[str, list[Any]]:
    job_id = make.new_id()
    made = []
    for i in range(5):
        d = make.dispatch(job_id, make.t0 + timedelta(minutes=i))
        if i % 2:
            ledger.record_unclaimed(d, RunState.SKIPPED, make.t0, "paused")
        else:
            claim(ledger, d, "w1", make.t0)
        made.append(d)
    other = make.dispatch(make.new_id(), make.t0 + timedelta(minutes=2))
    claim(ledger, other, "w1", make.t0)
    return job_id, made


def test_runs_newest_first_with_cursor_pagination(ledger, make) -> None:
    job_id, made = _five_runs(ledger, make)
    newest_first = [d.key for d in reversed(made)]

    seen: list[list[str]] = []
    cursor = None
    for _ in range(10):
        page, cursor = ledger.runs(job_id, 2, cursor)
        seen.append([e.key for e in page])
        if cursor is None:
            break

    assert seen == [newest_first[0:2], newest_first[2:4], newest_first[4:5]]
    whole, end = ledger.runs(job_id, 10, None)
    assert [e.key for e in whole] == newest_first and end is None
    assert [e.state for e in whole] == [RunState.RUNNING, RunState.SKIPPED] * 2 + [RunState.RUNNING]
    assert ledger.runs("no-such-job", 10, None) == ([], None)


def test_runs_has_no_cursor_when_the_page_ends_at_the_oldest_run(ledger, make) -> None:
    job_id, _ = _five_runs(ledger, make)
    page, cursor = ledger.runs(job_id, 5, None)
    assert len(page) == 5
    assert cursor is None


@pytest.mark.parametrize("minute", [-1, 1, 3, 5])
def test_runs_merge_the_occurrence_claimed_outside_the_index_at_its_place(ledger, make, minute) -> None:
    # Given five runs in the index, and one occurrence of the same job claimed outside it (a one-shot's own)
    job_id, made = _five_runs(ledger, make)
    own = make.dispatch(job_id, make.t0 + timedelta(minutes=minute, seconds=30))
    held = ledger.claim(own, Attempt("w1", make.t0, make.t0 + LEASE, True, indexed=False))
    assert (held.job_id, held.scheduled_for) == (own.job_id, own.scheduled_for)
    ledger.finish(own.key, "w1", held.epoch, make.t0 + timedelta(seconds=1), AttemptEnd(RunState.SUCCEEDED))
    expected = [d.key for d in sorted([*made, own], key=lambda d: d.scheduled_for, reverse=True)]

    # When the history is read page by page, naming that occurrence
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page, cursor = ledger.runs(job_id, 2, cursor, own.key)
        seen += [e.key for e in page]
        if cursor is None:
            break

    # Then it appears once, at its place, and the finished item reads as any other
    assert seen == expected
    assert ledger.get(own.key).job_id == job_id and ledger.get(own.key).state == RunState.SUCCEEDED


def test_runs_before_and_after_an_instant_keep_only_the_runs_strictly_on_that_side(ledger, make) -> None:
    # Given five runs a minute apart (t0 .. t0+4m)
    job_id, made = _five_runs(ledger, make)
    newest_first = [d.key for d in reversed(made)]
    at = made[2].scheduled_for

    # When the history is read before, after and between instants, page by page
    def read(limit: int, **bounds: Any) -> list[str]:
        seen: list[str] = []
        cursor = None
        for _ in range(10):
            page, cursor = ledger.runs(job_id, limit, cursor, within=Between(**bounds))
            seen += [e.key for e in page]
            if cursor is None:
                break
        return seen

    # Then an instant's own run is on neither side, and each side reads newest first
    assert read(1, before=at) == newest_first[3:] == read(10, before=at)
    assert read(1, after=at) == newest_first[:2] == read(10, after=at)
    assert read(2, after=made[0].scheduled_for, before=made[4].scheduled_for) == newest_first[1:4]
    assert read(2, after=at, before=at) == [] == read(2, before=made[0].scheduled_for)
    assert read(2, after=made[2].scheduled_for, before=made[3].scheduled_for) == []


def test_runs_read_each_run_as_it_is_now(ledger, make) -> None:
    # Given a run that finished after it was claimed (the index entry was written by the claim alone)
    job_id = make.new_id()
    d = make.dispatch(job_id, make.t0)
    held = claim(ledger, d, "w1", make.t0)
    ledger.finish(d.key, "w1", held.epoch, make.t0 + timedelta(seconds=1), AttemptEnd(RunState.SUCCEEDED, result="ok"))

    # When the history is read
    [run], _ = ledger.runs(job_id, 5, None)

    # Then it reads the finished run, not the claim
    assert (run.state, run.epoch, run.finished_at) == (RunState.SUCCEEDED, 1, make.t0 + timedelta(seconds=1))
    assert run == ledger.get(d.key)


# -- resolve ------------------------------------------------------------------------------------------------


def _reconciling(ledger: Any, make: Any) -> Any:
    timed_out = AttemptEnd(RunState.RECONCILING, error="timeout")
    return after_one_attempt(ledger, make, timed_out, at=make.t0 + timedelta(seconds=5))


def test_resolve_to_succeeded(ledger, make) -> None:
    d = _reconciling(ledger, make)
    now = make.t0 + timedelta(hours=1)

    resolved = ledger.resolve(d.key, RunState.SUCCEEDED, now, "checked downstream")

    assert resolved.state == RunState.SUCCEEDED
    assert resolved.finished_at == now and resolved.updated_at == now
    assert history(resolved)[-1] == (1, "SUCCEEDED", now, "checked downstream")
    assert ledger.get(d.key) == resolved
    with pytest.raises(ClaimRefused):
        claim(ledger, d, "w2", now + timedelta(seconds=1))


def test_resolve_to_retry_makes_it_claimable_now(ledger, make) -> None:
    d = _reconciling(ledger, make)
    now = make.t0 + timedelta(hours=1)

    resolved = ledger.resolve(d.key, RunState.RETRY_WAIT, now, "run it again")

    assert resolved.state == RunState.RETRY_WAIT
    assert resolved.next_attempt_at == now
    assert history(resolved)[-1] == (1, "RETRY_WAIT", now, "run it again")
    again = claim(ledger, d, "w2", now, take_over=False)
    assert (again.state, again.epoch, again.attempts) == (RunState.RUNNING, 2, 2)


def test_resolve_leaves_no_stale_fields(ledger, make) -> None:
    done = ledger.resolve(_reconciling(ledger, make).key, RunState.SUCCEEDED, make.t0 + timedelta(hours=1), "ok")
    retry = ledger.resolve(_reconciling(ledger, make).key, RunState.RETRY_WAIT, make.t0 + timedelta(hours=1), "go")
    assert done.next_attempt_at is None
    assert retry.finished_at is None


def test_resolve_only_from_reconciling(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    with pytest.raises(ClaimRefused) as running:
        ledger.resolve(d.key, RunState.SUCCEEDED, make.t0, "no")
    assert running.value.current.state == RunState.RUNNING

    ledger.finish(d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.SUCCEEDED))
    with pytest.raises(ClaimRefused) as succeeded:
        ledger.resolve(d.key, RunState.RETRY_WAIT, make.t0, "no")
    assert succeeded.value.current.state == RunState.SUCCEEDED

    with pytest.raises(ClaimRefused) as unknown:
        ledger.resolve("unknown:2026-01-05T09:00:00Z", RunState.SUCCEEDED, make.t0, "no")
    assert unknown.value.current is None
    assert ledger.get(d.key).state == RunState.SUCCEEDED


# -- refund_attempt and revive ------------------------------------------------------------------------------


def test_finish_with_refund_gives_the_attempt_back(ledger, make) -> None:
    # an overlap buffer parks the occurrence without running it: its attempt does not count
    wait_until = make.t0 + timedelta(seconds=70)
    parks = AttemptEnd(RunState.RETRY_WAIT, error="buffered behind x", next_attempt_at=wait_until, refund_attempt=True)
    d = after_one_attempt(ledger, make, parks)

    parked = ledger.get(d.key)
    assert (parked.state, parked.attempts, parked.epoch) == (RunState.RETRY_WAIT, 0, 1)
    assert parked.next_attempt_at == wait_until
    again = claim(ledger, d, "w2", wait_until, take_over=False)
    assert (again.attempts, again.epoch) == (1, 2)


def test_an_overlap_buffer_is_typed_and_a_claim_clears_it(ledger, make) -> None:
    # the overlap policy reads `buffered` / `overlap_skipped` from the item, never from its error text
    d = after_one_attempt(ledger, make, AttemptEnd.buffered("j0:2026-01-05T08:59:00Z", make.t0))
    parked = ledger.get(d.key)
    assert parked.buffered and parked.overlapped == "j0:2026-01-05T08:59:00Z" and not parked.overlap_skipped
    assert parked.last_error == "buffered behind j0:2026-01-05T08:59:00Z"

    again = claim(ledger, d, "w2", make.t0, take_over=False)
    assert again.overlapped is None and not again.buffered
    failure = AttemptEnd(RunState.RETRY_WAIT, error="attempt 1: retryable: HTTP 503", next_attempt_at=make.t0)
    ledger.finish(d.key, "w2", again.epoch, make.t0, failure)
    failed = ledger.get(d.key)
    assert failed.state == RunState.RETRY_WAIT and not failed.buffered and failed.overlapped is None


def test_an_overlap_skip_is_typed(ledger, make) -> None:
    skipped = AttemptEnd(RunState.SKIPPED, error="overlap: h is still running", overlapped="h")
    d = after_one_attempt(ledger, make, skipped)
    assert ledger.get(d.key).overlap_skipped
    other = make.dispatch(d.job_id, make.t0 + timedelta(minutes=1))
    held = claim(ledger, other, "w1", make.t0)
    ledger.finish(other.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.SKIPPED, error="overlap: by hand"))
    assert not ledger.get(other.key).overlap_skipped


def test_finish_with_refund_by_a_stale_holder_is_fenced(ledger, make) -> None:
    d, old, _ = taken_over(ledger, make)
    with pytest.raises(Fenced):
        ledger.finish(
            d.key,
            "w1",
            old.epoch,
            make.t0,
            AttemptEnd(RunState.RETRY_WAIT, next_attempt_at=make.t0, refund_attempt=True),
        )
    assert ledger.get(d.key).attempts == 2


def _dead(ledger: Any, make: Any) -> Any:
    d = after_one_attempt(ledger, make, AttemptEnd(RunState.DEAD, error="HTTP 400"), at=make.t0 + timedelta(seconds=1))
    ledger.mark_dead_lettered(d.key)
    return d


def test_revive_makes_a_dead_occurrence_claimable_with_a_fresh_budget(ledger, make) -> None:
    d = _dead(ledger, make)
    now = make.t0 + timedelta(hours=2)

    assert ledger.revive(d.key, now, "redriven") is True

    item = ledger.get(d.key)
    assert (item.state, item.attempts, item.epoch) == (RunState.RETRY_WAIT, 0, 1)
    assert item.next_attempt_at == now and item.updated_at == now
    assert item.dead_lettered is False and item.finished_at is None
    assert history(item)[-1] == (1, "RETRY_WAIT", now, "redriven")
    again = claim(ledger, d, "w2", now, take_over=False)
    assert (again.state, again.attempts, again.epoch) == (RunState.RUNNING, 1, 2)


def test_revive_only_from_dead(ledger, make) -> None:
    d = _dead(ledger, make)
    assert ledger.revive(d.key, make.t0 + timedelta(hours=2), "first") is True
    assert ledger.revive(d.key, make.t0 + timedelta(hours=3), "twice") is False
    assert len(ledger.get(d.key).history) == 2

    ok = make.dispatch()
    held = claim(ledger, ok, "w1", make.t0)
    assert ledger.revive(ok.key, make.t0, "running") is False
    ledger.finish(ok.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.SUCCEEDED))
    before = ledger.get(ok.key)
    assert ledger.revive(ok.key, make.t0, "succeeded") is False
    assert ledger.get(ok.key) == before
    assert ledger.revive("unknown:2026-01-05T09:00:00Z", make.t0, "none") is False
    assert ledger.get("unknown:2026-01-05T09:00:00Z") is None
