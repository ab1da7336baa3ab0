"""The AWS targets (`scheduler.adapters.aws_targets`): each against moto, Lambda with botocore's Stubber (moto
cannot run Lambda code without Docker), and the shared classification of AWS failures."""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

from scheduler.adapters.aws_targets import (
    LAMBDA_READ_TIMEOUT_SECONDS,
    EventBridgeTargetInvoker,
    LambdaTargetInvoker,
    SnsTargetInvoker,
    SqsTargetInvoker,
    StepFunctionsTargetInvoker,
    build_aws_targets,
    execution_name,
    message_id,
)
from scheduler.core.model.job import Job, JobSpec, JobState
from scheduler.core.model.keys import occurrence_key
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.schema import READY_QUEUE

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
PAYLOAD = {"report": "daily", "ratio": 0.5}
ACCOUNT = "123456789012"
REGION = "us-east-1"


def make_call(
    target: dict[str, Any], *, job_id: str | None = None, attempt: int = 1, token: int = 1, payload: Any = PAYLOAD
) -> TargetCall:
    job_id = job_id or uuid.uuid4().hex
    spec = JobSpec.model_validate(
        {"schedule": {"type": "rate", "every_seconds": 60}, "target": target, "payload": payload}
    )
    job = Job(
        job_id=job_id, tenant="tenant-a", spec=spec, version=1, state=JobState.ACTIVE, created_at=T0, updated_at=T0
    )
    return TargetCall(
        job=job,
        occurrence_key=occurrence_key(job_id, T0),
        scheduled_for=T0,
        attempt=attempt,
        fencing_token=token,
        heartbeat=lambda: None,
        deadline=T0 + timedelta(minutes=5),
    )


def invoke_and_retry(invoker: Any, target: dict[str, Any]) -> tuple[str, list[str | None]]:
    """Invoke one occurrence, then its retry (the same key, a new attempt and token): its job id and both results."""
    job_id = uuid.uuid4().hex
    return job_id, [invoker.invoke(make_call(target, job_id=job_id, attempt=n, token=n)) for n in (1, 2)]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def failure_of(invoke: Callable[[], Any]) -> TargetFailure:
    with pytest.raises(TargetFailure) as raised:
        invoke()
    return raised.value


def offline_client(service: str) -> Any:
    """A client that never reaches a network (Stubber answers, or an event hook raises first)."""
    return boto3.client(  # type: ignore[call-overload]
        service,
        region_name=REGION,
        aws_access_key_id="test",
        aws_secret_access_key="test",
        endpoint_url="http://127.0.0.1:9",
    )


# -- names and ids ------------------------------------------------------------------------------------------


def test_message_id_keeps_a_valid_key_and_hashes_one_that_would_not_fit() -> None:
    key = occurrence_key(uuid.uuid4().hex, T0)
    assert message_id(key) == key

    long_key = occurrence_key("j" * 200, T0)
    other_long_key = occurrence_key("j" * 200, T0 + timedelta(hours=1))
    hashed = message_id(long_key)
    assert len(hashed) <= 128
    assert hashed == message_id(long_key)  # deterministic: every attempt dedupes alike
    assert hashed != message_id(other_long_key)  # the hash covers the whole key, not only the kept prefix
    assert message_id("job 1:ü") != "job 1:ü" and all("!" <= c <= "~" for c in message_id("job 1:ü"))


def test_execution_name_is_a_valid_deterministic_and_collision_resistant_name() -> None:
    key = occurrence_key(uuid.uuid4().hex, T0)
    name = execution_name(key)
    assert 1 <= len(name) <= 80
    assert all(c.isascii() and (c.isalnum() or c in "-_") for c in name)
    assert name == execution_name(key)
    # Sanitising alone would map these two to the same name.
    assert execution_name("a:b") != execution_name("a.b")
    assert len(execution_name("x" * 300 + ":2026-01-05T09:00:00Z")) <= 80
    assert execution_name("plain-name_1") == "plain-name_1"


