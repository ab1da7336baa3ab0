"""The AWS targets: `sqs`, `sns`, `eventbridge`, `lambda` and `stepfunctions` (docs/design.md §2, "Targets").

Every call carries the occurrence key and the fencing token, in the target's own dedupe mechanism where it has
one, and the scheduler metadata (job id, scheduled instant, attempt) alongside the payload:

| target          | dedupe                                              | key and token travel in          |
|-----------------|-----------------------------------------------------|----------------------------------|
| `sqs`           | FIFO queues: `MessageDeduplicationId` = the key     | message attributes; body = payload |
| `sns`           | FIFO topics: `MessageDeduplicationId` = the key     | message attributes; message = payload |
| `eventbridge`   | none (the receiver dedupes on `detail.occurrence_key`) | `detail` (the envelope)       |
| `lambda`        | none (the function dedupes on `occurrence_key`)     | the event (the envelope)         |
| `stepfunctions` | execution `name` derived from the key               | the execution input (the envelope) |

Limits of the native dedupe, stated plainly: SQS and SNS FIFO remember a deduplication id for 5 minutes, so
a retry after a longer backoff is delivered again and the consumer must dedupe on the `occurrence_key`
attribute; Step Functions dedupes names only for STANDARD state machines (EXPRESS ones start every time).

Failures are classified once for every AWS target, in `scheduler.adapters.aws_errors` (`classify_aws_error`,
docs/design.md §3.4 step 6).

The clients built here have the SDK's own retries turned off: botocore's standard mode silently re-sends a
request after a read timeout, which would turn an ambiguous outcome into a possible duplicate effect behind the
executor's back (fatal for `at_most_once` jobs). Every failure surfaces once and the executor decides, with its
backoff, its attempt count and its ledger. Injected clients are used as they are.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)

from scheduler.adapters.aws_errors import classify_aws_error, classify_error_code
from scheduler.core.model.job import EventBridgeTarget, LambdaTarget, SnsTarget, SqsTarget, StepFunctionsTarget
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import TargetCall, TargetFailure, TargetInvoker
from scheduler.targets.resources import TENANT_TAG, tenant_session_name, tenant_tag

#: Tenants whose target-role sessions and clients a worker keeps (least recently used dropped first).
TENANT_CLIENTS_KEPT = 256

#: SQS/SNS `MessageDeduplicationId` and `MessageGroupId`: 1-128 of alphanumerics and punctuation.
_MESSAGE_ID = re.compile(r"[!-~]{1,128}")
MESSAGE_ID_MAX = 128
#: Step Functions execution names: 1-80 characters; we keep to the set CloudWatch Logs also accepts.
_EXECUTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
EXECUTION_NAME_MAX = 80
#: Hex digits of SHA-256 appended to a sanitised or truncated name (80 bits: collisions are not a concern).
_NAME_HASH_HEX = 20
#: How long the worker waits for a synchronous Invoke by default. The worker's own Lambda timeout (120 s) bounds
#: it: a wait longer than the worker lives would end with the worker killed mid-call and nothing recorded, so the
#: call must give up first and record an ambiguous outcome (retried, or RECONCILING for at-most-once jobs). A
#: target function that runs longer should be invoked asynchronously (an `sqs` or `eventbridge` target in front).
LAMBDA_READ_TIMEOUT_SECONDS = 90
#: What is kept of a target's answer in the ledger's `result`.
RESULT_MAX = 200

_NO_SDK_RETRIES = Config(retries={"mode": "standard", "total_max_attempts": 1})


# -- what every target receives ---------------------------------------------------------------------------


def envelope(call: TargetCall) -> dict[str, Any]:
    """The scheduler metadata and the payload, as one JSON object (EventBridge detail, Lambda event, Step
    Functions input)."""
    return {
        "occurrence_key": call.occurrence_key,
        "fencing_token": call.fencing_token,
        "job_id": call.job.job_id,
        "scheduled_for": rfc3339(call.scheduled_for),
        "attempt": call.attempt,
        "payload": call.job.spec.payload,
    }


def message_attributes(call: TargetCall) -> dict[str, dict[str, str]]:
    """The scheduler metadata as SQS/SNS message attributes (the body stays the bare payload)."""
    return {
        "occurrence_key": {"DataType": "String", "StringValue": call.occurrence_key},
        "fencing_token": {"DataType": "Number", "StringValue": str(call.fencing_token)},
        "job_id": {"DataType": "String", "StringValue": call.job.job_id},
        "scheduled_for": {"DataType": "String", "StringValue": rfc3339(call.scheduled_for)},
        "attempt": {"DataType": "Number", "StringValue": str(call.attempt)},
    }


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_NAME_HASH_HEX]


def message_id(value: str) -> str:
    """`value` as an SQS/SNS `MessageDeduplicationId` or `MessageGroupId`: unchanged when it is one already,
    else a readable prefix plus a hash of the whole value (deterministic, so every attempt maps alike)."""
    if _MESSAGE_ID.fullmatch(value):
        return value
    prefix = re.sub(r"[^!-~]", "_", value)[: MESSAGE_ID_MAX - _NAME_HASH_HEX - 1]
    return f"{prefix}-{_digest(value)}"


def execution_name(occurrence_key: str) -> str:
    """The Step Functions execution name of an occurrence: the key itself when it is a valid name, else the key
    with every other character replaced by `_`, truncated, plus a hash of the whole key. Sanitising alone is
    not injective (`a:b` and `a.b` would collide); the hash of the original key is what keeps names apart."""
    if _EXECUTION_NAME.fullmatch(occurrence_key):
        return occurrence_key
    prefix = re.sub(r"[^A-Za-z0-9_-]", "_", occurrence_key)[: EXECUTION_NAME_MAX - _NAME_HASH_HEX - 1]
    return f"{prefix}-{_digest(occurrence_key)}"


def _short(text: str) -> str:
    return text if len(text) <= RESULT_MAX else text[: RESULT_MAX - 3] + "..."


# -- the invokers ---------------------------------------------------------------------------------------


class _AwsTargetInvoker:
    """An invoker holding one boto3 client: the injected one, or one built on first use."""

    service: ClassVar[str]
    #: How the operator grants the worker access to this kind of target (cdk/punctual_cdk/config.py field names).
    grant: ClassVar[str]

    def __init__(
        self, client: Any | None = None, config: Config | None = None, session: Callable[[str], Any] | None = None
    ) -> None:
        self._client = client
        self._config = config
        #: The target role's session of a tenant (tagged with it); None: the default credentials (local stack).
        self._session = session
        self._tenant_clients: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _client_config(self) -> Config:
        return self._config.merge(_NO_SDK_RETRIES) if self._config is not None else _NO_SDK_RETRIES

    @property
    def client(self) -> Any:
        """The boto3 client on the default credentials (or the injected one), created on first use: a worker that
        never calls this service never builds it."""
        if self._client is None:
            maker: Any = boto3
            self._client = maker.client(self.service, config=self._client_config())
        return self._client

    def client_for(self, tenant: str) -> Any:
        """The client a tenant's call goes through: on the target role's session tagged with that tenant, so the
        role's grants for other tenants do not apply; the default client when there is no target role."""
        if self._session is None or self._client is not None:
            return self.client
        with self._lock:
            client = self._tenant_clients.pop(tenant, None)
            if client is None:
                client = self._session(tenant).client(self.service, config=self._client_config())
            self._tenant_clients[tenant] = client  # most recently used last
            while len(self._tenant_clients) > TENANT_CLIENTS_KEPT:
                self._tenant_clients.pop(next(iter(self._tenant_clients)))
            return client

    def _failure(self, exc: ClientError | BotoCoreError, target: str) -> TargetFailure:
        return classify_aws_error(exc, target, self.grant)

    def _call(self, tenant: str, where: str, operation: str, **request: Any) -> Any:
        """The tenant's client's `operation` with `request`; an AWS error becomes a classified TargetFailure on
        `where`."""
        try:
            return getattr(self.client_for(tenant), operation)(**request)
        except (ClientError, BotoCoreError) as exc:
            raise self._failure(exc, where) from exc


