"""The jobs-as-code provider (scheduler.handlers.scheduled_job): CloudFormation's Create, Update and Delete of a
`Custom::PunctualJob`, made true through the real api handler (DynamoDB Local), and its answer to CloudFormation."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from scheduler.adapters.signed_api import ApiAnswer
from scheduler.core.model.labels import MANAGED_BY_LABEL
from scheduler.handlers import scheduled_job
from scheduler.ops.scheduled_jobs import CREATE_FAILED, RESOURCE_TYPE, ScheduledJobs
from tests.sdk.http_server import Quiet, serving

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

#: The provider function's role, as the API keys the tenant.
PROVIDER = "arn:aws:iam::111111111111:role/orders-SchedulerJobsAsCodeProviderRole"
OTHER = "arn:aws:iam::111111111111:role/someone-else"
STACK_ID = "arn:aws:cloudformation:us-east-1:111111111111:stack/orders/1f2e3d4c"
HOOK = "http://127.0.0.1:9/hooks/nightly"

NIGHTLY = {
    "name": "nightly report",
    "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
    "target": {"type": "http", "url": HOOK},
    "payload": {"report": "daily"},
    "labels": {"team": "orders"},
}


def properties(definition: Mapping[str, Any] = NIGHTLY, logical_id: str = "Nightly") -> dict[str, Any]:
    """The custom resource's properties as ScheduledJob writes them (CloudFormation passes strings as they are)."""
    return {
        "ServiceToken": "arn:aws:lambda:us-east-1:111111111111:function:orders-provider",
        "ServiceTimeout": "300",
        "Definition": json.dumps(definition, sort_keys=True, separators=(",", ":")),
        "ExternalId": f"cdk.orders:{logical_id}",
        "ManagedBy": "cdk.orders",
    }


def event(
    kind: str,
    props: Mapping[str, Any] | None = None,
    *,
    old: Mapping[str, Any] | None = None,
    physical_id: str | None = None,
    request_id: str = "req-1",
    logical_id: str = "Nightly",
) -> dict[str, Any]:
    """The event CloudFormation invokes the provider with."""
    sent: dict[str, Any] = {
        "RequestType": kind,
        "RequestId": request_id,
        "StackId": STACK_ID,
        "ResponseURL": "http://127.0.0.1:9/cfn-response",
        "ResourceType": RESOURCE_TYPE,
        "LogicalResourceId": logical_id,
        "ResourceProperties": dict(props or properties()),
    }
    if old is not None:
        sent["OldResourceProperties"] = dict(old)
    if physical_id is not None:
        sent["PhysicalResourceId"] = physical_id
    return sent