# -- build_aws_targets -------------------------------------------------------------------------------------


def test_build_aws_targets_builds_each_client_lazily_without_sdk_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a client factory that records what it was asked for
    built: list[tuple[str, Any]] = []  # Any: the stubs do not declare Config's attributes

    def fake_client(service: str, config: Config) -> Any:
        built.append((service, config))
        return object()

    monkeypatch.setattr(boto3, "client", fake_client)

    # When the targets are built: no client yet
    targets = build_aws_targets(Config(connect_timeout=3, read_timeout=20))
    assert set(targets) == {"sqs", "sns", "eventbridge", "lambda", "stepfunctions"}
    assert built == []

    # Then each client is built on first use, once, with the caller's settings and the SDK's retries off
    sqs_client = targets["sqs"].client  # type: ignore[attr-defined]
    assert targets["sqs"].client is sqs_client  # type: ignore[attr-defined]
    _ = targets["lambda"].client  # type: ignore[attr-defined]
    assert [service for service, _ in built] == ["sqs", "lambda"]
    sqs_config, lambda_config = built[0][1], built[1][1]
    assert sqs_config.retries == {"mode": "standard", "total_max_attempts": 1}
    assert (sqs_config.connect_timeout, sqs_config.read_timeout) == (3, 20)
    # A synchronous Invoke lasts as long as the function: Lambda waits longer, but never past the worker's own
    # timeout (a worker killed mid-call records nothing; a call that gives up first records an ambiguous outcome)
    assert lambda_config.read_timeout == LAMBDA_READ_TIMEOUT_SECONDS < READY_QUEUE.worker_timeout_seconds - 20
    assert lambda_config.retries == {"mode": "standard", "total_max_attempts": 1}


def test_a_lambda_target_is_waited_for_no_longer_than_the_deployment_allows(monkeypatch) -> None:
    built: list[Config] = []
    monkeypatch.setattr(boto3, "client", lambda service, config=None: built.append(config) or object())
    _ = build_aws_targets(Config(), max_wait_seconds=45)["lambda"].client  # type: ignore[attr-defined]
    assert built[0].read_timeout == 45


# -- SQS ----------------------------------------------------------------------------------------------------


@pytest.mark.emulator
def test_sqs_standard_queue_gets_the_payload_and_the_scheduler_metadata(
    aws_env: dict[str, str], sqs_client: Any
) -> None:
    # Given a standard queue and a job targeting it
    queue_url = sqs_client.create_queue(QueueName=unique("target"))["QueueUrl"]
    call = make_call({"type": "sqs", "queue_url": queue_url}, attempt=2, token=3)

    # When the target runs (default client: built from the environment, which points at moto)
    result = SqsTargetInvoker().invoke(call)

    # Then one message carries the bare payload, and the key, token and metadata as attributes
    assert result is not None and result.startswith("SQS message")
    messages = sqs_client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])[
        "Messages"
    ]
    assert len(messages) == 1
    assert json.loads(messages[0]["Body"]) == PAYLOAD
    attributes = {name: value["StringValue"] for name, value in messages[0]["MessageAttributes"].items()}
    assert attributes == {
        "occurrence_key": call.occurrence_key,
        "fencing_token": "3",
        "job_id": call.job.job_id,
        "scheduled_for": "2026-01-05T09:00:00Z",
        "attempt": "2",
    }