def _fifo_fields(address: str, call: TargetCall, group: str) -> dict[str, str]:
    """For a FIFO queue or topic (its URL or ARN ends in `.fifo`): the occurrence key as the deduplication id, so
    SQS/SNS drop a repeated attempt within their 5-minute window, and the message group; nothing otherwise."""
    if not address.endswith(".fifo"):
        return {}
    return {"MessageDeduplicationId": message_id(call.occurrence_key), "MessageGroupId": message_id(group)}


def _encrypted_grant(kind: str, field: str) -> str:
    """How to grant access to a queue or topic, which may be encrypted with a KMS key."""
    return (
        f"add the {kind}'s ARN to `{field}` in the deployment configuration (and its KMS key, if the {kind} is "
        "encrypted with one, to `target_kms_key_arns`), then redeploy"
    )


class _MessageTargetInvoker(_AwsTargetInvoker):
    """SQS and SNS: the payload as the message, the scheduler metadata as message attributes, and for a FIFO
    queue or topic the occurrence key as `MessageDeduplicationId` (`_fifo_fields`)."""

    #: The operation, the request fields that name the destination and carry the payload, and its noun.
    operation: ClassVar[str]
    address_field: ClassVar[str]
    body_field: ClassVar[str]
    noun: ClassVar[str]

    @staticmethod
    def destination(call: TargetCall) -> tuple[str, str]:
        """Where the message goes (queue URL or topic ARN) and its FIFO message group: a queue's messages are
        grouped by `message_group_id` or the job id, a topic's by the job id."""
        target = call.job.spec.target
        if isinstance(target, SqsTarget):
            return target.queue_url, target.message_group_id or call.job.job_id
        assert isinstance(target, SnsTarget)
        return target.topic_arn, call.job.job_id

    def invoke(self, call: TargetCall) -> str | None:
        address, group = self.destination(call)
        response = self._call(
            call.job.tenant,
            f"{self.noun} {address}",
            self.operation,
            **{self.address_field: address, self.body_field: _json(call.job.spec.payload)},
            MessageAttributes=message_attributes(call),
            **_fifo_fields(address, call, group),
        )
        return _short(f"{self.service.upper()} message {response.get('MessageId', '?')}")


