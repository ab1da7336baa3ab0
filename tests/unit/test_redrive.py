"""The redrive (scheduler.ops.redrive) on a fake DLQ, the in-memory ledger and a worker that fails every time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from scheduler.adapters.codec import dispatch_to_body
from scheduler.adapters.memory import FakeClock, MemoryLedger
from scheduler.core.model import RunState
from scheduler.core.ports import AttemptEnd, Dispatch
from scheduler.core.records import Attempt
from scheduler.ops.redrive import DeadLetter, parse_dead_letter, redrive
from tests.unit.fixtures import T0, TENANT

KEY = b"message-key-of-the-test"


@dataclass
class Dlq:
    """An SQS DLQ as the redrive sees it: receive hides a message, release shows it again, delete removes it."""

    clock: FakeClock
    messages: dict[str, tuple[str, datetime]] = field(default_factory=dict)
    hidden: set[str] = field(default_factory=set)
    sent: int = 0

    def add(self, dispatch: Dispatch) -> None:
        self.sent += 1
        self.messages[f"m{self.sent}"] = (dispatch_to_body(dispatch, KEY), self.clock.now())

    def messages_(self, limit: int) -> Iterator[DeadLetter]:
        seen: set[str] = set()
        while len(seen) < limit:
            fresh = [m for m in self.messages if m not in self.hidden and m not in seen][:10]
            if not fresh:
                return
            for message_id in fresh:
                seen.add(message_id)
                self.hidden.add(message_id)
                body, sent_at = self.messages[message_id]
                yield parse_dead_letter(message_id, message_id, body, KEY, sent_at)

    def delete(self, letter: DeadLetter) -> None:
        self.messages.pop(letter.message_id, None)
        self.hidden.discard(letter.message_id)

    def release(self, letter: DeadLetter) -> None:
        self.hidden.discard(letter.message_id)


class Letters:
    def __init__(self, dlq: Dlq) -> None:
        self.dlq = dlq

    def messages(self, limit: int) -> Iterator[DeadLetter]:
        return self.dlq.messages_(limit)

    def delete(self, letter: DeadLetter) -> None:
        self.dlq.delete(letter)

    def release(self, letter: DeadLetter) -> None:
        self.dlq.release(letter)


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

    # When the DLQ is redriven (issue 20, item 1: it looped until --limit, 999 runs of one occurrence)
    lines = redrive(Letters(dlq), ledger, worker, dry_run=False, limit=1000, now=clock.now)  # type: ignore[arg-type]

    # Then each ran once more, died again, and is back in the DLQ for the next command, once
    assert [line.action for line in lines] == ["redriven", "redriven"]
    assert worker.runs == 2
    assert len(dlq.messages) == 2 and not dlq.hidden
    assert all(len(ledger.get(d.key).history) <= 4 for d in dead)  # type: ignore[union-attr]

    # And the next command does the same once more: bounded by the commands, not by --limit
    again = redrive(Letters(dlq), ledger, worker, dry_run=False, limit=1000, now=clock.now)  # type: ignore[arg-type]
    assert len(again) == 2 and worker.runs == 4
