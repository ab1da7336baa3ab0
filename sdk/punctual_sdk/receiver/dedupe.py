"""Dedupe on the occurrence key and fencing, with a record per key in a store (docs/receiving.md).

The record of an occurrence key holds the highest fencing token seen, a state (`IN_PROGRESS` with an owner and a
lease, or `COMPLETED` with the handler's result as JSON) and an expiry. `OccurrenceGuard.run` decides, per
delivery:

1. no record (or an expired one), or an `IN_PROGRESS` one whose lease has ended and whose token is not higher:
   claim it (one conditional write) and run the handler;
2. a record with a higher fencing token: refuse (StaleFencingToken, 409), the handler does not run;
3. `COMPLETED`: return the first result (the handler does not run);
4. `IN_PROGRESS` under a live lease: refuse for now (InProgress, 429 with Retry-After: the worker retries).

In cases 3 and 4 a higher token than the record's is written to it, so the attempt it supersedes is refused.
The handler's success completes the record (conditional on still owning it); its exception releases the record
(ends the lease, keeps the token) and propagates, so the scheduler's retry runs the handler again.

A record keeps the result only up to `max_result_bytes` (encoded): a larger one is recorded as not kept, and its
duplicates get `Outcome(kept=False)`. A handler that succeeded is never run again because its result could not be
recorded: when the store fails to complete the record, a minimal record is tried; when even that fails, the
failure is logged and the handler's result returned as if recorded (the record stays in progress, so a delivery
within its lease is told to retry, and one after it runs the handler again).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

from punctual_sdk.receiver.errors import InProgress, InvalidDelivery, LeaseLost, StaleFencingToken

State = Literal["IN_PROGRESS", "COMPLETED"]
IN_PROGRESS: State = "IN_PROGRESS"
COMPLETED: State = "COMPLETED"

DEFAULT_LEASE_SECONDS = 60.0
#: How long a record is kept: longer than punctual's retries of one occurrence can last.
DEFAULT_RECORD_TTL_SECONDS = 7 * 24 * 3600
#: The largest result a record keeps, encoded (UTF-8 bytes): far below DynamoDB's 400 KB item.
DEFAULT_MAX_RESULT_BYTES = 128 * 1024
#: A record's result when the result was not kept: this, then JSON with its size and SHA-256. No JSON text starts
#: with `~`, so it cannot be taken for a kept result (an `encode` of one's own must not produce it either).
NOT_KEPT = "~punctual:not-kept "
#: How many times a claim is tried again when the record changed between the write and the read.
_CLAIM_TRIES = 5

logger = logging.getLogger("punctual_sdk.receiver")


@dataclass(frozen=True)
class DeliveryRecord:
    """What a store keeps per occurrence key."""

    occurrence_key: str
    #: The highest fencing token seen for the key.
    fencing_token: int
    state: State
    #: Which delivery holds the record while it is IN_PROGRESS.
    owner: str
    #: Unix seconds; past it, another delivery may take an IN_PROGRESS record over.
    lease_expires_at: float
    #: Unix seconds; past it, the record counts as absent (the store may delete it).
    expires_at: int
    #: The handler's result as JSON, once COMPLETED.
    result: str | None = None
    job_id: str = ""


class DedupeStore(Protocol):
    """Where records live. Each method is one atomic step (a conditional write in DynamoDB)."""

    def claim(self, record: DeliveryRecord, now: float) -> DeliveryRecord | None:
        """Write `record` (IN_PROGRESS) if the key has no record, or its record expired (`expires_at <= now`), or
        it is IN_PROGRESS with its lease ended (`lease_expires_at <= now`) and a fencing token not higher than
        `record`'s. Returns None when written, else the record found (unchanged)."""
        ...

    def raise_token(self, occurrence_key: str, fencing_token: int) -> None:
        """Set the record's fencing token to `fencing_token` if that is higher; nothing else changes."""
        ...

    def complete(self, occurrence_key: str, owner: str, result: str) -> bool:
        """Mark the record COMPLETED with `result` if it is IN_PROGRESS and held by `owner`; False if not."""
        ...

    def release(self, occurrence_key: str, owner: str) -> None:
        """End the lease of the record at once if it is IN_PROGRESS and held by `owner`: the next delivery of
        the key takes it over. The fencing token stays."""
        ...

    def get(self, occurrence_key: str) -> DeliveryRecord | None:
        """The record of the key, or None."""
        ...