class SqsTargetInvoker(_MessageTargetInvoker):
    """`sqs`: SendMessage with the payload as body. A FIFO queue's messages are grouped by `message_group_id` or
    the job id."""

    service, operation, address_field, body_field, noun = "sqs", "send_message", "QueueUrl", "MessageBody", "SQS queue"
    grant = _encrypted_grant("queue", "target_sqs_queue_arns")


class SnsTargetInvoker(_MessageTargetInvoker):
    """`sns`: Publish the payload. A FIFO topic's messages are grouped by job id."""

    service, operation, address_field, body_field, noun = "sns", "publish", "TopicArn", "Message", "SNS topic"
    grant = _encrypted_grant("topic", "target_sns_topic_arns")


class EventBridgeTargetInvoker(_AwsTargetInvoker):
    """`eventbridge`: PutEvents of one event whose detail is the envelope. PutEvents reports a refused entry in
    its answer, not as an error: a non-zero FailedEntryCount is classified by the entry's ErrorCode."""

    service = "events"
    grant = "add the event bus's ARN to `target_event_bus_arns` in the deployment configuration, then redeploy"

    def invoke(self, call: TargetCall) -> str | None:
        target = call.job.spec.target
        assert isinstance(target, EventBridgeTarget)
        where = f"EventBridge bus {target.event_bus_name}"
        entry = {
            "EventBusName": target.event_bus_name,
            "Source": target.source,
            "DetailType": target.detail_type,
            "Detail": _json(envelope(call)),
        }
        response = self._call(call.job.tenant, where, "put_events", Entries=[entry])
        entries = response.get("Entries") or [{}]
        if response.get("FailedEntryCount", 0):
            failed = next((e for e in entries if e.get("ErrorCode")), entries[0])
            raise classify_error_code(
                str(failed.get("ErrorCode", "Unknown")), str(failed.get("ErrorMessage", "")), None, where, self.grant
            )
        return _short(f"EventBridge event {entries[0].get('EventId', '?')}")


