"""An occurrence an attempt has claimed: what every step after the claim works on."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduler.core.model.job import Job
from scheduler.core.ports import Dispatch, Execution, MessageControl
from scheduler.core.tenancy.concurrency import Permit


@dataclass(frozen=True)
class Claimed:
    """The claimed occurrence's job, its dispatch and message, the ledger item the claim wrote (its epoch is the
    fencing token of every write after it), the attempt's owner id, its execution slot and when it claimed."""

    job: Job
    dispatch: Dispatch
    execution: Execution
    owner: str
    permit: Permit
    message: MessageControl
    #: When the claim was made: its lease started then.
    at: datetime

    @property
    def key(self) -> str:
        return self.execution.key