class InMemoryDedupeStore:
    """A DedupeStore in a dict, for tests and single-process receivers (records die with the process)."""

    def __init__(self) -> None:
        self.records: dict[str, DeliveryRecord] = {}
        self._lock = threading.Lock()

    def claim(self, record: DeliveryRecord, now: float) -> DeliveryRecord | None:
        with self._lock:
            found = self.records.get(record.occurrence_key)
            if (
                found is None
                or found.expires_at <= now
                or (
                    found.state == IN_PROGRESS
                    and found.lease_expires_at <= now
                    and found.fencing_token <= record.fencing_token
                )
            ):
                self.records[record.occurrence_key] = record
                return None
            return found

    def raise_token(self, occurrence_key: str, fencing_token: int) -> None:
        with self._lock:
            found = self.records.get(occurrence_key)
            if found is not None and found.fencing_token < fencing_token:
                self.records[occurrence_key] = replace(found, fencing_token=fencing_token)

    def complete(self, occurrence_key: str, owner: str, result: str) -> bool:
        with self._lock:
            found = self.records.get(occurrence_key)
            if found is None or found.state != IN_PROGRESS or found.owner != owner:
                return False
            self.records[occurrence_key] = replace(found, state=COMPLETED, result=result)
            return True

    def release(self, occurrence_key: str, owner: str) -> None:
        with self._lock:
            found = self.records.get(occurrence_key)
            if found is not None and found.state == IN_PROGRESS and found.owner == owner:
                self.records[occurrence_key] = replace(found, lease_expires_at=0.0)

    def get(self, occurrence_key: str) -> DeliveryRecord | None:
        with self._lock:
            return self.records.get(occurrence_key)


@dataclass(frozen=True)
class Claim:
    """This delivery holds the occurrence's in-progress record: run the handler, then complete or release."""

    occurrence_key: str
    owner: str


