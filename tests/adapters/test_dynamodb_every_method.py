"""Every public method of the DynamoDB adapters, called once against DynamoDB Local, on its success path and on
its conditional-failure path. DynamoDB Local refuses reserved words (`state`, `owner`, `cursor`, `shard`, ...)
used without placeholders where moto accepts them; the contract suites cover the behaviour, this test makes
sure no method is left out (a method added later fails it until it is exercised here)."""

from __future__ import annotations

import dataclasses
import inspect
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.dynamodb import DynamoJobStore, DynamoLedger, DynamoTimerStore
from scheduler.core.errors import ClaimLost, ClaimRefused, Fenced, LeaseLost, VersionConflict
from scheduler.core.model.job import JobState, RunState
from scheduler.core.ports import Advance, AttemptEnd, BucketClaim, IdempotencyRecord, NewJob
from scheduler.core.records import Attempt, Hold

pytestmark = pytest.mark.emulator


class Recording:
    """Wraps an adapter and counts the calls of its methods."""

    def __init__(self, adapter: Any) -> None:
        self._adapter = adapter
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._adapter, name)
        if callable(value):

            def call(*args: Any, **kwargs: Any) -> Any:
                self.calls[name] += 1
                return value(*args, **kwargs)

            return call
        return value


def public_methods(cls: type) -> set[str]:
    return {name for name, member in inspect.getmembers(cls, inspect.isfunction) if not name.startswith("_")}


