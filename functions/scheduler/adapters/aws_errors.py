"""AWS failures as target outcomes: one classification for every AWS target (docs/design.md §3.4 step 6).

Throttling and 5xx are retryable; a request that never left (connection refused, connect timeout) is retryable;
a request that left but whose answer never came (read timeout, connection closed) is ambiguous; every other
refusal (access denied, not found, validation) is permanent and says what the operator must fix.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    IncompleteReadError,
    NoRegionError,
    ParamValidationError,
    UnknownEndpointError,
    ValidationError,
)
from botocore.exceptions import ConnectionError as RequestNotSentError

from scheduler.core.ports import TargetFailure

#: Error codes that mean "slow down": the request was refused before it took effect.
THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "Throttled",
        "RequestThrottled",
        "RequestThrottledException",
        "AWS.SimpleQueueService.RequestThrottled",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceeded",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "SlowDown",
        "PriorRequestNotComplete",
        "EC2ThrottledException",
        "KMSThrottlingException",
        "KMSThrottling",
        "KmsThrottled",
    }
)

#: Error codes of transient service-side conditions, whatever their HTTP status.
TRANSIENT_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalError",
        "InternalFailure",
        "InternalException",
        "InternalServerError",
        "InternalServerException",
        "ServiceException",
        # Step Functions: too many running executions; starting again later succeeds.
        "ExecutionLimitExceeded",
        # Lambda: the function is being updated or is not ready yet (pending state).
        "ResourceConflictException",
        "ResourceNotReadyException",
        # Clock skew or credentials that expired mid-flight: refreshed on the next attempt.
        "RequestExpired",
        "ExpiredToken",
        "ExpiredTokenException",
    }
)

#: The worker may not do this: its IAM policy (or a key policy) lacks the grant.
ACCESS_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "AuthorizationError",
        "AuthorizationErrorException",
        "NotAuthorizedForSourceException",
        "NotAuthorizedForDetailTypeException",
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSInvalidStateException",
        "KMSNotFoundException",
        "KmsAccessDenied",
        "KmsDisabled",
        "KMS.AccessDeniedException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
    }
)

#: The target named in the job does not exist (in this account and region).
NOT_FOUND_CODES = frozenset(
    {
        "ResourceNotFound",
        "ResourceNotFoundException",
        "NotFound",
        "NotFoundException",
        "QueueDoesNotExist",
        "AWS.SimpleQueueService.NonExistentQueue",
        "StateMachineDoesNotExist",
        "StateMachineDeleting",
    }
)


def _retry_after(response: dict[str, Any]) -> float | None:
    """A service's own hint of when to come back (Lambda's `retryAfterSeconds`, or a Retry-After header)."""
    headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
    for value in (response.get("retryAfterSeconds"), headers.get("retry-after")):
        try:
            if value is not None:
                return max(0.0, float(value))
        except (TypeError, ValueError):
            continue
    return None


def classify_error_code(
    code: str, message: str, status: int | None, target: str, grant: str, retry_after: float | None = None
) -> TargetFailure:
    """Classify an AWS error code (from an exception or a failed batch entry) as a TargetFailure.

    `target` names what was called (for the message); `grant` tells the operator how to give the worker access.
    Access and not-found codes are checked before the status, because some of them come with a 5xx (Lambda's
    KMS errors are 502) yet no retry can fix them.
    """
    detail = f"{code}: {message}" if message else code
    if code in ACCESS_CODES:
        return TargetFailure("permanent", f"the worker may not call {target} ({detail}); {grant}")
    if code in NOT_FOUND_CODES:
        return TargetFailure(
            "permanent",
            f"{target} does not exist in the worker's account and region ({detail}); "
            "fix the job's target or create the resource",
        )
    if code in THROTTLING_CODES:
        return TargetFailure("retryable", f"{target} throttled the call ({detail})", retry_after)
    if code in TRANSIENT_CODES or (status is not None and (status >= 500 or status in (408, 429))):
        return TargetFailure("retryable", f"{target} failed transiently ({detail})", retry_after)
    return TargetFailure(
        "permanent",
        f"{target} refused the call ({detail}); not retried: fix the job's target or payload",
    )


def classify_aws_error(exc: ClientError | BotoCoreError, target: str, grant: str) -> TargetFailure:
    """Classify what boto3 raised for one target call (docs/design.md §3.4 step 6).

    - a service error (ClientError): by its code and HTTP status (`classify_error_code`);
    - the request never left (connection refused, DNS, connect timeout, TLS handshake): retryable;
    - the request left but the answer did not arrive (read timeout, connection closed, truncated answer):
      ambiguous - the effect may have happened;
    - the request could not be built (invalid parameters, no region or endpoint): permanent;
    - anything else botocore raises before sending (e.g. credentials not yet available): retryable.
    """
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return classify_error_code(
            str(error.get("Code", "Unknown")),
            str(error.get("Message", "")),
            int(status) if status is not None else None,
            target,
            grant,
            _retry_after(dict(exc.response)),
        )
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, RequestNotSentError):
        return TargetFailure("retryable", f"could not reach {target}; nothing was sent ({detail})")
    if isinstance(exc, HTTPClientError | IncompleteReadError):
        return TargetFailure("ambiguous", f"the call to {target} was sent but its outcome is unknown ({detail})")
    if isinstance(exc, ParamValidationError | ValidationError | NoRegionError | UnknownEndpointError):
        return TargetFailure("permanent", f"cannot build the call to {target} ({detail}); fix the job's target")
    return TargetFailure("retryable", f"the call to {target} failed before it was sent ({detail})")