class InProcessApi:
    """The API as the provider's role calls it (scheduler.ops.scheduled_jobs.JobsApi), through the real api handler;
    every request is recorded."""

    def __init__(self, call: Callable[..., Any], tenant: str = PROVIDER) -> None:
        self.call, self.tenant = call, tenant
        self.requests: list[tuple[str, str]] = []

    def request(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> ApiAnswer:
        self.requests.append((method, path))
        answer = self.call(method, f"/{path}", body, tenant=self.tenant, headers=dict(headers or {}))
        return ApiAnswer(answer.status, answer.body or {}, {k.lower(): v for k, v in answer.headers.items()})


@pytest.fixture
def api(api_call: Callable[..., Any]) -> InProcessApi:
    return InProcessApi(api_call)


def handle(api: InProcessApi, sent: dict[str, Any]) -> dict[str, Any]:
    """What the provider answers CloudFormation for `sent`."""
    return scheduled_job.answer(sent, ScheduledJobs(api))


def job(api_call: Callable[..., Any], job_id: str, tenant: str = PROVIDER) -> dict[str, Any]:
    found = api_call("GET", f"/v1/jobs/{job_id}", tenant=tenant)
    assert found.status == 200, found.text
    return dict(found.body)


def created(api: InProcessApi, props: Mapping[str, Any] | None = None, request_id: str = "req-1") -> str:
    answer = handle(api, event("Create", props, request_id=request_id))
    assert answer["Status"] == "SUCCESS", answer
    return str(answer["PhysicalResourceId"])


# -- create --------------------------------------------------------------------------------------------------------


def test_create_makes_the_job_owned_by_the_stack_and_answers_its_id(api: InProcessApi, api_call) -> None:
    answer = handle(api, event("Create"))

    assert answer["Status"] == "SUCCESS", answer
    job_id = answer["PhysicalResourceId"]
    assert answer["Data"] == {"JobId": job_id, "ExternalId": "cdk.orders:Nightly"}
    assert (answer["StackId"], answer["RequestId"], answer["LogicalResourceId"]) == (STACK_ID, "req-1", "Nightly")
    stored = job(api_call, job_id)
    assert stored["external_id"] == "cdk.orders:Nightly"
    assert stored["labels"] == {"team": "orders", MANAGED_BY_LABEL: "cdk.orders"}
    assert stored["schedule"] == NIGHTLY["schedule"] and stored["payload"] == {"report": "daily"}
    assert stored["state"] == "ACTIVE"
    # The provider's tenant owns it: nobody else sees it
    assert api_call("GET", f"/v1/jobs/{job_id}", tenant=OTHER).status == 404


def test_a_retried_create_request_makes_one_job(api: InProcessApi, api_call) -> None:
    first = created(api)
    again = created(api)  # the same request id: the same idempotency key
    assert again == first
    listed = api_call("GET", "/v1/jobs?label=punctual.dev/managed-by:cdk.orders", tenant=PROVIDER)
    assert [j["job_id"] for j in listed.body["jobs"]] == [first]


def test_a_create_whose_answer_was_lost_takes_the_job_over_and_makes_it_match(api: InProcessApi, api_call) -> None:
    # Given the job created by a request whose answer never reached CloudFormation
    first = created(api, request_id="lost")
    # When CloudFormation creates the resource again, with a changed definition, under another request
    changed = {**NIGHTLY, "payload": {"report": "weekly"}}
    again = created(api, properties(changed), request_id="retry")
    # Then it is the same job, now as declared
    assert again == first
    assert job(api_call, first)["payload"] == {"report": "weekly"}


def test_an_external_id_held_by_a_job_the_stack_does_not_manage_is_refused(api: InProcessApi, api_call) -> None:
    taken = api_call("POST", "/v1/jobs", {**NIGHTLY, "external_id": "cdk.orders:Nightly"}, tenant=PROVIDER)
    assert taken.status == 201

    answer = handle(api, event("Create"))

    assert answer["Status"] == "FAILED"
    assert answer["PhysicalResourceId"] == CREATE_FAILED
    assert taken.body["job_id"] in answer["Reason"] and "cdk.orders does not manage" in answer["Reason"]
    assert "409 Conflict" in answer["Reason"]


def test_an_external_id_held_by_a_job_the_stack_cancelled_is_refused_with_what_to_do(api: InProcessApi) -> None:
    # Given a ScheduledJob removed (its job cancelled), then declared again under the same id
    job_id = created(api)
    assert handle(api, event("Delete", physical_id=job_id))["Status"] == "SUCCESS"

    answer = handle(api, event("Create", request_id="req-2"))

    assert answer["Status"] == "FAILED"
    assert "cancelled" in answer["Reason"] and "give the ScheduledJob another id" in answer["Reason"]


def test_a_definition_the_api_refuses_fails_with_its_problem_detail(api: InProcessApi, api_call) -> None:
    bad = {**NIGHTLY, "schedule": {"type": "cron", "expression": "0 2 * * * * *"}}

    answer = handle(api, event("Create", properties(bad)))

    assert answer["Status"] == "FAILED" and answer["PhysicalResourceId"] == CREATE_FAILED
    assert answer["Reason"].startswith("creating the job failed: 422 ")
    assert "schedule" in answer["Reason"]
    assert api_call("GET", "/v1/jobs", tenant=PROVIDER).body["jobs"] == []


def test_properties_not_written_by_scheduled_job_are_refused_before_any_call(api: InProcessApi) -> None:
    props = {**properties(), "Definition": "{not json"}
    answer = handle(api, event("Create", props))
    assert answer["Status"] == "FAILED" and "Definition is not JSON" in answer["Reason"]
    assert api.requests == []


# -- update --------------------------------------------------------------------------------------------------------


def test_an_update_with_the_same_declaration_calls_nothing(api: InProcessApi, api_call) -> None:
    job_id = created(api)
    version = job(api_call, job_id)["version"]
    api.requests.clear()
    # (e.g. the provider function was replaced: CloudFormation sends the same properties under a new ServiceToken)
    new_token = {**properties(), "ServiceToken": "arn:aws:lambda:us-east-1:111111111111:function:orders-provider-2"}

    answer = handle(api, event("Update", new_token, old=properties(), physical_id=job_id))

    assert (answer["Status"], answer["PhysicalResourceId"]) == ("SUCCESS", job_id)
    assert api.requests == []
    assert job(api_call, job_id)["version"] == version


def test_a_changed_definition_changes_the_job_in_place(api: InProcessApi, api_call) -> None:
    job_id = created(api)
    before = job(api_call, job_id)
    # A new schedule of another kind, no payload, another label, a retry policy
    changed = {
        "name": "nightly report",
        "schedule": {"type": "rate", "every_seconds": 900},
        "target": {"type": "http", "url": HOOK},
        "labels": {"team": "billing"},
        "retry": {"max_attempts": 5},
    }

    answer = handle(api, event("Update", properties(changed), old=properties(), physical_id=job_id))

    assert (answer["Status"], answer["PhysicalResourceId"]) == ("SUCCESS", job_id)
    after = job(api_call, job_id)
    assert after["job_id"] == job_id and after["created_at"] == before["created_at"]
    assert after["version"] == before["version"] + 1
    assert after["schedule"] == {"type": "rate", "every_seconds": 900}
    assert "payload" not in after or after["payload"] is None
    assert after["labels"] == {"team": "billing", MANAGED_BY_LABEL: "cdk.orders"}
    assert after["retry"]["max_attempts"] == 5
    assert after["external_id"] == "cdk.orders:Nightly"


def test_a_declaration_that_already_matches_the_job_changes_nothing(api: InProcessApi, api_call) -> None:
    # Given a job that already is as the new declaration says (e.g. an earlier update reached the API, then failed
    # later and was rolled back by CloudFormation, or someone changed it so through the API)
    job_id = created(api)
    version = job(api_call, job_id)["version"]
    previous = properties({**NIGHTLY, "payload": {"report": "weekly"}})
    api.requests.clear()

    answer = handle(api, event("Update", properties(), old=previous, physical_id=job_id))

    # Then it is read, and left as it is
    assert answer["Status"] == "SUCCESS"
    assert [method for method, _ in api.requests] == ["GET"]
    assert job(api_call, job_id)["version"] == version


def test_an_update_the_api_refuses_fails_and_leaves_the_job_as_it_was(api: InProcessApi, api_call) -> None:
    job_id = created(api)
    before = job(api_call, job_id)
    bad = {**NIGHTLY, "target": {"type": "http", "url": "ftp://example.com/x"}}

    answer = handle(api, event("Update", properties(bad), old=properties(), physical_id=job_id))

    assert (answer["Status"], answer["PhysicalResourceId"]) == ("FAILED", job_id)
    assert answer["Reason"].startswith(f"changing job {job_id} failed: 422 ")
    assert job(api_call, job_id) == before


def test_an_update_of_a_job_cancelled_outside_the_stack_fails(api: InProcessApi, api_call) -> None:
    job_id = created(api)
    assert api_call("DELETE", f"/v1/jobs/{job_id}", tenant=PROVIDER).status == 200
    changed = properties({**NIGHTLY, "payload": {"report": "weekly"}})

    answer = handle(api, event("Update", changed, old=properties(), physical_id=job_id))

    assert answer["Status"] == "FAILED" and "cancelled outside this stack" in answer["Reason"]


def test_a_new_external_id_is_a_new_job(api: InProcessApi, api_call) -> None:
    job_id = created(api)
    moved = properties(logical_id="NightlyMoved")

    answer = handle(api, event("Update", moved, old=properties(), physical_id=job_id, request_id="req-2"))

    assert answer["Status"] == "SUCCESS" and answer["PhysicalResourceId"] != job_id
    assert job(api_call, answer["PhysicalResourceId"])["external_id"] == "cdk.orders:NightlyMoved"
    # (CloudFormation then deletes the old physical id: the old job is cancelled by that Delete)
    assert job(api_call, job_id)["state"] == "ACTIVE"


# -- delete --------------------------------------------------------------------------------------------------------


def test_delete_cancels_the_job_and_a_job_already_gone_is_deleted(api: InProcessApi, api_call) -> None:
    job_id = created(api)

    answer = handle(api, event("Delete", physical_id=job_id))

    assert (answer["Status"], answer["PhysicalResourceId"]) == ("SUCCESS", job_id)
    assert job(api_call, job_id)["state"] == "CANCELLED"
    # Again (a retried Delete), a job no longer found, and a create that never made one: all deleted
    assert handle(api, event("Delete", physical_id=job_id))["Status"] == "SUCCESS"
    assert handle(api, event("Delete", physical_id="0123456789abcdef0123456789abcdef"))["Status"] == "SUCCESS"
    api.requests.clear()
    assert handle(api, event("Delete", physical_id=CREATE_FAILED))["Status"] == "SUCCESS"
    assert api.requests == []


def test_a_delete_the_api_refuses_fails_with_its_problem_detail(api: InProcessApi) -> None:
    class Refusing:
        def request(self, method: str, path: str, body: Any = None, headers: Any = None) -> ApiAnswer:
            return ApiAnswer(503, {"title": "Service Unavailable", "detail": "the tables are being restored"})

    answer = scheduled_job.answer(event("Delete", physical_id="0123456789abcdef"), ScheduledJobs(Refusing()))

    assert answer["Status"] == "FAILED" and answer["PhysicalResourceId"] == "0123456789abcdef"
    assert (
        answer["Reason"]
        == "cancelling job 0123456789abcdef failed: 503 Service Unavailable: the tables are being restored"
    )


# -- the Lambda entry point: signed requests, and the answer PUT to CloudFormation -----------------------------------


class FakeAwsSide:
    """One local server standing for API Gateway (answers a create) and for CloudFormation's response URL."""

    def __init__(self) -> None:
        self.api_requests: list[tuple[str, str, dict[str, str], Any]] = []
        self.responses: list[tuple[dict[str, str], Any]] = []
        self.answered = threading.Event()

    def handler(self) -> type[BaseHTTPRequestHandler]:
        side = self

        class Handler(Quiet, BaseHTTPRequestHandler):
            def _body(self) -> Any:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                return json.loads(raw) if raw else None

            def do_POST(self) -> None:
                side.api_requests.append(("POST", self.path, dict(self.headers), self._body()))
                payload = json.dumps({"job_id": "0123456789abcdef0123456789abcdef"}).encode()
                self.send_response(201)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_PUT(self) -> None:
                side.responses.append((dict(self.headers), self._body()))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
                side.answered.set()

        return Handler


@pytest.fixture
def aws_side(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeAwsSide, str]]:
    side = FakeAwsSide()
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), side.handler())) as url:
        monkeypatch.setenv(scheduled_job.API_URL_VARIABLE, f"{url}/test/")
        monkeypatch.setenv("AWS_REGION", "us-east-1")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
        monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
        monkeypatch.delenv("AWS_PROFILE", raising=False)
        yield side, url