def test_every_dynamodb_adapter_method_runs_on_dynamodb_local(resources, dynamodb_client, make) -> None:
    jobs = Recording(DynamoJobStore(resources.jobs_table, 4, dynamodb_client))
    timers = Recording(DynamoTimerStore(resources.jobs_table, 4, dynamodb_client))
    ledger = Recording(DynamoLedger(resources.executions_table, dynamodb_client))
    t0 = make.t0

    # JobStore
    job = make.job()
    timer = make.timer(job)
    jobs.create(job, timer, IdempotencyRecord(job.tenant, "k", "h", job.job_id, t0 + timedelta(days=1)), True, 5)
    assert jobs.get(job.job_id) == job
    assert jobs.list(job.tenant, None, 10, None)[0] == [job]
    assert jobs.list(job.tenant, JobState.ACTIVE, 10, None)[0] == [job]
    assert jobs.get_by_external_id(job.tenant, "no-such-id") is None
    assert jobs.advance(timer, Advance(t0 + timedelta(minutes=2), timer.scheduled_for, 0)).put_next  # UpdateItem path
    current = jobs.get(job.job_id)
    paused = current.model_copy(update={"version": 2, "state": JobState.PAUSED})
    jobs.replace(paused, current, None, False)
    with pytest.raises(VersionConflict):
        jobs.replace(paused, current, None, False)
    # In its own minute (the timer builder uses next_run_at): job ids come from a shared counter, so in a shared
    # minute its shard could equal the first job's and put it in the bucket listed below
    once_at = t0 + timedelta(minutes=5)
    once = make.job(schedule={"type": "once", "at": once_at.isoformat()}, next_run_at=once_at)
    jobs.create(once, make.timer(once), None, False, 5)
    assert jobs.advance(make.timer(once), Advance(None, make.timer(once).scheduled_for, 0)).proceed  # transaction path
    assert not jobs.advance(timer, Advance(None, timer.scheduled_for, 0)).proceed  # failed transaction path
    # A batch, in a tenant and an hour of its own (nothing below lists them)
    batch = [make.job("tenant-batch", created_at=t0 + timedelta(hours=2, seconds=i)) for i in range(2)]
    assert jobs.create_all([NewJob(j, make.timer(j), None, False) for j in batch], 5) == 2
    assert [jobs.get(j.job_id) for j in batch] == batch

    # TimerStore
    assert timers.bucket_of(timer).shard in range(4)
    timers.put_timer(timer)
    assert timers.has_timer(timer)  # (create wrote it already; the put is idempotent)
    assert not timers.has_timer(dataclasses.replace(timer, version=9))
    bucket = timers.bucket_of(timer)
    assert not timers.is_sealed(bucket)
    held = timers.claim_bucket(bucket, "a", t0, t0 + timedelta(minutes=2))
    assert isinstance(held, BucketClaim) and timers.is_sealed(bucket)
    assert timers.claim_bucket(bucket, "b", t0, t0 + timedelta(minutes=2)).done is False
    assert [t for page, _ in timers.timers(bucket, None) for t in page] == [timer]
    assert timers.upcoming(bucket.minute) == [timer]
    timers.checkpoint(held, "c", t0 + timedelta(minutes=3))
    timers.release(held)
    again = timers.claim_bucket(bucket, "b", t0, t0 + timedelta(minutes=2))
    with pytest.raises(ClaimLost):
        timers.checkpoint(held, "c", t0)
    timers.complete_bucket(again, t0 + timedelta(days=2))
    last = timers.claim_bucket(dataclasses.replace(bucket, shard=(bucket.shard + 1) % 4), "a", t0, t0)
    assert isinstance(last, BucketClaim)
    timers.finish_bucket(last, "c", t0 + timedelta(days=2))
    assert timers.watermark() is None
    assert timers.init_watermark(t0) == t0
    timers.advance_watermark(t0 + timedelta(minutes=1))
    assert timers.watermark() == t0 + timedelta(minutes=1)
    # the stores recorded their 4 shards before writing: a sweep of fewer does not move the watermark
    assert timers.recorded_shards() == 4
    timers.advance_watermark(t0 + timedelta(minutes=2), 2)
    assert timers.watermark() == t0 + timedelta(minutes=1)
    timers.put_late(timer)
    assert timers.late_timers(10) == [timer]  # plus the late copy written by create, removed next
    timers.remove_late(timer)
    assert timers.late_timers(10) == []

    # Ledger
    d = make.dispatch(job.job_id, t0)
    first = ledger.claim(d, Attempt("w1", t0, t0 + timedelta(minutes=1), True))
    with pytest.raises(ClaimRefused):
        ledger.claim(d, Attempt("w2", t0, t0 + timedelta(minutes=1), True))
    assert ledger.get(d.key) == first
    ledger.heartbeat(d.key, "w1", first.epoch, t0 + timedelta(minutes=2))
    with pytest.raises(LeaseLost):
        ledger.heartbeat(d.key, "w2", first.epoch, t0 + timedelta(minutes=2))
    ledger.finish(d.key, "w1", first.epoch, t0, AttemptEnd(RunState.RETRY_WAIT, error="e", next_attempt_at=t0))
    second = ledger.claim(d, Attempt("w2", t0, t0 + timedelta(minutes=1), False))
    with pytest.raises(Fenced):
        ledger.finish(d.key, "w1", first.epoch, t0, AttemptEnd(RunState.SUCCEEDED))
    ledger.finish(d.key, "w2", second.epoch, t0, AttemptEnd(RunState.DEAD, result="r", error="e2"))
    ledger.mark_dead_lettered(d.key)
    assert ledger.get(d.key).dead_lettered
    assert ledger.revive(d.key, t0, "redriven")
    assert not ledger.revive(d.key, t0, "redriven")
    third = ledger.claim(d, Attempt("w4", t0, t0 + timedelta(minutes=1), False))
    ledger.finish(
        d.key, "w4", third.epoch, t0, AttemptEnd(RunState.RETRY_WAIT, next_attempt_at=t0, refund_attempt=True)
    )
    skipped = make.dispatch(job.job_id, t0 + timedelta(minutes=1))
    assert ledger.record_unclaimed(skipped, RunState.SKIPPED, t0, "paused")
    assert not ledger.record_unclaimed(skipped, RunState.SKIPPED, t0, "paused")
    copied = make.dispatch(job.job_id, t0 + timedelta(minutes=3))
    ledger.void_copies(copied.key, t0)
    with pytest.raises(ClaimRefused):
        ledger.claim(copied, Attempt("w5", t0, t0 + timedelta(minutes=1), on_copy=True))
    assert ledger.claim(copied, Attempt("w5", t0, t0 + timedelta(minutes=1))).epoch == 1
    held = make.dispatch()
    ledger.mark_held(held, Hold("slow-api", t0, frozenset({"parallelism"})))
    assert ledger.claim(held, Attempt("w6", t0, t0 + timedelta(minutes=1))).held == Hold(
        "slow-api", t0, frozenset({"parallelism"})
    )
    lost = make.dispatch(job.job_id, t0 + timedelta(minutes=2))
    held_run = ledger.claim(lost, Attempt("w3", t0, t0 + timedelta(seconds=1), False))
    assert ledger.expire_to(lost.key, held_run.epoch, RunState.RECONCILING, t0 + timedelta(seconds=2), "lost")
    assert not ledger.expire_to(lost.key, held_run.epoch, RunState.RECONCILING, t0 + timedelta(seconds=2), "x")
    assert ledger.resolve(lost.key, RunState.SUCCEEDED, t0, "ok").state == RunState.SUCCEEDED
    with pytest.raises(ClaimRefused):
        ledger.resolve(lost.key, RunState.SUCCEEDED, t0, "ok")
    runs, _ = ledger.runs(job.job_id, 10, None)
    assert [r.key for r in runs] == [copied.key, lost.key, skipped.key, d.key]
    pending = {e.key: e.outbox for e in ledger.pending_outbox(10)}
    assert set(pending) == {d.key, skipped.key, lost.key}
    assert ledger.clear_outbox(skipped.key, pending[skipped.key])
    assert not ledger.clear_outbox(skipped.key, pending[skipped.key])

    # every public method was called
    assert set(jobs.calls) == public_methods(DynamoJobStore)
    assert set(timers.calls) == public_methods(DynamoTimerStore)
    assert set(ledger.calls) == public_methods(DynamoLedger)
