"""Domain exceptions. Adapters translate storage errors (e.g. ConditionalCheckFailed) into these."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scheduler.core.model.job import Job
    from scheduler.core.ports import Execution, IdempotencyRecord


class SchedulerError(Exception):
    """Base of every domain error."""


class JobNotFound(SchedulerError):
    """No such job for this tenant (also said for another tenant's job: tenants never learn of others)."""


class VersionConflict(SchedulerError):
    """The job changed since the caller read it (optimistic concurrency)."""

    def __init__(self, current: Job | None) -> None:
        super().__init__("the job changed since it was read")
        self.current = current


class IdempotencyConflict(SchedulerError):
    """An `Idempotency-Key` was reused with a different request body."""


class IdempotentReplay(SchedulerError):
    """An `Idempotency-Key` was seen before with the same body; `record` names the job it created."""

    def __init__(self, record: IdempotencyRecord) -> None:
        super().__init__("replay of an earlier request")
        self.record = record


class ExternalIdTaken(SchedulerError):
    """Another job of the tenant has this external id (`job_id`, when the store could tell which)."""

    def __init__(self, external_id: str, job_id: str | None) -> None:
        super().__init__(f"external_id {external_id!r} is taken by another job of this tenant")
        self.external_id = external_id
        self.job_id = job_id


class InvalidRequest(SchedulerError):
    """A request that is well-formed JSON but cannot be honoured; `field` names the offending field."""

    def __init__(self, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.field = field


class PayloadTooLarge(SchedulerError):
    pass


class QuotaExceeded(SchedulerError):
    pass


class Throttled(SchedulerError):
    """The tenant may not do this now (a limit of its own is used up); it may in `retry_after` seconds. Nothing was
    done (HTTP 429 with Retry-After)."""

    def __init__(self, detail: str, retry_after: float) -> None:
        super().__init__(detail)
        self.detail = detail
        self.retry_after = retry_after


class InvalidState(SchedulerError):
    """The operation does not apply to the job in its current state (e.g. resume a cancelled job)."""


class ClaimLost(SchedulerError):
    """A bucket claim was lost to another sweeper (its epoch or owner no longer matches)."""


class ClaimRefused(SchedulerError):
    """The ledger refused a claim; `current` is the execution item as it stands. `void_copy`: the claim was made on
    the message's copy of the job, and the job changed since (`Ledger.void_copies`): read it and claim again."""

    def __init__(self, current: Execution | None, *, void_copy: bool = False) -> None:
        super().__init__("the job changed since this copy was sent" if void_copy else "occurrence is not claimable")
        self.current = current
        self.void_copy = void_copy


class LeaseLost(SchedulerError):
    """A heartbeat updated nothing: another worker holds the occurrence now. Abort without writing."""


class Fenced(SchedulerError):
    """A write carried a stale epoch (fencing token) and was rejected."""


class EventPublishFailed(SchedulerError):
    """The event bus did not accept every completion event; they stay in the outbox for the next attempt."""


class BackfillNotFound(JobNotFound):
    """No such backfill of this job for this tenant."""