class LambdaTargetInvoker(_AwsTargetInvoker):
    """`lambda`: a synchronous Invoke (RequestResponse) with the envelope as the event.

    The function receives the occurrence key and the fencing token and must dedupe on the key itself (Lambda
    has no dedupe of its own). A function that raised (`FunctionError`) is retryable: it may succeed next
    time. A read timeout after the request was sent is ambiguous: the function may be running or done.
    """

    service = "lambda"
    grant = (
        "add the function's ARN (with its qualifier, if the job names one) to `target_lambda_function_arns` in "
        "the deployment configuration, then redeploy"
    )

    def __init__(self, *args: Any, read_timeout: float = LAMBDA_READ_TIMEOUT_SECONDS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = read_timeout

    def _client_config(self) -> Config:
        long_read = Config(read_timeout=self.read_timeout, tcp_keepalive=True)
        return super()._client_config().merge(long_read)

    def invoke(self, call: TargetCall) -> str | None:
        target = call.job.spec.target
        assert isinstance(target, LambdaTarget)
        where = f"Lambda function {target.function_name}"
        try:
            response = self.client_for(call.job.tenant).invoke(
                FunctionName=target.function_name,
                InvocationType="RequestResponse",
                Payload=_json(envelope(call)).encode(),
            )
            body = response["Payload"].read() if response.get("Payload") is not None else b""
        except (ClientError, BotoCoreError) as exc:
            raise self._failure(exc, where) from exc
        text = body.decode("utf-8", errors="replace")
        if response.get("FunctionError"):
            raise TargetFailure(
                "retryable", f"{where} raised an error ({response['FunctionError']}): {_error_of(text)}"
            )
        return _short(f"{where} returned {text}" if text else f"{where} returned nothing")


def _error_of(text: str) -> str:
    """The `errorType: errorMessage` of a Lambda error payload, or the raw payload."""
    try:
        error = json.loads(text)
    except ValueError:
        return _short(text)
    if isinstance(error, dict) and ("errorMessage" in error or "errorType" in error):
        return _short(f"{error.get('errorType', 'Error')}: {error.get('errorMessage', '')}")
    return _short(text)


class StepFunctionsTargetInvoker(_AwsTargetInvoker):
    """`stepfunctions`: StartExecution named after the occurrence key, with the envelope as input.

    Step Functions refuses a second execution with the same name (`ExecutionAlreadyExists`), for 90 days after
    the first one closed: that is the native dedupe at work, so it counts as success ("already started").
    A same-name start with an identical input while the first is still running is answered with the first
    execution itself - also success. Only STANDARD state machines dedupe names; EXPRESS ones must dedupe on
    `occurrence_key` in their input.
    """

    service = "stepfunctions"
    grant = "add the state machine's ARN to `target_state_machine_arns` in the deployment configuration, then redeploy"

    def invoke(self, call: TargetCall) -> str | None:
        target = call.job.spec.target
        assert isinstance(target, StepFunctionsTarget)
        name = execution_name(call.occurrence_key)
        try:
            self.client_for(call.job.tenant).start_execution(
                stateMachineArn=target.state_machine_arn, name=name, input=_json(envelope(call))
            )
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ExecutionAlreadyExists":
                return _short(f"execution {name} already started")
            raise self._failure(exc, f"state machine {target.state_machine_arn}") from exc
        except BotoCoreError as exc:
            raise self._failure(exc, f"state machine {target.state_machine_arn}") from exc
        return _short(f"execution {name} started")


def assumed_role_session(
    role_arn: str, session_name: str, sts: Any | None = None, tags: Mapping[str, str] | None = None
) -> Any:
    """A boto3 Session on the role `role_arn`, its credentials refreshed (AssumeRole) before they expire; `tags`
    become session tags (the target role's grants are conditioned on the tenant's)."""
    from botocore.credentials import RefreshableCredentials
    from botocore.session import get_session

    client = sts or boto3.client("sts", config=Config(retries={"mode": "standard", "max_attempts": 5}))
    tag_list = [{"Key": key, "Value": value} for key, value in (tags or {}).items()]

    def fetch() -> dict[str, str]:
        request: dict[str, Any] = {"RoleArn": role_arn, "RoleSessionName": session_name[:64], "DurationSeconds": 3600}
        if tag_list:
            request["Tags"] = tag_list
        answer = client.assume_role(**request)
        credentials = answer["Credentials"]
        return {
            "access_key": credentials["AccessKeyId"],
            "secret_key": credentials["SecretAccessKey"],
            "token": credentials["SessionToken"],
            "expiry_time": credentials["Expiration"].isoformat(),
        }

    botocore_session: Any = get_session()
    # botocore has no public setter for refreshable credentials (this is how boto3's own tooling does it).
    botocore_session._credentials = RefreshableCredentials.create_from_metadata(
        metadata=fetch(), refresh_using=fetch, method="sts-assume-role"
    )
    return boto3.Session(botocore_session=botocore_session)


def tenant_sessions(role_arn: str, sts: Any | None = None) -> Callable[[str], Any]:
    """Sessions on the target role, one per tenant (kept for the worker's life, the most recent
    TENANT_CLIENTS_KEPT), each tagged with its tenant and named after it."""

    @functools.lru_cache(maxsize=TENANT_CLIENTS_KEPT)
    def session(tenant: str) -> Any:
        return assumed_role_session(role_arn, tenant_session_name(tenant), sts, {TENANT_TAG: tenant_tag(tenant)})

    return session


def build_aws_targets(
    config: Config | None = None, target_role_arn: str = "", max_wait_seconds: float = LAMBDA_READ_TIMEOUT_SECONDS
) -> dict[str, TargetInvoker]:
    """The AWS target invokers by target type, for the executor's `targets` map. Each builds its client on first
    use, from `config` (timeouts, connection pool) with the SDK's retries turned off (see the module docstring),
    with the credentials of `target_role_arn` when given (the stack's target role, assumed per tenant). A
    `lambda` target is waited for `max_wait_seconds` at most (the worker must outlive the call)."""
    session = tenant_sessions(target_role_arn) if target_role_arn else None
    return {
        "sqs": SqsTargetInvoker(config=config, session=session),
        "sns": SnsTargetInvoker(config=config, session=session),
        "eventbridge": EventBridgeTargetInvoker(config=config, session=session),
        "lambda": LambdaTargetInvoker(config=config, session=session, read_timeout=max_wait_seconds),
        "stepfunctions": StepFunctionsTargetInvoker(config=config, session=session),
    }
