"""The CLI's client (the SDK's, tested in tests/sdk/client): definitions and backfill ranges checked with the core's
models before anything is sent, and SigV4 signing from the CLI's sessions. A scripted transport stands in for the
network."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.credentials import Credentials
from pydantic import ValidationError

from punctual_cli.client import (
    BearerAuth,
    HttpRequest,
    InvalidDefinition,
    SchedulerClient,
    SigV4Auth,
    validate_definition,
)
from punctual_sdk.models import Job, JobState
from scheduler.core.model.job import JobSpec
from tests.cli.fakes import BASE, FakeApi, job_json

pytestmark = pytest.mark.usefixtures("no_network")

DEFINITION = {
    "name": "report",
    "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
    "target": {"type": "http", "url": "https://example.com/hook"},
    "payload": {"report": "daily"},
}


def test_create_sends_the_definition_with_token_and_idempotency_key() -> None:
    # Given an API that creates the job
    api = FakeApi({"POST /v1/jobs": (201, job_json(name="report"))})
    client = SchedulerClient(BASE, BearerAuth("t-alice"), transport=api)

    # When a definition is submitted with a key
    job = client.create(DEFINITION, idempotency_key="report-2026")

    # Then the body is the definition as written, with the bearer token and the key
    method, path, _, body, headers = api.sent()
    assert (method, path) == ("POST", "/v1/jobs")
    assert body == {**DEFINITION, "target": {"type": "http", "url": "https://example.com/hook"}}
    assert headers["Authorization"] == "Bearer t-alice"
    assert headers["Idempotency-Key"] == "report-2026"
    assert headers["Content-Type"] == "application/json"
    # And the answer is the SDK's typed job
    assert isinstance(job, Job)
    assert job.state is JobState.ACTIVE
    assert job.next_run_at == datetime(2026, 1, 6, 8, tzinfo=UTC)


BAD_DEFINITIONS = [
    {**DEFINITION, "schedule": {"type": "cron", "expression": "61 9 * * *"}},
    {**DEFINITION, "schedule": {"type": "cron", "expression": "0 9 * * *", "timezone": "Mars/Olympus"}},
    {**DEFINITION, "colour": "blue"},
    {**DEFINITION, "retry": {"max_attempts": 0, "initial_backoff_seconds": 10, "max_backoff_seconds": 5}},
    {**DEFINITION, "schedule": {"type": "once"}},
    {**DEFINITION, "target": {"type": "sns", "topic_arn": "not-an-arn"}},
]


@pytest.mark.parametrize("definition", BAD_DEFINITIONS)
def test_an_invalid_definition_fails_before_sending_with_the_servers_messages(definition: dict[str, Any]) -> None:
    from scheduler.handlers.api import validation_problem

    api = FakeApi()
    with pytest.raises(InvalidDefinition) as refused:
        SchedulerClient(BASE, transport=api).create(definition)

    # Nothing was sent, and the fields and messages are the ones the API's 422 carries
    assert api.requests == []
    with pytest.raises(ValidationError) as server_side:
        JobSpec.model_validate(definition)
    expected = validation_problem(server_side.value)
    assert refused.value.status == expected.status == 422
    assert refused.value.detail == expected.detail
    assert [{"field": e.field, "message": e.message} for e in refused.value.errors] == expected.extra["errors"]


def test_a_payload_over_the_limit_is_refused_as_the_api_would() -> None:
    with pytest.raises(InvalidDefinition) as refused:
        validate_definition({**DEFINITION, "payload": "x" * 70_000})

    assert refused.value.status == 413
    assert "the limit is 65536 bytes" in refused.value.detail


def test_a_backfill_range_backwards_is_refused_before_sending() -> None:
    api = FakeApi()

    with pytest.raises(InvalidDefinition) as refused:
        api.client().start_backfill("job-1", datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))

    assert api.requests == []
    assert refused.value.status == 422


class FixedSession:
    region_name = "us-east-1"

    def get_credentials(self) -> Credentials:
        return Credentials("AKIDEXAMPLE", "secret", "session-token")


def test_sigv4_signs_for_execute_api_in_the_region_of_the_url() -> None:
    url = "https://abc123.execute-api.eu-west-1.amazonaws.com/prod/"
    signer = SigV4Auth.for_url(url, FixedSession())  # type: ignore[arg-type]
    request = HttpRequest("POST", url + "v1/jobs", {"Content-Type": "application/json"}, b"{}")

    signed = signer.sign(request)

    assert signed.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/execute-api/aws4_request" in signed.headers["Authorization"]
    assert signed.headers["X-Amz-Security-Token"] == "session-token"
    assert "X-Amz-Date" in signed.headers
