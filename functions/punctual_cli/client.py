"""The CLI's API client: the SDK's `punctual_sdk.client.Client`, with job definitions and backfill ranges checked
here with the core's own models (`scheduler.core.model.job`) before they are sent, so a mistake fails with the
messages the server would give and nothing is sent.

Requests, auth (a bearer token locally, SigV4 on AWS), retries, pagination, the typed answers and errors are the
SDK's; this module re-exports the names the CLI uses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ValidationError

from punctual_cli.api_errors import InvalidDefinition, definition_problem
from punctual_sdk.auth import EXECUTE_API_HOST, Auth, BearerAuth, SigV4Auth, is_execute_api, region_of
from punctual_sdk.client import Client, Definition, Outcome
from punctual_sdk.errors import ApiError, AuthError, FieldError, TransportError
from punctual_sdk.models import Backfill, Job, Page, Run, Triggered
from punctual_sdk.transport import HttpRequest, HttpResponse, Transport, urllib_transport
from scheduler.core.model.job import MAX_PAYLOAD_BYTES, BackfillRequest, JobSpec, merge_patch, payload_size

USER_AGENT = "punctual-cli/0.1"


def validate_definition(definition: Mapping[str, Any]) -> JobSpec:
    """Validate a job definition as `POST /v1/jobs` does; raise `InvalidDefinition` with the API's messages."""
    try:
        spec = JobSpec.model_validate(dict(definition))
    except ValidationError as exc:
        raise definition_problem(exc) from None
    size = payload_size(spec.payload)
    if size > MAX_PAYLOAD_BYTES:
        raise InvalidDefinition(
            413, "Payload Too Large", f"the payload is {size} bytes; the limit is {MAX_PAYLOAD_BYTES} bytes"
        )
    return spec


def _checked(definition: Definition) -> JobSpec:
    if isinstance(definition, JobSpec):
        return definition
    if isinstance(definition, BaseModel):
        definition = definition.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return validate_definition(definition)


class SchedulerClient(Client):
    """The SDK's client, checking definitions and backfill ranges with the core's models before sending
    (`InvalidDefinition`, nothing sent)."""

    def __init__(self, base_url: str, auth: Auth | None = None, **options: Any) -> None:
        options.setdefault("user_agent", USER_AGENT)
        super().__init__(base_url, auth, **options)

    def create(self, definition: Definition, idempotency_key: str | None = None) -> Job:
        return super().create(_checked(definition), idempotency_key)

    def create_batch(self, items: Sequence[Definition | tuple[Definition, str | None]]) -> list[Job | ApiError]:
        checked: list[Definition | tuple[Definition, str | None]] = [
            (_checked(item[0]), item[1]) if isinstance(item, tuple) else _checked(item) for item in items
        ]
        return super().create_batch(checked)

    def start_backfill(self, job_id: str, range_from: datetime, range_to: datetime) -> Backfill:
        """Checked here as the API checks it ('to' after 'from'; `InvalidDefinition` when not)."""
        try:
            request = BackfillRequest.model_validate({"from": range_from, "to": range_to})
        except ValidationError as exc:
            raise definition_problem(exc) from None
        return super().start_backfill(job_id, request.range_from, request.to)


__all__ = [
    "EXECUTE_API_HOST",
    "USER_AGENT",
    "ApiError",
    "Auth",
    "AuthError",
    "Backfill",
    "BearerAuth",
    "FieldError",
    "HttpRequest",
    "HttpResponse",
    "InvalidDefinition",
    "Job",
    "Outcome",
    "Page",
    "Run",
    "SchedulerClient",
    "SigV4Auth",
    "Transport",
    "TransportError",
    "Triggered",
    "definition_problem",
    "is_execute_api",
    "merge_patch",
    "region_of",
    "urllib_transport",
    "validate_definition",
]
