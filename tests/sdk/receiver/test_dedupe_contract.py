"""The dedupe store contract and the OccurrenceGuard on it, against the in-memory store and DynamoDB Local: a
second delivery gets the first result, a lower fencing token is refused without running the handler, a live
in-progress record holds off a concurrent delivery, and a handler that raises releases the record."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from punctual_sdk.receiver import (
    InMemoryDedupeStore,
    InProgress,
    InvalidDelivery,
    LeaseLost,
    OccurrenceGuard,
    StaleFencingToken,
)
from punctual_sdk.receiver.dedupe import COMPLETED, IN_PROGRESS, DeliveryRecord

BACKENDS = ["memory", pytest.param("dynamodb", marks=pytest.mark.emulator)]


class Clock:
    def __init__(self) -> None:
        self.now = 1_796_112_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return InMemoryDedupeStore()
    from punctual_sdk.receiver.dynamodb import DynamoDBDedupeStore, create_table

    client = request.getfixturevalue("dynamodb_client")
    name = f"rx{uuid.uuid4().hex[:10]}"
    create_table(client, name)
    return DynamoDBDedupeStore(name, client)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def guard(store: Any, clock: Clock) -> OccurrenceGuard:
    return OccurrenceGuard(store, lease_seconds=60, clock=clock)


class Effects:
    """A handler whose calls are counted: the effect the receiver must cause once."""

    def __init__(self, result: Any = "charged") -> None:
        self.calls = 0
        self.result = result

    def __call__(self) -> Any:
        self.calls += 1
        return self.result


def test_a_second_delivery_gets_the_first_result_without_running_the_handler(guard, store) -> None:
    effect = Effects({"charge": "ch_1", "amount": 5})

    first = guard.run("occ-1", 3, effect)
    second = guard.run("occ-1", 3, effect)

    assert (first.result, first.duplicate) == ({"charge": "ch_1", "amount": 5}, False)
    assert (second.result, second.duplicate) == ({"charge": "ch_1", "amount": 5}, True)
    assert effect.calls == 1
    record = store.get("occ-1")
    assert (record.state, record.fencing_token) == (COMPLETED, 3)


def test_a_lower_fencing_token_than_one_seen_is_refused_and_the_handler_does_not_run(guard) -> None:
    effect = Effects()
    guard.run("occ-1", 5, effect)

    with pytest.raises(StaleFencingToken, match="4 is lower than 5") as refused:
        guard.run("occ-1", 4, effect)

    assert refused.value.status == 409
    assert effect.calls == 1


def test_a_higher_token_on_a_duplicate_fences_off_the_attempts_below_it(guard, store) -> None:
    effect = Effects()
    guard.run("occ-1", 5, effect)

    assert guard.run("occ-1", 8, effect).duplicate
    assert store.get("occ-1").fencing_token == 8
    with pytest.raises(StaleFencingToken):
        guard.run("occ-1", 6, effect)
    assert effect.calls == 1


def test_a_concurrent_delivery_under_a_live_lease_is_told_to_retry_and_fences_the_first(guard, store, clock) -> None:
    # Given a delivery that claimed the occurrence and is running its handler
    claim = guard.claim("occ-1", 2)
    clock.now += 10

    # When another delivery of it arrives (a redelivery with a higher token)
    with pytest.raises(InProgress) as busy:
        guard.claim("occ-1", 3)

    # Then it is answered 429 with the lease's remaining time, and its token is remembered
    assert busy.value.status == 429
    assert busy.value.retry_after == pytest.approx(50)
    assert store.get("occ-1").fencing_token == 3
    guard.complete(claim, "done")
    with pytest.raises(StaleFencingToken):
        guard.run("occ-1", 2, Effects())
    assert guard.run("occ-1", 3, Effects()).result == "done"


def test_a_handler_that_raises_releases_the_record_so_the_retry_runs_it(guard, store) -> None:
    def failing() -> Any:
        raise RuntimeError("card network down")

    with pytest.raises(RuntimeError, match="card network down"):
        guard.run("occ-1", 1, failing)

    record = store.get("occ-1")
    assert record.state == IN_PROGRESS and record.lease_expires_at == 0
    retry = Effects()
    assert guard.run("occ-1", 1, retry).result == "charged"
    assert retry.calls == 1


def test_a_released_record_keeps_its_fencing_token(guard) -> None:
    def failing() -> Any:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        guard.run("occ-1", 4, failing)

    with pytest.raises(StaleFencingToken):
        guard.run("occ-1", 3, Effects())


def test_a_dead_deliverys_record_is_taken_over_when_its_lease_ends(guard, clock) -> None:
    guard.claim("occ-1", 1)  # the process died here: nothing completes or releases it
    clock.now += 59
    with pytest.raises(InProgress):
        guard.claim("occ-1", 1)

    clock.now += 2
    retry = Effects()
    assert guard.run("occ-1", 1, retry).duplicate is False
    assert retry.calls == 1


def test_a_handler_that_outlives_its_lease_and_was_taken_over_does_not_record(guard, clock) -> None:
    slow = guard.claim("occ-1", 1)
    clock.now += 61
    fast = guard.claim("occ-1", 2)

    with pytest.raises(LeaseLost, match="lease"):
        guard.complete(slow, "late")
    guard.complete(fast, "on time")
    assert guard.run("occ-1", 2, Effects()).result == "on time"


def test_only_the_owner_completes_or_releases_a_record(store, clock) -> None:
    record = DeliveryRecord("occ-1", 1, IN_PROGRESS, "owner-a", clock.now + 60, int(clock.now + 3600))
    assert store.claim(record, clock.now) is None

    assert not store.complete("occ-1", "owner-b", '"x"')
    store.release("occ-1", "owner-b")
    assert store.get("occ-1") == record
    assert store.complete("occ-1", "owner-a", '"x"')
    assert not store.complete("occ-1", "owner-a", '"y"')  # once
    assert store.get("occ-1").result == '"x"'


def test_an_expired_record_counts_as_absent(store, clock) -> None:
    done = DeliveryRecord("occ-1", 9, IN_PROGRESS, "a", clock.now + 1, int(clock.now) + 10)
    assert store.claim(done, clock.now) is None
    assert store.complete("occ-1", "a", '"old"')
    newcomer = DeliveryRecord("occ-1", 1, IN_PROGRESS, "b", clock.now + 100, int(clock.now) + 3600)

    assert store.claim(newcomer, clock.now + 9) is not None  # completed, higher token: refused while it lives
    assert store.claim(newcomer, clock.now + 11) is None  # expired (TTL may not have deleted it yet)
    assert store.get("occ-1").owner == "b"


def test_the_store_answers_a_refused_claim_with_the_record_it_found(store, clock) -> None:
    mine = DeliveryRecord("occ-1", 2, IN_PROGRESS, "a", clock.now + 60, int(clock.now + 3600), job_id="job-1")
    assert store.claim(mine, clock.now) is None

    found = store.claim(DeliveryRecord("occ-1", 2, IN_PROGRESS, "b", clock.now + 60, int(clock.now + 3600)), clock.now)

    assert found == mine


def test_concurrent_deliveries_run_the_handler_once(store) -> None:
    # Given eight deliveries of one occurrence at once (real clock, real threads)
    guard = OccurrenceGuard(store, lease_seconds=30)
    effect_lock, effects = threading.Lock(), []
    answers: list[str] = []

    def handler() -> str:
        with effect_lock:
            effects.append(1)
        time.sleep(0.2)
        return "charged"

    def deliver() -> None:
        try:
            answers.append("ran" if not guard.run("occ-c", 1, handler).duplicate else "duplicate")
        except InProgress:
            answers.append("in progress")

    threads = [threading.Thread(target=deliver) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then the effect happened once; the others were told to retry (or saw it done)
    assert len(effects) == 1
    assert answers.count("ran") == 1
    assert set(answers) <= {"ran", "in progress", "duplicate"}


# -- results too large to keep, and records that cannot be completed ---------------------------------------------


class FailingCompletes:
    """A store whose `complete` fails the first `failures` times (all when None): before writing, or, with
    `land=True`, after (a write whose answer was lost). Everything else is the real store's."""

    def __init__(self, store: Any, failures: int | None = None, land: bool = False) -> None:
        self.store, self.failures, self.land = store, failures, land
        self.completes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def complete(self, occurrence_key: str, owner: str, result: str) -> bool:
        self.completes += 1
        if self.failures is not None and self.completes > self.failures:
            return bool(self.store.complete(occurrence_key, owner, result))
        if self.land:
            self.store.complete(occurrence_key, owner, result)
        raise RuntimeError("ProvisionedThroughputExceededException")