@pytest.mark.emulator
def test_sqs_fifo_queue_dedupes_on_the_occurrence_key(aws_env: dict[str, str], sqs_client: Any) -> None:
    # Given a FIFO queue without content-based deduplication
    queue_url = sqs_client.create_queue(QueueName=unique("target") + ".fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]

    # When the same occurrence is sent twice (a retry: new attempt, new token)
    job_id, _ = invoke_and_retry(SqsTargetInvoker(), {"type": "sqs", "queue_url": queue_url})

    # Then the queue holds one message for it, deduplicated by the key, grouped by the job
    received = drain(sqs_client, queue_url)
    assert len(received) == 1
    assert received[0]["Attributes"]["MessageDeduplicationId"] == occurrence_key(job_id, T0)
    assert received[0]["Attributes"]["MessageGroupId"] == job_id
    assert received[0]["MessageAttributes"]["fencing_token"]["StringValue"] == "1"


@pytest.mark.emulator
def test_sqs_fifo_queue_uses_the_configured_message_group(aws_env: dict[str, str], sqs_client: Any) -> None:
    queue_url = sqs_client.create_queue(QueueName=unique("target") + ".fifo", Attributes={"FifoQueue": "true"})[
        "QueueUrl"
    ]
    SqsTargetInvoker().invoke(make_call({"type": "sqs", "queue_url": queue_url, "message_group_id": "billing"}))
    received = drain(sqs_client, queue_url)
    assert [m["Attributes"]["MessageGroupId"] for m in received] == ["billing"]


@pytest.mark.emulator
def test_sqs_missing_queue_is_a_permanent_failure(aws_env: dict[str, str], sqs_client: Any) -> None:
    existing = sqs_client.create_queue(QueueName=unique("target"))["QueueUrl"]
    missing = existing.rsplit("/", 1)[0] + "/" + unique("missing")
    failure = failure_of(lambda: SqsTargetInvoker().invoke(make_call({"type": "sqs", "queue_url": missing})))
    assert failure.kind == "permanent"
    assert "does not exist" in failure.message


def drain(sqs_client: Any, queue_url: str) -> list[dict[str, Any]]:
    """Every message currently in the queue (received and deleted, until a receive comes back empty)."""
    received: list[dict[str, Any]] = []
    while True:
        batch = sqs_client.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
            WaitTimeSeconds=0,
        ).get("Messages", [])
        if not batch:
            return received
        for message in batch:
            received.append(message)
            sqs_client.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


# -- SNS ----------------------------------------------------------------------------------------------------


@pytest.fixture
def sns_client(aws_env: dict[str, str]) -> Any:
    return boto3.client("sns", region_name=REGION)


def subscribed_queue(sns_client: Any, sqs_client: Any, topic_arn: str, fifo: bool = False) -> str:
    name = unique("subscriber") + (".fifo" if fifo else "")
    queue_url = sqs_client.create_queue(QueueName=name, Attributes={"FifoQueue": "true"} if fifo else {})["QueueUrl"]
    queue_arn = sqs_client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    sns_client.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
    return str(queue_url)


@pytest.mark.emulator
def test_sns_publish_carries_the_payload_and_the_scheduler_metadata(sns_client: Any, sqs_client: Any) -> None:
    # Given a topic with a queue subscribed to it
    topic_arn = sns_client.create_topic(Name=unique("topic"))["TopicArn"]
    queue_url = subscribed_queue(sns_client, sqs_client, topic_arn)
    call = make_call({"type": "sns", "topic_arn": topic_arn}, attempt=1, token=4)

    # When the target runs
    result = SnsTargetInvoker().invoke(call)

    # Then the subscriber reads the payload and the message attributes back
    assert result is not None and result.startswith("SNS message")
    (message,) = drain(sqs_client, queue_url)
    notification = json.loads(message["Body"])
    assert json.loads(notification["Message"]) == PAYLOAD
    attributes = notification["MessageAttributes"]
    assert attributes["occurrence_key"] == {"Type": "String", "Value": call.occurrence_key}
    assert attributes["fencing_token"] == {"Type": "Number", "Value": "4"}
    assert attributes["job_id"]["Value"] == call.job.job_id
    assert attributes["scheduled_for"]["Value"] == "2026-01-05T09:00:00Z"
    assert attributes["attempt"]["Value"] == "1"


