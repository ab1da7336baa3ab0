"""Redrive dead letters: list the DLQ with each occurrence's ledger state, and re-enqueue only the occurrences
that have not SUCCEEDED, keeping their occurrence key (so a target that already applied one ignores it).

Per message, in this order (a crash anywhere leaves the DLQ message in place, and a re-run continues):
1. read the ledger; SUCCEEDED (or any terminal state other than DEAD) -> refused, left in the DLQ unless
   `purge_refused` is set;
2. DEAD -> revive (RETRY_WAIT, due now, a fresh attempt budget; conditional on DEAD);
3. send the dispatch to the ready queue;
4. delete the message from the DLQ.

One command is one pass over the dead letters present when it starts: each occurrence is redriven at most once
per command. A redriven occurrence that dies again comes back to the DLQ as a new message; that message (sent
after the pass started, or of a key this pass already redrove) is left in the DLQ for the next command, so a
redrive never loops on an occurrence that keeps failing.

A message of several occurrences (a packed message, `scheduler.core.execution.packing`: a ready-queue message SQS moved
here after maxReceiveCount) is split first, as it is received: each occurrence is sent back to the DLQ as a message of
its own (its version-1 body, with the `occurrence_key` attribute a dead occurrence's message has), then the packed
message is deleted. Sent first, deleted second: a crash between the two leaves duplicates, which the ledger and the
pass's set of redriven keys absorb. The same pass then receives those messages and handles each as above (sent after
it started, but by it: they are not occurrences that died again). A packed message that fails authentication is
unreadable and left in the DLQ as it is. A packed message that a worker of a version before packed messages
dead-lettered as malformed (during an upgrade, or after a rollback past them) is read from its `{"malformed": ...}`
wrapper and, if it authenticates, split and redriven the same way. A dry run splits nothing: it lists each
occurrence of a packed message (the message is only made visible again).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import boto3

from scheduler.adapters.dispatch_message import MalformedMessage, dispatch_to_body, dispatches_from_body, message_key
from scheduler.adapters.dynamodb import DynamoLedger
from scheduler.adapters.sqs import BATCH, SqsReadyQueue, send_batch
from scheduler.core.model.job import RunState
from scheduler.core.ports import Dispatch, Ledger, ReadyQueue
from scheduler.security.secrets import resolve_secret
from scheduler.settings import Settings


@dataclass
class DeadLetter:
    message_id: str
    receipt_handle: str
    body: str
    dispatch: Dispatch | None
    error: str | None = None
    #: When SQS accepted the message (its SentTimestamp), if known.
    sent_at: datetime | None = None


@dataclass
class RedriveLine:
    occurrence_key: str | None
    ledger_state: str | None
    action: str  # "redriven", "would redrive", "refused: SUCCEEDED", "unreadable", ...
    attempts: int | None = None
    last_error: str | None = None


def parse_dead_letters(
    message_id: str, receipt: str, body: str, message_key: bytes, sent_at: datetime | None = None
) -> list[DeadLetter]:
    """The occurrences a DLQ message carries, a letter each (all of the message's id and receipt), or one unreadable
    letter. DLQ bodies are either our wrapper (`{"dispatch": {...}, "history": ...}`, written when an occurrence
    died) or a raw ready-queue body moved by SQS after maxReceiveCount (a poison message): one occurrence, or a
    packed message of several. Either way every occurrence must carry a valid HMAC under `message_key`: a message
    planted in the DLQ is unreadable, never redriven."""
    try:
        raw = json.loads(body)
        ready_body = body  # a poison message: the ready-queue body as SQS moved it
        if isinstance(raw, dict) and isinstance(raw.get("malformed"), str):
            # A worker that could not read it dead-lettered it (a worker of a version before packed messages, during an
            # upgrade or after a rollback): redriven if it authenticates, as any ready-queue body.
            ready_body = raw["malformed"]
        elif isinstance(raw, dict) and "dispatch" in raw:
            ready_body = json.dumps(raw["dispatch"])
        dispatches = dispatches_from_body(ready_body, message_key)
    except (MalformedMessage, ValueError, AttributeError) as exc:
        return [DeadLetter(message_id, receipt, body, None, str(exc), sent_at=sent_at)]
    return [DeadLetter(message_id, receipt, body, dispatch, sent_at=sent_at) for dispatch in dispatches]


def _sent_at(message: Any) -> datetime | None:
    raw = message.get("Attributes", {}).get("SentTimestamp")
    try:
        return datetime.fromtimestamp(int(raw) / 1000, UTC) if raw is not None else None
    except ValueError:
        return None


class SqsDeadLetters:
    """Reads and deletes DLQ messages (long enough visibility to finish each one), and splits packed messages."""

    def __init__(self, dlq_url: str, client: Any | None = None, *, message_key: bytes) -> None:
        self.url = dlq_url
        self.client = client or boto3.client("sqs")
        self.message_key = message_key
        #: The ids of the messages `messages` sent, splitting packed messages: sent after the pass started, but no
        #: occurrences that died again (`redrive` does not leave them for the next command).
        self.split_ids: set[str] = set()

    def messages(self, limit: int, visibility_seconds: int = 300, *, split: bool = True) -> Iterator[DeadLetter]:
        """Each DLQ message once (hidden while we work on it); stops when a receive brings nothing new. A packed message
        of several occurrences is split (see the module's docstring) and its occurrences come in a later receive,
        as messages of their own; with `split=False` (a dry run: nothing changes) it comes as a letter per
        occurrence, all of the one message (to release, never to delete)."""
        seen: set[str] = set()
        while len(seen) < limit:
            response = self.client.receive_message(
                QueueUrl=self.url,
                MaxNumberOfMessages=min(10, limit - len(seen)),
                WaitTimeSeconds=1,
                VisibilityTimeout=visibility_seconds,
                AttributeNames=["SentTimestamp"],
            )
            fresh = [m for m in response.get("Messages", []) if m["MessageId"] not in seen]
            if not fresh:
                return
            for m in fresh:
                seen.add(m["MessageId"])
                letters = parse_dead_letters(
                    m["MessageId"], m["ReceiptHandle"], m["Body"], self.message_key, _sent_at(m)
                )
                if split and len(letters) > 1:
                    self._split(m["ReceiptHandle"], [letter.dispatch for letter in letters if letter.dispatch])
                    continue
                yield from letters

    def _split(self, receipt_handle: str, dispatches: list[Dispatch]) -> None:
        """Send each occurrence of a packed message to the DLQ as a message of its own, then delete the packed
        message. Raises QueueSendFailed (the packed message left in place) if SQS does not accept every one."""
        for start in range(0, len(dispatches), BATCH):
            pending: dict[str, Any] = {
                str(i): {
                    "Id": str(i),
                    # Keys for the operators, not the job (as SqsReadyQueue.dead_letter writes them)
                    "MessageBody": dispatch_to_body(replace(dispatch, job_copy=None), self.message_key),
                    "MessageAttributes": {"occurrence_key": {"DataType": "String", "StringValue": dispatch.key}},
                }
                for i, dispatch in enumerate(dispatches[start : start + BATCH])
            }
            self.split_ids.update(send_batch(self.client, self.url, pending))
        self.client.delete_message(QueueUrl=self.url, ReceiptHandle=receipt_handle)

    def delete(self, letter: DeadLetter) -> None:
        self.client.delete_message(QueueUrl=self.url, ReceiptHandle=letter.receipt_handle)

    def release(self, letter: DeadLetter) -> None:
        """Make a message we only looked at visible again at once."""
        self.client.change_message_visibility(
            QueueUrl=self.url, ReceiptHandle=letter.receipt_handle, VisibilityTimeout=0
        )


def redrive(
    letters: SqsDeadLetters,
    ledger: Ledger,
    queue: ReadyQueue,
    *,
    dry_run: bool,
    limit: int,
    purge_refused: bool = False,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    progress: Callable[[RedriveLine], None] = lambda line: None,
) -> list[RedriveLine]:
    """One pass over the dead letters present when it starts (see the module's docstring)."""
    lines: list[RedriveLine] = []
    untouched: list[DeadLetter] = []
    started = now()
    redriven: set[str] = set()
    try:
        for letter in letters.messages(limit, split=not dry_run):
            key = letter.dispatch.key if letter.dispatch is not None else None
            died_again = (
                letter.sent_at is not None and letter.sent_at > started and letter.message_id not in letters.split_ids
            )
            if (key is not None and key in redriven) or died_again:
                untouched.append(letter)  # died again after this pass began: the next command's to redrive
                continue
            line = _one(letter, letters, ledger, queue, dry_run, purge_refused, now, untouched)
            if key is not None and line.action in ("redriven", "would redrive"):
                redriven.add(key)
            lines.append(line)
            progress(line)
    finally:
        released: set[str] = set()  # a packed message's occurrences (a dry run) are letters of one message
        for letter in untouched:  # only looked at: visible again at once
            if letter.receipt_handle not in released:
                released.add(letter.receipt_handle)
                letters.release(letter)
    return lines


def _one(
    letter: DeadLetter,
    letters: SqsDeadLetters,
    ledger: Ledger,
    queue: ReadyQueue,
    dry_run: bool,
    purge_refused: bool,
    now: Callable[[], datetime],
    untouched: list[DeadLetter],
) -> RedriveLine:
    if letter.dispatch is None:
        untouched.append(letter)
        return RedriveLine(None, None, f"unreadable ({letter.error}); left in the DLQ")
    dispatch = letter.dispatch
    execution = ledger.get(dispatch.key)
    state = execution.state if execution else None
    line = RedriveLine(
        dispatch.key,
        state.value if state else None,
        "",
        execution.attempts if execution else None,
        execution.last_error if execution else None,
    )
    if state is not None and state.terminal and state != RunState.DEAD:
        line.action = f"refused: {state.value}"
        if purge_refused and not dry_run:
            letters.delete(letter)
            line.action += " (purged)"
        else:
            untouched.append(letter)
        return line
    if dry_run:
        untouched.append(letter)
        line.action = "would redrive"
        return line
    if state == RunState.DEAD:
        ledger.revive(dispatch.key, now(), "redriven from the dead-letter queue")
    redriven = Dispatch(
        dispatch.job_id,
        dispatch.tenant,
        dispatch.scheduled_for,
        now(),
        dispatch.version,
        dispatch.kind,
        dispatch.priority,
    )
    queue.send([redriven], now())
    letters.delete(letter)
    line.action = "redriven"
    return line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/redrive",
        description="Re-enqueue dead-lettered occurrences that have not succeeded, keeping their occurrence keys.",
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would happen; change nothing")
    parser.add_argument("--limit", type=int, default=1000, help="messages to look at (default 1000)")
    parser.add_argument("--purge-refused", action="store_true", help="delete DLQ messages of succeeded occurrences")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    args = parser.parse_args(argv)
    settings = Settings()
    if not settings.dlq_url or not settings.ready_queue_url:
        print("set SCHEDULER_DLQ_URL, SCHEDULER_READY_QUEUE_URL and SCHEDULER_EXECUTIONS_TABLE", file=sys.stderr)
        return 2
    key = message_key(resolve_secret(settings, "message_secret"))
    letters = SqsDeadLetters(settings.dlq_url, message_key=key)
    ledger = DynamoLedger(settings.executions_table)
    lanes = {"high": settings.ready_queue_high_url, "low": settings.ready_queue_low_url}
    queue = SqsReadyQueue(settings.ready_queue_url, settings.dlq_url, lanes=lanes, message_key=key)

    def show(line: RedriveLine) -> None:
        if args.json:
            print(json.dumps(line.__dict__), flush=True)
        else:
            print(f"{line.action:<28} {line.ledger_state or '-':<12} {line.occurrence_key or '-'}", flush=True)

    lines = redrive(
        letters, ledger, queue, dry_run=args.dry_run, limit=args.limit, purge_refused=args.purge_refused, progress=show
    )
    redriven = sum(1 for line in lines if line.action in ("redriven", "would redrive"))
    print(f"{len(lines)} dead letters, {redriven} {'to redrive' if args.dry_run else 'redriven'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
