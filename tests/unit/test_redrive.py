"""The redrive (scheduler.ops.redrive) on a fake DLQ (SqsDeadLetters over a fake SQS client), the in-memory ledger
and a worker that fails every time (or a ready queue that only records)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from scheduler.adapters.dispatch_message import dispatch_to_body, dispatches_from_body, message_to_body
from scheduler.adapters.memory import FakeClock, MemoryLedger
from scheduler.core.model.job import RunState
from scheduler.core.ports import AttemptEnd, Dispatch
from scheduler.core.records import Attempt
from scheduler.ops.redrive import SqsDeadLetters, redrive
from tests.unit.fixtures import T0, TENANT

KEY = b"message-key-of-the-test"


@dataclass
class Dlq:
    """An SQS DLQ as the redrive's SQS client sees it: receive hides a message, a zero visibility shows it again,
    delete removes it (the receipt handle is the message id). Each send takes a second of the fake clock."""

    clock: FakeClock
    messages: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    hidden: set[str] = field(default_factory=set)
    sent: int = 0
    #: The `occurrence_key` attribute of each message sent with one.
    keys: dict[str, str] = field(default_factory=dict)

    def add(self, dispatch: Dispatch) -> None:
        self.add_body(dispatch_to_body(dispatch, KEY))

    def add_body(self, body: str) -> str:
        self.sent += 1
        message_id = f"m{self.sent}"
        self.messages[message_id] = (body, self.clock.now())
        return message_id

    def receive_message(self, QueueUrl: str, MaxNumberOfMessages: int, **_: Any) -> dict[str, Any]:  # noqa: N803 - boto3's names
        fresh = [m for m in self.messages if m not in self.hidden][:MaxNumberOfMessages]
        self.hidden.update(fresh)
        return {
            "Messages": [
                {
                    "MessageId": m,
                    "ReceiptHandle": m,
                    "Body": self.messages[m][0],
                    "Attributes": {"SentTimestamp": str(int(self.messages[m][1].timestamp() * 1000))},
                }
                for m in fresh
            ]
        }

    def send_message_batch(self, QueueUrl: str, Entries: list[dict[str, Any]]) -> dict[str, Any]:  # noqa: N803 - boto3's names
        assert len(Entries) <= 10
        self.clock.advance(1)
        successful = []
        for entry in Entries:
            message_id = self.add_body(entry["MessageBody"])
            self.keys[message_id] = entry["MessageAttributes"]["occurrence_key"]["StringValue"]
            successful.append({"Id": entry["Id"], "MessageId": message_id})
        return {"Successful": successful}

    def delete_message(self, QueueUrl: str, ReceiptHandle: str) -> None:  # noqa: N803 - boto3's names
        self.messages.pop(ReceiptHandle, None)
        self.hidden.discard(ReceiptHandle)

    def change_message_visibility(self, QueueUrl: str, ReceiptHandle: str, VisibilityTimeout: int) -> None:  # noqa: N803 - boto3's names
        assert VisibilityTimeout == 0 and ReceiptHandle in self.hidden, "released a message not in flight"
        self.hidden.discard(ReceiptHandle)


def letters_of(dlq: Dlq) -> SqsDeadLetters:
    return SqsDeadLetters("https://sqs/dlq", dlq, message_key=KEY)


class RecordingQueue:
    """A ready queue that only records what it is sent."""

    def __init__(self) -> None:
        self.sent: list[Dispatch] = []

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        self.sent.extend(dispatches)


class FailingWorker:
    """A ready queue whose worker runs each message at once and dies again: DEAD, and back to the DLQ."""

    def __init__(self, ledger: MemoryLedger, dlq: Dlq, clock: FakeClock) -> None:
        self.ledger, self.dlq, self.clock = ledger, dlq, clock
        self.runs = 0

    def send(self, dispatches: Sequence[Dispatch], now: datetime) -> None:
        for dispatch in dispatches:
            self.clock.advance(1)
            self.runs += 1
            die(self.ledger, dispatch, self.clock.now())
            self.dlq.add(dispatch)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def die(ledger: MemoryLedger, dispatch: Dispatch, now: datetime) -> None:
    execution = ledger.claim(dispatch, Attempt("worker", now, now + timedelta(seconds=60), False))
    ledger.finish(dispatch.key, "worker", execution.epoch, now, AttemptEnd(RunState.DEAD, error="HTTP 400"))


def test_a_redrive_runs_each_dead_letter_present_at_its_start_once_even_when_it_dies_again() -> None:
    # Given two occurrences that died (a receiver that always answers 400) and are in the DLQ
    clock = FakeClock(T0)
    ledger, dlq = MemoryLedger(), Dlq(clock)
    worker = FailingWorker(ledger, dlq, clock)
    dead = [Dispatch("job-1", TENANT, T0 - timedelta(minutes=m), T0, 1) for m in (1, 2)]
    for dispatch in dead:
        die(ledger, dispatch, clock.now())
        dlq.add(dispatch)
    clock.advance(5)

    # When the DLQ is redriven (it must not loop until --limit, running one occurrence again and again)
    lines = redrive(letters_of(dlq), ledger, worker, dry_run=False, limit=1000, now=clock.now)  # type: ignore[arg-type]

    # Then each ran once more, died again, and is back in the DLQ for the next command, once
    assert [line.action for line in lines] == ["redriven", "redriven"]
    assert worker.runs == 2
    assert len(dlq.messages) == 2 and not dlq.hidden
    assert all(len(ledger.get(d.key).history) <= 4 for d in dead)  # type: ignore[union-attr]

    # And the next command does the same once more: bounded by the commands, not by --limit
    again = redrive(letters_of(dlq), ledger, worker, dry_run=False, limit=1000, now=clock.now)  # type: ignore[arg-type]
    assert len(again) == 2 and worker.runs == 4


def dead_packed_message(ledger: MemoryLedger, dlq: Dlq, key: bytes = KEY) -> list[Dispatch]:
    """Three occurrences that died, in the DLQ as one ready-queue message (a packed message SQS moved there)."""
    dead = [Dispatch(f"job-{i}", TENANT, T0, T0, 1) for i in (1, 2, 3)]
    for dispatch in dead:
        die(ledger, dispatch, T0)
    dlq.add_body(message_to_body(dead, key))
    return dead


def test_a_redrive_splits_an_packed_message_and_redrives_each_of_its_occurrences() -> None:
    # Given a packed message of three dead occurrences in the DLQ (a poison ready-queue message)
    clock = FakeClock(T0)
    ledger, dlq, queue = MemoryLedger(), Dlq(clock), RecordingQueue()
    dead = dead_packed_message(ledger, dlq)
    clock.advance(5)

    # When the DLQ is redriven
    lines = redrive(letters_of(dlq), ledger, queue, dry_run=False, limit=1000, now=clock.now)  # type: ignore[arg-type]

    # Then each occurrence was sent back to the DLQ as a message of its own (keyed), and redriven in the same pass
    assert sorted(dlq.keys.values()) == sorted(d.key for d in dead)
    assert [line.action for line in lines] == ["redriven"] * 3
    assert sorted(line.occurrence_key or "" for line in lines) == sorted(d.key for d in dead)
    assert sorted(d.key for d in queue.sent) == sorted(d.key for d in dead)
    assert all(ledger.get(d.key).state == RunState.RETRY_WAIT for d in dead)  # type: ignore[union-attr]
    # And nothing is left in the DLQ
    assert not dlq.messages and not dlq.hidden


def test_a_dry_run_lists_each_occurrence_of_an_packed_message_and_changes_nothing() -> None:
    # Given a packed message of three dead occurrences in the DLQ
    clock = FakeClock(T0)
    ledger, dlq, queue = MemoryLedger(), Dlq(clock), RecordingQueue()
    dead = dead_packed_message(ledger, dlq)
    before = dict(dlq.messages)

    # When the DLQ is listed (a dry run)
    lines = redrive(letters_of(dlq), ledger, queue, dry_run=True, limit=1000, now=clock.now)  # type: ignore[arg-type]

    # Then each of its occurrences is listed
    assert [(line.occurrence_key, line.ledger_state, line.action) for line in lines] == [
        (d.key, "DEAD", "would redrive") for d in dead
    ]
    # And the DLQ still holds the one packed message, visible, and nothing was sent anywhere
    assert dlq.messages == before and not dlq.hidden
    assert dlq.sent == 1 and not queue.sent
    assert len(dispatches_from_body(next(iter(dlq.messages.values()))[0], KEY)) == 3


def test_an_packed_message_with_a_bad_hmac_is_left_in_the_dlq_as_unreadable() -> None:
    # Given a packed message signed with another key (forged, or planted in the DLQ)
    clock = FakeClock(T0)
    ledger, dlq, queue = MemoryLedger(), Dlq(clock), RecordingQueue()
    dead = dead_packed_message(ledger, dlq, key=b"not-the-message-key")
    before = dict(dlq.messages)

    # When the DLQ is redriven
    lines = redrive(letters_of(dlq), ledger, queue, dry_run=False, limit=1000, now=clock.now)  # type: ignore[arg-type]

    # Then it is unreadable for its HMAC, left in the DLQ as it is (not split), and none of its occurrences ran
    assert len(lines) == 1 and lines[0].occurrence_key is None
    assert lines[0].action.startswith("unreadable (unauthenticated") and "HMAC" in lines[0].action
    assert dlq.messages == before and not dlq.hidden and dlq.sent == 1
    assert not queue.sent
    assert all(ledger.get(d.key).state == RunState.DEAD for d in dead)  # type: ignore[union-attr]


def test_an_packed_message_an_older_worker_dead_lettered_as_malformed_is_redriven() -> None:
    # Given a packed message a worker of a version before packed messages could not read (during an upgrade, or after a
    # rollback): it put it in the DLQ as malformed, wrapped with the error; its occurrences never ran
    clock = FakeClock(T0)
    ledger, dlq, queue = MemoryLedger(), Dlq(clock), RecordingQueue()
    never_ran = [Dispatch(f"job-{i}", TENANT, T0, T0, 1) for i in (1, 2)]
    body = message_to_body(never_ran, KEY)
    dlq.add_body(json.dumps({"malformed": body, "error": "not a version-1 dispatch message"}))
    forged = message_to_body([Dispatch("job-9", TENANT, T0, T0, 1)] * 2, b"not-the-message-key")
    dlq.add_body(json.dumps({"malformed": forged, "error": "not a version-1 dispatch message"}))
    clock.advance(5)

    # When the DLQ is redriven
    lines = redrive(letters_of(dlq), ledger, queue, dry_run=False, limit=1000, now=clock.now)  # type: ignore[arg-type]

    # Then its occurrences go back to the ready queue; the forged one stays in the DLQ, unreadable
    assert sorted(d.key for d in queue.sent) == sorted(d.key for d in never_ran)
    assert sorted(line.action.split(" ")[0] for line in lines) == ["redriven", "redriven", "unreadable"]
    assert len(dlq.messages) == 1