@pytest.mark.emulator
def test_sns_fifo_topic_dedupes_on_the_occurrence_key(sns_client: Any, sqs_client: Any) -> None:
    # Given a FIFO topic (no content-based dedupe) with a FIFO queue subscribed
    topic_arn = sns_client.create_topic(Name=unique("topic") + ".fifo", Attributes={"FifoTopic": "true"})["TopicArn"]
    queue_url = subscribed_queue(sns_client, sqs_client, topic_arn, fifo=True)

    # When the same occurrence is published twice
    invoke_and_retry(SnsTargetInvoker(), {"type": "sns", "topic_arn": topic_arn})

    # Then the subscriber receives it once
    received = drain(sqs_client, queue_url)
    assert len(received) == 1
    assert json.loads(received[0]["Body"])["MessageAttributes"]["fencing_token"]["Value"] == "1"


# -- EventBridge --------------------------------------------------------------------------------------------


@pytest.mark.emulator
def test_eventbridge_event_detail_carries_the_key_the_token_and_the_payload(
    aws_env: dict[str, str], sqs_client: Any
) -> None:
    # Given a bus with a rule that forwards the scheduler's events to a queue
    events = boto3.client("events", region_name=REGION)
    bus = unique("bus")
    events.create_event_bus(Name=bus)
    events.put_rule(Name="scheduled", EventBusName=bus, EventPattern=json.dumps({"source": ["scheduled.job"]}))
    queue_url = sqs_client.create_queue(QueueName=unique("events"))["QueueUrl"]
    queue_arn = sqs_client.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_targets(Rule="scheduled", EventBusName=bus, Targets=[{"Id": "queue", "Arn": queue_arn}])
    call = make_call({"type": "eventbridge", "event_bus_name": bus}, attempt=3, token=7)

    # When the target runs
    result = EventBridgeTargetInvoker().invoke(call)

    # Then the event reaches the rule's target with the envelope as its detail
    assert result is not None and result.startswith("EventBridge event")
    (message,) = drain(sqs_client, queue_url)
    event = json.loads(message["Body"])
    assert event["source"] == "scheduled.job"  # the default source: not the scheduler's own namespace
    assert event["detail-type"] == "Scheduled Occurrence"
    assert event["detail"] == {
        "occurrence_key": call.occurrence_key,
        "fencing_token": 7,
        "job_id": call.job.job_id,
        "scheduled_for": "2026-01-05T09:00:00Z",
        "attempt": 3,
        "payload": PAYLOAD,
    }


@pytest.mark.parametrize(
    ("error_code", "kind"),
    [("ThrottlingException", "retryable"), ("InternalFailure", "retryable"), ("MalformedDetail", "permanent")],
)
def test_eventbridge_failed_entry_is_classified_by_its_error_code(error_code: str, kind: str) -> None:
    # Given PutEvents answering 200 with one refused entry
    client = offline_client("events")
    call = make_call({"type": "eventbridge"})
    with Stubber(client) as stub:
        stub.add_response(
            "put_events",
            {"FailedEntryCount": 1, "Entries": [{"ErrorCode": error_code, "ErrorMessage": "refused"}]},
        )
        # When / Then
        failure = failure_of(lambda: EventBridgeTargetInvoker(client).invoke(call))
    assert failure.kind == kind
    assert error_code in failure.message


# -- Step Functions -----------------------------------------------------------------------------------------