def test_the_function_signs_its_calls_and_answers_cloudformation_at_the_response_url(aws_side) -> None:
    side, url = aws_side
    sent = {**event("Create"), "ResponseURL": f"{url}/cfn-response?X-Amz-Signature=abc"}

    scheduled_job.lambda_handler(sent, None)

    ((method, path, headers, body),) = side.api_requests
    assert (method, path) == ("POST", "/test/v1/jobs")
    assert headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-1/execute-api/aws4_request" in headers["Authorization"]
    assert headers["Idempotency-Key"] == "cloudformation-req-1"
    assert body["external_id"] == "cdk.orders:Nightly"
    ((response_headers, response),) = side.responses
    assert response_headers.get("Content-Type", "") == ""  # the pre-signed URL is signed without one
    assert response["Status"] == "SUCCESS" and response["PhysicalResourceId"] == "0123456789abcdef0123456789abcdef"


def test_the_function_answers_failed_when_it_cannot_work_at_all(aws_side, monkeypatch: pytest.MonkeyPatch) -> None:
    side, url = aws_side
    monkeypatch.delenv(scheduled_job.API_URL_VARIABLE)

    scheduled_job.lambda_handler({**event("Create"), "ResponseURL": f"{url}/cfn-response"}, None)

    ((_, response),) = side.responses
    assert response["Status"] == "FAILED" and response["PhysicalResourceId"] == CREATE_FAILED
    assert scheduled_job.API_URL_VARIABLE in response["Reason"]
    assert side.api_requests == []


def test_an_unreachable_api_is_a_failure_with_a_reason(aws_side, monkeypatch: pytest.MonkeyPatch) -> None:
    side, url = aws_side
    monkeypatch.setenv(scheduled_job.API_URL_VARIABLE, "http://127.0.0.1:9/test/")

    scheduled_job.lambda_handler({**event("Create"), "ResponseURL": f"{url}/cfn-response"}, None)

    ((_, response),) = side.responses
    assert response["Status"] == "FAILED" and "creating the job failed: No answer" in response["Reason"]