def test_a_result_too_large_to_keep_completes_the_record_and_the_handler_runs_once(guard, store) -> None:
    # Given a handler whose result is larger than a DynamoDB item may be
    effect = Effects({"report": "x" * 450_000})

    # When it runs, and the occurrence is delivered again
    first = guard.run("occ-1", 1, effect)
    second = guard.run("occ-1", 1, effect)

    # Then the first delivery got the result, the record is COMPLETED without it, and the second did not run it
    assert (first.duplicate, first.kept, len(first.result["report"])) == (False, True, 450_000)
    assert (second.result, second.duplicate, second.kept) == (None, True, False)
    assert effect.calls == 1
    record = store.get("occ-1")
    assert record.state == COMPLETED
    assert len(record.result.encode()) <= guard.max_result_bytes


def test_a_result_within_the_bound_is_kept_whole(store, clock) -> None:
    guard = OccurrenceGuard(store, max_result_bytes=300_000, clock=clock)
    result = {"report": "x" * 250_000}

    guard.run("occ-1", 1, Effects(result))

    assert guard.run("occ-1", 1, Effects()).result == result


def test_a_store_that_fails_to_complete_gets_a_minimal_record_and_the_handler_does_not_run_again(store, clock) -> None:
    # Given a store whose first completion fails (throttled, say)
    guard = OccurrenceGuard(FailingCompletes(store, failures=1), lease_seconds=60, clock=clock)
    effect = Effects({"charge": "ch_1"})

    # When the handler succeeds
    first = guard.run("occ-1", 1, effect)

    # Then its result is returned, a minimal record completes the occurrence, and a redelivery does not run it
    assert first.result == {"charge": "ch_1"}
    assert store.get("occ-1").state == COMPLETED
    clock.now += 3600
    again = guard.run("occ-1", 2, effect)
    assert (again.duplicate, again.kept) == (True, False)
    assert effect.calls == 1