@pytest.mark.emulator
def test_stepfunctions_second_start_of_an_occurrence_is_already_started(aws_env: dict[str, str]) -> None:
    # Given a state machine
    sfn = boto3.client("stepfunctions", region_name=REGION)
    definition = {"StartAt": "Done", "States": {"Done": {"Type": "Pass", "End": True}}}
    machine_arn = sfn.create_state_machine(
        name=unique("machine"),
        definition=json.dumps(definition),
        roleArn=f"arn:aws:iam::{ACCOUNT}:role/punctual-test",
    )["stateMachineArn"]

    # When the occurrence starts, and a retry (new attempt, new token) starts it again
    target = {"type": "stepfunctions", "state_machine_arn": machine_arn}
    job_id, (first, second) = invoke_and_retry(StepFunctionsTargetInvoker(), target)

    # Then one execution exists, named after the key, and the retry succeeded as "already started"
    key = occurrence_key(job_id, T0)
    assert first == f"execution {execution_name(key)} started"
    assert second == f"execution {execution_name(key)} already started"
    executions = sfn.list_executions(stateMachineArn=machine_arn)["executions"]
    assert [e["name"] for e in executions] == [execution_name(key)]
    started_with = json.loads(sfn.describe_execution(executionArn=executions[0]["executionArn"])["input"])
    assert (started_with["occurrence_key"], started_with["fencing_token"]) == (key, 1)
    assert started_with["payload"] == PAYLOAD


@pytest.mark.emulator
def test_stepfunctions_missing_state_machine_is_a_permanent_failure(aws_env: dict[str, str]) -> None:
    arn = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:{unique('missing')}"
    call = make_call({"type": "stepfunctions", "state_machine_arn": arn})
    failure = failure_of(lambda: StepFunctionsTargetInvoker().invoke(call))
    assert failure.kind == "permanent"
    assert "does not exist" in failure.message


# -- Lambda (Stubber) ---------------------------------------------------------------------------------------


def lambda_response(body: bytes, function_error: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "StatusCode": 200,
        "Payload": StreamingBody(io.BytesIO(body), len(body)),
        "ExecutedVersion": "$LATEST",
    }
    if function_error:
        response["FunctionError"] = function_error
    return response


@pytest.fixture
def lambda_client() -> Iterator[tuple[Any, list[dict[str, Any]]]]:
    """A stubbed Lambda client and the parameters of every Invoke it was given."""
    client = offline_client("lambda")
    seen: list[dict[str, Any]] = []
    client.meta.events.register("provide-client-params.lambda.Invoke", lambda params, **_: seen.append(params))
    yield client, seen


def test_lambda_invokes_synchronously_with_the_envelope(lambda_client: tuple[Any, list[dict[str, Any]]]) -> None:
    client, seen = lambda_client
    call = make_call({"type": "lambda", "function_name": "charge-cards"}, attempt=2, token=5)
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            lambda_response(b'{"charged":true}'),
            {"FunctionName": "charge-cards", "InvocationType": "RequestResponse", "Payload": ANY},
        )
        result = LambdaTargetInvoker(client).invoke(call)
        stub.assert_no_pending_responses()
    assert result == 'Lambda function charge-cards returned {"charged":true}'
    assert json.loads(seen[0]["Payload"]) == {
        "occurrence_key": call.occurrence_key,
        "fencing_token": 5,
        "job_id": call.job.job_id,
        "scheduled_for": "2026-01-05T09:00:00Z",
        "attempt": 2,
        "payload": PAYLOAD,
    }


FUNCTION_ERROR = json.dumps({"errorType": "CardDeclined", "errorMessage": "insufficient funds"}).encode()


@pytest.mark.parametrize(
    ("answer", "kind", "says", "retry_after"),
    [
        pytest.param(
            lambda stub: stub.add_response("invoke", lambda_response(FUNCTION_ERROR, function_error="Unhandled")),
            "retryable",
            "CardDeclined: insufficient funds",
            None,
            id="function-error-retryable-with-its-message",
        ),
        pytest.param(
            lambda stub: stub.add_client_error(
                "invoke", "AccessDeniedException", "not authorized to perform: lambda:InvokeFunction", 403
            ),
            "permanent",
            "target_lambda_function_arns",
            None,
            id="access-denied-permanent-says-how-to-grant",
        ),
        pytest.param(
            lambda stub: stub.add_client_error(
                "invoke",
                "TooManyRequestsException",
                "Rate Exceeded.",
                429,
                modeled_fields={"retryAfterSeconds": "7", "Reason": "ConcurrentInvocationLimitExceeded"},
            ),
            "retryable",
            "throttled",
            7.0,
            id="throttled-retryable-after-the-time-asked",
        ),
    ],
)
def test_a_lambda_failure_is_classified_and_explained(
    lambda_client: tuple[Any, list[dict[str, Any]]],
    answer: Callable[[Stubber], object],
    kind: str,
    says: str,
    retry_after: float | None,
) -> None:
    client, _ = lambda_client
    with Stubber(client) as stub:
        answer(stub)
        failure = failure_of(
            lambda: LambdaTargetInvoker(client).invoke(make_call({"type": "lambda", "function_name": "charge"}))
        )
        stub.assert_no_pending_responses()
    assert (failure.kind, failure.retry_after) == (kind, retry_after)
    assert says in failure.message, failure.message


