"""What the worker does with an occurrence's message once a step has decided: acknowledge it, or hide it and keep it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from scheduler.core.execution.retry import MAX_HIDE_SECONDS


class Why(StrEnum):
    """Why the worker acknowledges or keeps a message (the control flow tests these, never free text)."""

    RECORDED = "recorded"  #: the attempt's outcome is in the ledger (acknowledged; kept while a retry waits)
    EARLY = "early"  #: the message came before its fire time: back at it
    NO_SUCH_JOB = "no such job"
    LEFT_TO_RESUME = "left to the resume"  #: fell due while paused: the resume decides it
    THROTTLED = "throttled"  #: the tenant's execution budget is full
    CLAIM_REFUSED = "claim refused without an item"
    ALREADY = "already"  #: the occurrence is already final (detail: its state)
    RUNNING_ELSEWHERE = "running elsewhere"  #: another worker holds a live lease
    RECONCILING = "reconciling"  #: an ambiguous at-most-once attempt waits for an operator
    RACED = "raced"  #: the ledger changed between read and claim: look again
    RETRY_NOT_DUE = "retry not due"
    NOT_CLAIMABLE = "not claimable"  #: (detail: its state)
    FENCED = "fenced"  #: a newer attempt took over: this one's writes are refused
    BUFFERED = "buffered"  #: parked behind the running occurrence (buffer_one, catch-ups)
    LEASE_LOST = "lease lost"
    RETRY = "retry"  #: a failed attempt, retried after its backoff
    DEAD = "dead"  #: out of attempts: dead-lettered
    SETTLED = "settled"  #: a message of several occurrences: each recorded, final, or sent again on its own


@dataclass(frozen=True)
class Outcome:
    """What to do with the SQS message: acknowledge (delete) it, or hide it for `hide_seconds` and keep it."""

    ack: bool
    why: Why
    hide_seconds: int = 0
    #: What else a log line or a trace should say (e.g. the state an occurrence is already in).
    detail: str = ""

    @property
    def reason(self) -> str:
        """`why`, and the detail if any: for logs, traces and the worker's report."""
        return f"{self.why.value}: {self.detail}" if self.detail else self.why.value

    @classmethod
    def acknowledge(cls, why: Why, detail: str = "") -> Outcome:
        return cls(True, why, detail=detail)

    @classmethod
    def hide(cls, seconds: float, why: Why, detail: str = "") -> Outcome:
        return cls(False, why, max(1, min(MAX_HIDE_SECONDS, math.ceil(seconds))), detail)
