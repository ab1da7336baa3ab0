"""Outbox contract of the Ledger (memory and DynamoDB Local): every terminal write appends an outbox entry in the
same write; the sparse index lists what is pending; clearing is conditional on exactly what was published."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from scheduler.core.execution.events import outcome_events
from scheduler.core.model.job import RunState
from scheduler.core.records import Attempt, AttemptEnd

LEASE = timedelta(seconds=60)


def claim(ledger: Any, dispatch: Any, owner: str, now: Any, take_over: bool = True) -> Any:
    return ledger.claim(dispatch, Attempt(owner, now, now + LEASE, take_over))


def pending_keys(ledger: Any) -> list[str]:
    return [e.key for e in ledger.pending_outbox(100)]


@pytest.mark.parametrize(
    "state", [RunState.SUCCEEDED, RunState.DEAD, RunState.CANCELLED, RunState.SKIPPED, RunState.RECONCILING]
)
def test_a_terminal_finish_records_its_outbox_entry_in_the_same_write(ledger, make, state) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    t1 = make.t0 + timedelta(seconds=3)

    written = ledger.finish(d.key, "w1", held.epoch, t1, AttemptEnd(state, result="HTTP 200", error="why"))

    [entry] = ledger.get(d.key).outbox
    assert (entry.state, entry.epoch, entry.at) == (state, held.epoch, t1)
    assert (entry.result, entry.error) == ("HTTP 200", "why")
    assert entry.event_id == f"{d.key}/{held.epoch}/{state.value}"
    # finish returns the item as written, outbox included (the worker publishes from it without a read)
    assert written == ledger.get(d.key)
    [event] = outcome_events(written)
    assert (event.occurrence_key, event.job_id, event.tenant) == (d.key, d.job_id, d.tenant)
    assert (event.scheduled_for, event.state, event.fencing_token, event.attempts) == (d.scheduled_for, state, 1, 1)
    assert pending_keys(ledger) == [d.key]


def test_retry_wait_and_claims_record_nothing_to_publish(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    ledger.finish(
        d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.RETRY_WAIT, error="503", next_attempt_at=make.t0)
    )

    assert ledger.get(d.key).outbox == []
    assert pending_keys(ledger) == []


def test_record_unclaimed_and_expire_to_record_their_outbox_entries(ledger, make) -> None:
    skipped, lost = make.dispatch(), make.dispatch()
    assert ledger.record_unclaimed(skipped, RunState.SKIPPED, make.t0, "job paused")
    held = claim(ledger, lost, "w1", make.t0, take_over=False)
    later = make.t0 + LEASE + timedelta(seconds=1)
    assert ledger.expire_to(lost.key, held.epoch, RunState.RECONCILING, later, "worker lost")

    [unclaimed] = ledger.get(skipped.key).outbox
    assert (unclaimed.state, unclaimed.epoch, unclaimed.error) == (RunState.SKIPPED, 0, "job paused")
    [expired] = ledger.get(lost.key).outbox
    assert (expired.state, expired.epoch, expired.at) == (RunState.RECONCILING, held.epoch, later)
    assert sorted(pending_keys(ledger)) == sorted([skipped.key, lost.key])

    # A second record_unclaimed of the same occurrence changes nothing (no second entry)
    assert not ledger.record_unclaimed(skipped, RunState.CANCELLED, later, "again")
    assert len(ledger.get(skipped.key).outbox) == 1


def test_clear_empties_the_outbox_and_drops_the_item_from_the_pending_list(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    ledger.finish(d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.SUCCEEDED))
    entries = ledger.get(d.key).outbox

    assert ledger.clear_outbox(d.key, entries)

    assert ledger.get(d.key).outbox == []
    assert ledger.get(d.key).state == RunState.SUCCEEDED
    assert pending_keys(ledger) == []
    # Clearing again (a duplicate drain) finds nothing to clear
    assert not ledger.clear_outbox(d.key, entries)


def test_clear_refuses_when_an_outcome_was_appended_since_it_was_read(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0, take_over=False)
    ledger.finish(d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.RECONCILING))
    read = ledger.get(d.key).outbox
    ledger.resolve(d.key, RunState.SUCCEEDED, make.t0 + timedelta(minutes=5), "operator: it happened")

    assert not ledger.clear_outbox(d.key, read)

    first, second = ledger.get(d.key).outbox
    assert (first.state, second.state) == (RunState.RECONCILING, RunState.SUCCEEDED)
    assert first.event_id != second.event_id
    assert second.error == "operator: it happened"
    assert ledger.clear_outbox(d.key, [first, second])
    assert pending_keys(ledger) == []


def test_a_revive_keeps_an_unpublished_dead_outcome(ledger, make) -> None:
    d = make.dispatch()
    held = claim(ledger, d, "w1", make.t0)
    ledger.finish(d.key, "w1", held.epoch, make.t0, AttemptEnd(RunState.DEAD, error="boom"))

    assert ledger.revive(d.key, make.t0 + timedelta(minutes=1), "redriven")

    [entry] = ledger.get(d.key).outbox
    assert entry.state == RunState.DEAD
    assert pending_keys(ledger) == [d.key]


def test_pending_lists_the_oldest_outcomes_first_up_to_the_limit(ledger, make) -> None:
    keys = []
    for i in range(5):
        d = make.dispatch()
        ledger.record_unclaimed(d, RunState.CANCELLED, make.t0 + timedelta(seconds=10 - i), "gone")
        keys.append(d.key)

    listed = [e.key for e in ledger.pending_outbox(3)]

    assert listed == list(reversed(keys))[:3]


def test_clear_of_an_unknown_key_or_nothing_is_refused(ledger, make) -> None:
    d = make.dispatch()
    assert ledger.record_unclaimed(d, RunState.CANCELLED, make.t0, "gone")
    assert not ledger.clear_outbox("unknown:2030-01-07T09:00:00Z", ledger.get(d.key).outbox)
    assert not ledger.clear_outbox(d.key, [])
    assert len(ledger.get(d.key).outbox) == 1
