"""The client library: requests built from the shared models, problem+json read into ApiError, pages followed,
safe retries, and SigV4 signing. A scripted transport stands in for the network."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.credentials import Credentials
from pydantic import ValidationError

from punctual_cli.client import (
    ApiError,
    BearerAuth,
    HttpRequest,
    InvalidDefinition,
    SchedulerClient,
    SigV4Auth,
    TransportError,
    region_of,
    validate_definition,
)
from scheduler.core.model import JobSpec, JobState, RunState
from tests.cli.fakes import BASE, FakeApi, job_json, problem

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
    # And the answer is typed with the core's models
    assert isinstance(job.spec, JobSpec)
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


def test_a_problem_becomes_an_api_error_with_its_fields() -> None:
    api = FakeApi({"PATCH /v1/jobs/job-1": problem(
        422, "Unprocessable Content", "schedule.expression: minute must be 0-59, not 61",
        errors=[{"field": "schedule.expression", "message": "minute must be 0-59, not 61"}],
    )})  # fmt: skip

    with pytest.raises(ApiError) as error:
        api.client().update("job-1", {"schedule": {"expression": "61 * * * *"}})

    assert error.value.status == 422
    assert error.value.detail == "schedule.expression: minute must be 0-59, not 61"
    assert error.value.errors[0].field == "schedule.expression"


def test_an_error_page_that_is_not_json_still_gives_an_api_error() -> None:
    def html(request: HttpRequest) -> tuple[int, Any]:
        return 403, "<html>Forbidden</html>"

    with pytest.raises(ApiError) as error:
        FakeApi({"GET /v1/jobs/job-1": html}).client().get("job-1")

    assert error.value.status == 403
    assert error.value.title == "HTTP 403"


def test_update_sends_if_match_as_a_quoted_version() -> None:
    api = FakeApi({"PATCH /v1/jobs/job-1": (200, job_json(version=4))})

    job = api.client().update("job-1", {"name": "x"}, if_match=3)

    assert api.sent()[4]["If-Match"] == '"3"'
    assert job.version == 4


def test_rotate_signing_key_sends_the_overlap_and_if_match_and_returns_the_keys() -> None:
    keys = [{"key_id": "k1.2", "key": "new", "version": 2, "expires_at": None},
            {"key_id": "k1", "key": "old", "version": 1, "expires_at": "2026-01-06T09:00:00Z"}]  # fmt: skip
    api = FakeApi({"POST /v1/jobs/job-1/signing-keys/rotate": (200, {"key_version": 2, "keys": keys})})

    rotated = api.client().rotate_signing_key("job-1", overlap_seconds=3600, if_match=1)

    _, _, _, body, headers = api.sent()
    assert (body, headers["If-Match"]) == ({"overlap_seconds": 3600}, '"1"')
    assert rotated == {"k1.2": "new", "k1": "old"}


def test_list_query_and_iterating_every_page() -> None:
    pages = {None: (["a", "b"], "c1"), "c1": (["c"], "c2"), "c2": (["d"], None)}

    def page(request: HttpRequest) -> tuple[int, Any]:
        cursor = dict(p.split("=") for p in request.url.split("?")[1].split("&")).get("cursor")
        ids, following = pages[cursor]
        return 200, {"jobs": [job_json(i, state="PAUSED") for i in ids], "next_cursor": following}

    api = FakeApi({"GET /v1/jobs": page})

    jobs = list(api.client().iter_jobs("paused", page_size=2))

    assert [j.job_id for j in jobs] == ["a", "b", "c", "d"]
    assert api.sent(0)[2] == {"state": ["PAUSED"], "limit": ["2"]}
    assert api.sent(2)[2] == {"state": ["PAUSED"], "limit": ["2"], "cursor": ["c2"]}


def test_resolve_takes_the_job_from_the_key_and_encodes_the_key() -> None:
    key = "job-1:2026-12-01T08:00:00Z"
    run = {"occurrence_key": key, "scheduled_for": "2026-12-01T08:00:00Z", "state": "SUCCEEDED", "attempts": 1}
    api = FakeApi({"POST /v1/jobs/job-1/runs/job-1%3A2026-12-01T08%3A00%3A00Z/resolve": (200, run)})

    resolved = api.client().resolve(key, "succeeded", note="charged, checked in the ledger")

    assert resolved.state is RunState.SUCCEEDED
    assert api.sent()[3] == {"outcome": "succeeded", "note": "charged, checked in the ledger"}


def test_reads_are_retried_once_after_a_gateway_error() -> None:
    answers = iter([problem(503, "Service Unavailable", "try again"), (200, job_json())])
    api = FakeApi({"GET /v1/jobs/job-1": lambda request: next(answers)})

    assert api.client().get("job-1").job_id == "job-1"
    assert len(api.requests) == 2


def test_a_create_without_a_key_is_never_repeated() -> None:
    api = FakeApi({"POST /v1/jobs": problem(503, "Service Unavailable", "try again")})

    with pytest.raises(ApiError):
        api.client().create(DEFINITION)
    assert len(api.requests) == 1


def test_a_create_with_a_key_is_repeated_after_a_network_failure() -> None:
    calls = {"n": 0}

    def flaky(request: HttpRequest, timeout: float) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise TransportError("connection reset")
        return FakeApi({"POST /v1/jobs": (201, job_json())})(request, timeout)

    job = SchedulerClient(BASE, transport=flaky, retry_delay=0).create(DEFINITION, idempotency_key="k")

    assert job.job_id == "job-1"
    assert calls["n"] == 2


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


def test_sigv4_without_credentials_says_how_to_get_them() -> None:
    from punctual_cli.client import AuthError

    class NoCredentials(FixedSession):
        def get_credentials(self) -> Any:
            return None

    with pytest.raises(AuthError, match="no AWS credentials"):
        SigV4Auth("eu-west-1", NoCredentials()).sign(HttpRequest("GET", "https://x/v1/jobs", {}, None))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "region"),
    [
        ("https://abc123.execute-api.eu-central-1.amazonaws.com/prod/", "eu-central-1"),
        ("https://abc123.execute-api.cn-north-1.amazonaws.com.cn/prod", "cn-north-1"),
        ("http://127.0.0.1:8080", None),
        ("https://scheduler.example.com", None),
    ],
)
def test_the_region_comes_from_an_execute_api_url(url: str, region: str | None) -> None:
    assert region_of(url) == region