# -- transport failures: sent or not sent ---------------------------------------------------------------------


@pytest.fixture
def default_lambda_invoker(monkeypatch: pytest.MonkeyPatch) -> LambdaTargetInvoker:
    """An invoker whose client is built the production way (SDK retries off), pointed nowhere."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    return LambdaTargetInvoker()


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (ReadTimeoutError(endpoint_url="http://127.0.0.1:9"), "ambiguous"),
        (EndpointConnectionError(endpoint_url="http://127.0.0.1:9"), "retryable"),
    ],
)
def test_lambda_transport_failure_is_ambiguous_once_sent_and_retryable_before(
    default_lambda_invoker: LambdaTargetInvoker, raised: Exception, kind: str
) -> None:
    # Given a transport that fails the way a real one would
    sends: list[str] = []

    def transport(request: Any, **_: Any) -> None:
        sends.append(request.url)
        raise raised

    default_lambda_invoker.client.meta.events.register("before-send.lambda.Invoke", transport)

    # When the function is invoked
    failure = failure_of(
        lambda: default_lambda_invoker.invoke(make_call({"type": "lambda", "function_name": "charge"}))
    )

    # Then the failure is classified by whether the request had left, and the SDK did not quietly re-send it
    assert failure.kind == kind
    assert len(sends) == 1


# -- the shared classification --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "kind", "says"),
    [
        ("ThrottlingException", 400, "retryable", "throttled"),
        ("RequestThrottled", 403, "retryable", "throttled"),
        ("ServiceUnavailable", 503, "retryable", "transiently"),
        ("InternalError", 500, "retryable", "transiently"),
        ("SomethingNew", 502, "retryable", "transiently"),
        ("InvalidParameterValue", 400, "permanent", "fix the job's target or payload"),
        ("ValidationException", 400, "permanent", "fix the job's target or payload"),
        ("AccessDenied", 403, "permanent", "target_sqs_queue_arns"),
        ("KmsAccessDenied", 400, "permanent", "target_kms_key_arns"),
        ("QueueDoesNotExist", 400, "permanent", "does not exist"),
    ],
)
def test_service_errors_are_classified_by_code_and_status(code: str, status: int, kind: str, says: str) -> None:
    client = offline_client("sqs")
    call = make_call({"type": "sqs", "queue_url": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/q"})
    with Stubber(client) as stub:
        stub.add_client_error("send_message", code, "the service said no", status)
        failure = failure_of(lambda: SqsTargetInvoker(client).invoke(call))
    assert failure.kind == kind
    assert says in failure.message
    assert code in failure.message


def test_sns_access_denied_names_the_configuration_to_change() -> None:
    client = offline_client("sns")
    call = make_call({"type": "sns", "topic_arn": f"arn:aws:sns:{REGION}:{ACCOUNT}:alerts"})
    with Stubber(client) as stub:
        stub.add_client_error("publish", "AuthorizationError", "not authorized to perform SNS:Publish", 403)
        failure = failure_of(lambda: SnsTargetInvoker(client).invoke(call))
    assert failure.kind == "permanent"
    assert "target_sns_topic_arns" in failure.message