@dataclass(frozen=True)
class Outcome:
    """What `OccurrenceGuard.run` returns: the handler's result, and whether it comes from an earlier delivery.
    `kept` is False for a duplicate whose first result was too large to keep (`result` is then None)."""

    result: Any
    duplicate: bool
    kept: bool = True


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class OccurrenceGuard:
    """Runs a handler once per occurrence key, refusing superseded fencing tokens (see the module docstring)."""

    def __init__(
        self,
        store: DedupeStore,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        record_ttl_seconds: int = DEFAULT_RECORD_TTL_SECONDS,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        clock: Callable[[], float] = time.time,
        encode: Callable[[Any], str] = _json,
        decode: Callable[[str], Any] = json.loads,
    ) -> None:
        if lease_seconds <= 0 or record_ttl_seconds <= lease_seconds or max_result_bytes < 1024:
            raise ValueError(
                "lease_seconds must be > 0, record_ttl_seconds longer than the lease and max_result_bytes >= 1024"
            )
        self.store = store
        self.lease_seconds = lease_seconds
        self.record_ttl_seconds = record_ttl_seconds
        self.max_result_bytes = max_result_bytes
        self._clock = clock
        #: How a result is kept (JSON by default; `str` for what JSON cannot hold) and read back for duplicates.
        self.encode = encode
        self.decode = decode

    def claim(self, occurrence_key: str, fencing_token: int, job_id: str = "") -> Claim | Outcome:
        """Claim the occurrence for this delivery (a Claim: run the handler, then `complete` or `release`), or
        the first delivery's Outcome when it completed. Raises StaleFencingToken when the token is lower than one
        seen for the key, InProgress while another delivery holds a live lease."""
        if not isinstance(occurrence_key, str) or not occurrence_key:
            raise InvalidDelivery("the occurrence key is empty")
        if isinstance(fencing_token, bool) or not isinstance(fencing_token, int) or fencing_token < 0:
            raise InvalidDelivery(f"the fencing token must be a non-negative integer, not {fencing_token!r}")
        owner = uuid.uuid4().hex
        for _ in range(_CLAIM_TRIES):
            now = self._clock()
            mine = DeliveryRecord(
                occurrence_key=occurrence_key,
                fencing_token=fencing_token,
                state=IN_PROGRESS,
                owner=owner,
                lease_expires_at=now + self.lease_seconds,
                expires_at=int(now + self.record_ttl_seconds),
                job_id=job_id,
            )
            found = self.store.claim(mine, now)
            if found is None:
                return Claim(occurrence_key, owner)
            if found.fencing_token > fencing_token:
                raise StaleFencingToken(
                    f"fencing token {fencing_token} is lower than {found.fencing_token}, already seen for "
                    f"occurrence {occurrence_key}: this attempt was superseded and does not run"
                )
            if found.state == COMPLETED:
                self.store.raise_token(occurrence_key, fencing_token)
                if found.result is not None and found.result.startswith(NOT_KEPT):
                    return Outcome(None, duplicate=True, kept=False)
                return Outcome(self.decode(found.result) if found.result is not None else None, duplicate=True)
            if found.lease_expires_at > now:
                self.store.raise_token(occurrence_key, fencing_token)
                wait = max(1.0, found.lease_expires_at - now)
                raise InProgress(
                    f"occurrence {occurrence_key} is being handled by another delivery; retry in {wait:.0f} s",
                    retry_after=wait,
                )
            # The record changed between the store's check and ours (its lease just ended): claim again.
        raise InProgress(f"occurrence {occurrence_key} is contended; retry", retry_after=1.0)

    def complete(self, claim: Claim, result: Any, *, minimal: Any = None) -> Outcome:
        """Record the handler's result. A result whose encoding is larger than `max_result_bytes` is not kept:
        `minimal` is recorded in its place (when given and small enough), else a not-kept marker. Raises LeaseLost
        when the lease ran out and another delivery took over. Never raises the store's failure: the handler has
        run, so its result is returned even when nothing could be recorded (see the module docstring)."""
        full = self.encode(result)
        small = self._minimal(full, minimal)
        first = full if len(full.encode()) <= self.max_result_bytes else small
        try:
            if self.store.complete(claim.occurrence_key, claim.owner, first):
                return Outcome(result, duplicate=False)
            raise self._lease_lost(claim)
        except LeaseLost:
            raise
        except Exception:
            logger.exception(
                "recording the result of occurrence %s failed; recording a minimal one", claim.occurrence_key
            )
        try:
            if self.store.complete(claim.occurrence_key, claim.owner, small) or self._completed_by(claim):
                return Outcome(result, duplicate=False)
            raise self._lease_lost(claim)
        except LeaseLost:
            raise
        except Exception:
            logger.exception(
                "occurrence %s: the handler succeeded but its completion could not be recorded; the record stays in "
                "progress until its lease ends (a delivery after that runs the handler again)",
                claim.occurrence_key,
            )
        return Outcome(result, duplicate=False)

    def _minimal(self, full: str, minimal: Any) -> str:
        """What a record keeps of a result it cannot keep whole: `minimal` encoded, if given and small enough,
        else the not-kept marker with the result's size and digest."""
        if minimal is not None:
            text = self.encode(minimal)
            if len(text.encode()) <= self.max_result_bytes:
                return text
        data = full.encode()
        return NOT_KEPT + _json({"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})

    def _completed_by(self, claim: Claim) -> bool:
        """Whether the record is COMPLETED by this claim (a write that failed on the way back may have landed)."""
        record = self.store.get(claim.occurrence_key)
        return record is not None and record.state == COMPLETED and record.owner == claim.owner

    def _lease_lost(self, claim: Claim) -> LeaseLost:
        return LeaseLost(
            f"the handler of occurrence {claim.occurrence_key} outlived its {self.lease_seconds:g} s lease "
            "and another delivery took the record over; its result is not recorded (make the lease longer)"
        )

    def release(self, claim: Claim) -> None:
        """End the claim's lease at once (the handler failed): the next delivery runs the handler again."""
        self.store.release(claim.occurrence_key, claim.owner)

    def run(self, occurrence_key: str, fencing_token: int, handler: Callable[[], Any], job_id: str = "") -> Outcome:
        """Run `handler` once per occurrence key: `claim`, then `complete` with its result, or `release` when it
        raises (the exception propagates)."""
        claimed = self.claim(occurrence_key, fencing_token, job_id)
        if isinstance(claimed, Outcome):
            return claimed
        try:
            result = handler()
            self.encode(result)  # a result that cannot be kept fails here, before the record says COMPLETED
        except BaseException:
            self.release(claimed)
            raise
        return self.complete(claimed, result)