def test_a_completion_that_landed_although_it_failed_is_not_taken_for_a_lost_lease(store, clock) -> None:
    guard = OccurrenceGuard(FailingCompletes(store, failures=1, land=True), lease_seconds=60, clock=clock)

    first = guard.run("occ-1", 1, Effects("charged"))

    assert first.result == "charged"
    assert guard.run("occ-1", 1, Effects()).result == "charged"


def test_when_no_completion_can_be_recorded_the_result_is_returned_and_the_lease_holds_off_a_rerun(
    store, clock, caplog
) -> None:
    # Given a store that cannot complete any record (and the handler succeeds)
    guard = OccurrenceGuard(FailingCompletes(store), lease_seconds=60, clock=clock)
    effect = Effects("charged")

    # When the handler runs
    with caplog.at_level("ERROR", logger="punctual_sdk.receiver"):
        first = guard.run("occ-1", 1, effect)

    # Then its result is returned (the sender is told it succeeded, so it does not send it again), the failure is
    # logged, and a redelivery within the lease is told to retry rather than run the handler again
    assert (first.result, first.duplicate) == ("charged", False)
    assert any("could not be recorded" in r.getMessage() for r in caplog.records)
    clock.now += 30
    with pytest.raises(InProgress):
        guard.run("occ-1", 2, effect)
    assert effect.calls == 1


@pytest.mark.parametrize(("key", "token"), [("", 1), ("occ", -1), ("occ", True), ("occ", "7"), (None, 1)])
def test_a_malformed_key_or_token_is_refused_before_anything_is_written(guard, store, key, token) -> None:
    with pytest.raises(InvalidDelivery):
        guard.claim(key, token)
    assert store.get("occ") is None
