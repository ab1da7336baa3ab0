"""The receiver kit's exceptions. Each carries the HTTP status a receiver answers with, chosen for what punctual's
worker does with it (docs/receiving.md): 401 and 409 are not retried, 429 and 5xx are."""

from __future__ import annotations


class ReceiverError(Exception):
    """Base of the receiver kit's exceptions; `status` is the HTTP answer and `detail` says what to fix."""

    status = 500

    def __init__(self, detail: str, *, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        #: Seconds after which the same delivery may succeed (sent as Retry-After), or None.
        self.retry_after = retry_after


class InvalidSignature(ReceiverError):
    """The call's signature is missing, malformed or matches none of the job's keys: not from punctual (401)."""

    status = 401


class StaleRequest(InvalidSignature):
    """The signature's timestamp is outside the clock tolerance: a replay of a captured call, or a skewed clock."""


class UnknownKey(InvalidSignature):
    """None of the call's key ids is among the job's keys, even after fetching them again (rate limited)."""


class KeysUnavailable(ReceiverError):
    """The job's keys cannot be had now: the receiver's key fetches are rate limited and none is left, the job's
    keys were fetched moments ago, or the fetch failed. Answered 503 with Retry-After, which punctual retries."""

    status = 503


class InvalidDelivery(ReceiverError):
    """An event or request that is not a punctual delivery: a field is missing or malformed (400)."""

    status = 400


class RequestTooLarge(ReceiverError):
    """The request's body is larger than the receiver accepts (`max_body_bytes`): refused before it is read
    whole, let alone verified (413, not retried)."""

    status = 413


class StaleFencingToken(ReceiverError):
    """The attempt's fencing token is lower than one already seen for its occurrence key: a superseded attempt
    (a worker paused past its lease). Refused without running the handler; 409 is not retried."""

    status = 409


class InProgress(ReceiverError):
    """Another delivery of the same occurrence holds the in-progress record and its lease has not run out.
    Answered with 429 and Retry-After, which punctual's worker retries (a 409 would end the occurrence)."""

    status = 429


class LeaseLost(ReceiverError):
    """The handler finished after its in-progress lease ran out and another delivery took the record over: the
    result is not recorded (the other delivery's is). Make the lease longer than the handler's longest run."""

    status = 409
