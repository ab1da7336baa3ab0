"""A typed client of the punctual API (v1): every operation, pagination, and retries that are safe.

    from punctual_sdk.client import Client

    client = Client.local()                                   # the local stack, bearer token "dev-token"
    client = Client.aws("https://abc.execute-api.eu-west-1.amazonaws.com/prod")   # SigV4, the AWS chain
    job = client.create({"schedule": {"type": "cron", "expression": "0 9 * * 1-5"},
                         "target": {"type": "http", "url": "https://example.com/hook"}})

Retries: a throttled request (429) is sent again after its Retry-After (or a jittered backoff); a 5xx or a lost
connection is retried only for requests that are safe to repeat (reads, pause/resume/cancel, a patch without
If-Match, and creates, which always carry an Idempotency-Key, the same on every retry). Never retried: trigger,
backfill start and resolve, whose repeat would act twice. A refusal raises a typed `ApiError` (punctual_sdk.errors).
"""

from __future__ import annotations

from typing import Any

from punctual_sdk.auth import BearerAuth, SigV4Auth
from punctual_sdk.calls import DEFAULT_LOCAL_URL, MAX_BATCH, USER_AGENT, ApiCalls, BulkAction, Definition, Outcome
from punctual_sdk.errors import InvalidArgument
from punctual_sdk.resources.backfills import BackfillsApi
from punctual_sdk.resources.bulk import BulkApi
from punctual_sdk.resources.flow_controls import FlowControlsApi
from punctual_sdk.resources.jobs import JobsApi
from punctual_sdk.resources.runs import RunsApi
from punctual_sdk.resources.service import ServiceApi
from punctual_sdk.resources.signing_keys import SigningKeysApi


class Client(JobsApi, SigningKeysApi, RunsApi, BackfillsApi, BulkApi, FlowControlsApi, ServiceApi, ApiCalls):
    """Every endpoint of the punctual API (v1) as a typed method.

    `retries` bounds the extra attempts of one call; the wait before each grows from `backoff` seconds (doubling,
    full jitter) up to `max_backoff`. A Retry-After longer than `max_backoff` is not waited for: the error is
    raised at once (`TooManyRequests.retry_after` says how long the server asked for).
    """

    @classmethod
    def local(cls, base_url: str = DEFAULT_LOCAL_URL, token: str = "dev-token", **options: Any) -> Client:
        """A client of the local stack (`scripts/dev`), which maps bearer tokens to tenants."""
        return cls(base_url, BearerAuth(token), **options)

    @classmethod
    def aws(cls, base_url: str, *, session: Any = None, region: str | None = None, **options: Any) -> Client:
        """A client of a deployed API (IAM auth): SigV4 with the standard AWS credential chain (needs the `aws`
        extra). The region comes from an execute-api URL, else `region`, else the session."""
        auth = SigV4Auth(region, session) if region else SigV4Auth.for_url(base_url, session)
        return cls(base_url, auth, **options)


__all__ = [
    "DEFAULT_LOCAL_URL",
    "MAX_BATCH",
    "USER_AGENT",
    "ApiCalls",
    "BulkAction",
    "Client",
    "Definition",
    "InvalidArgument",
    "Outcome",
]
