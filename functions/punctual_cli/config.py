"""Where the CLI finds the scheduler: the API URL and credentials, and (for `status` and `dlq`) the tables and
queues behind it.

Locally, `scripts/dev` writes `<state dir>/stack.json` and `stack.env` (API URL, endpoints, table and queue
names). On AWS the CloudFormation stack's outputs say the same (`ApiUrl`, `JobsTableName`, ...).
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from punctual_cli.client import Auth, BearerAuth, SigV4Auth, is_execute_api
from punctual_cli.definition import UsageError

DEFAULT_API_URL = "http://127.0.0.1:8080"
DEFAULT_TOKEN = "dev-token"
#: The outputs of the CDK stack (infra/stack.py) that the CLI reads.
OUTPUT_API_URL = "ApiUrl"
OUTPUT_JOBS_TABLE = "JobsTableName"
OUTPUT_EXECUTIONS_TABLE = "ExecutionsTableName"
OUTPUT_READY_QUEUE = "ReadyQueueUrl"
OUTPUT_DLQ = "DeadLetterQueueUrl"
#: The other priority lanes' ready queues (the normal lane is OUTPUT_READY_QUEUE).
OUTPUT_LANE_QUEUES = {"high": "ReadyQueueHighUrl", "low": "ReadyQueueLowUrl"}
OUTPUT_MESSAGE_SECRET = "MessageSecretArn"


def default_state_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """`$SCHEDULER_STATE_DIR`, else `.local` in the current folder (where scripts/dev keeps its state)."""
    return Path(environ.get("SCHEDULER_STATE_DIR") or ".local")


def read_stack_file(state_dir: Path) -> dict[str, str] | None:
    """The values `scripts/dev` wrote for tools: `stack.json`, else the shell exports of `stack.env`."""
    as_json = state_dir / "stack.json"
    if as_json.is_file():
        try:
            values = json.loads(as_json.read_text())
        except (OSError, json.JSONDecodeError):
            values = None
        if isinstance(values, dict):
            return {str(k): str(v) for k, v in values.items()}
    as_env = state_dir / "stack.env"
    if as_env.is_file():
        found: dict[str, str] = {}
        for line in as_env.read_text().splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] == "export":
                words = words[1:]
            for word in words:
                key, sep, value = word.partition("=")
                if sep:
                    found[key] = value
        return found
    return None


@dataclass(frozen=True)
class Connection:
    """How to reach the API, and why this URL (for error messages)."""

    api_url: str
    source: str
    auth: Auth


def resolve_api_url(
    flag: str | None, stack_outputs: Mapping[str, str] | None, environ: Mapping[str, str], state_dir: Path
) -> tuple[str, str]:
    """`--api`, else the stack's `ApiUrl`, else `$PUNCTUAL_API_URL`, else the local stack file, else 8080."""
    if flag:
        return flag, "--api"
    if stack_outputs and stack_outputs.get(OUTPUT_API_URL):
        return stack_outputs[OUTPUT_API_URL], f"the {OUTPUT_API_URL} output of --stack"
    if environ.get("PUNCTUAL_API_URL"):
        return environ["PUNCTUAL_API_URL"], "$PUNCTUAL_API_URL"
    local = read_stack_file(state_dir)
    if local and local.get("SCHEDULER_API_URL"):
        return local["SCHEDULER_API_URL"], f"{state_dir}/stack.json"
    return DEFAULT_API_URL, "the default"


def connection(
    *,
    api: str | None,
    token: str | None,
    aws: bool,
    state_dir: Path,
    stack_outputs: Mapping[str, str] | None = None,
    session: Any = None,
    make_session: Callable[[], Any] | None = None,
    region: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Connection:
    """The API URL and its auth: SigV4 with `--aws`, with `--stack` or for an `execute-api` host; else a bearer
    token (`--token`, `$PUNCTUAL_TOKEN`, `dev-token`). The AWS session (or `make_session()`) is only needed, and
    only made, for SigV4: a broken AWS profile does not stop local use."""
    url, source = resolve_api_url(api, stack_outputs, environ, state_dir)
    auth: Auth
    if aws or stack_outputs or is_execute_api(url):
        if session is None and make_session is not None:
            session = make_session()
        signer = SigV4Auth.for_url(url, session)
        if region:
            signer.region = region
        auth = signer
    else:
        auth = BearerAuth(token or environ.get("PUNCTUAL_TOKEN") or DEFAULT_TOKEN)
    return Connection(url, source, auth)


def stack_outputs(stack_name: str, session: Any) -> dict[str, str]:
    """The outputs of a deployed punctual CloudFormation stack."""
    client = session.client("cloudformation")
    stacks = client.describe_stacks(StackName=stack_name)["Stacks"]
    if not stacks:
        raise UsageError(f"no CloudFormation stack named '{stack_name}'")
    return {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}


@dataclass(frozen=True)
class Deployment:
    """The tables and queues behind the API, for the operator commands (`status`, `dlq`).

    `endpoints` are the emulators' URLs locally (empty on AWS); `log_dir` is where the local processes write
    their EMF metric lines (None on AWS, where CloudWatch has the metrics).
    """

    jobs_table: str
    executions_table: str
    ready_queue_url: str
    dlq_url: str
    on_aws: bool
    session: Any
    description: str
    endpoints: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    #: The Secrets Manager secret that authenticates dispatch messages (on AWS; locally the development one).
    message_secret_arn: str = ""
    #: The ready queues of the high and low priority lanes (`ready_queue_url` is the normal lane's).
    lane_queue_urls: dict[str, str] = field(default_factory=dict)

    def ready_queues(self) -> dict[str, str]:
        """Every priority lane's ready queue, high to low (a stack without lanes has only `normal`)."""
        lanes = {"high": self.lane_queue_urls.get("high", ""), "normal": self.ready_queue_url}
        lanes["low"] = self.lane_queue_urls.get("low", "")
        return {lane: url for lane, url in lanes.items() if url}

    def message_key(self) -> bytes:
        """The key redrive checks and signs dispatch messages with: the stack's message secret (the operator needs
        secretsmanager:GetSecretValue on it), or locally the local stack's development key."""
        from scheduler.adapters.dispatch_message import message_key
        from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY

        if not self.message_secret_arn:
            if self.on_aws:
                raise UsageError(f"the stack has no {OUTPUT_MESSAGE_SECRET} output: redeploy it with this version")
            return LOCAL_MESSAGE_KEY
        secret = self.client("secretsmanager").get_secret_value(SecretId=self.message_secret_arn)
        return message_key(str(secret["SecretString"]))

    def client(self, service: str) -> Any:
        """A boto3 client for `service`, pointed at the emulator locally."""
        endpoint = self.endpoints.get(service) or self.endpoints.get("default")
        return self.session.client(service, endpoint_url=endpoint) if endpoint else self.session.client(service)


def aws_deployment(stack_name: str, session: Any, outputs: Mapping[str, str] | None = None) -> Deployment:
    outputs = outputs or stack_outputs(stack_name, session)
    missing = [
        key
        for key in (OUTPUT_JOBS_TABLE, OUTPUT_EXECUTIONS_TABLE, OUTPUT_READY_QUEUE, OUTPUT_DLQ)
        if not outputs.get(key)
    ]
    if missing:
        raise UsageError(f"stack '{stack_name}' has no output {', '.join(missing)}: is it a punctual stack?")
    return Deployment(
        outputs[OUTPUT_JOBS_TABLE],
        outputs[OUTPUT_EXECUTIONS_TABLE],
        outputs[OUTPUT_READY_QUEUE],
        outputs[OUTPUT_DLQ],
        on_aws=True,
        session=session,
        description=f"stack {stack_name} ({session.region_name})",
        message_secret_arn=outputs.get(OUTPUT_MESSAGE_SECRET, ""),
        lane_queue_urls={lane: outputs[key] for lane, key in OUTPUT_LANE_QUEUES.items() if outputs.get(key)},
    )


def local_deployment(state_dir: Path) -> Deployment:
    """The local stack that `scripts/dev` (or a test's LocalStack) runs with its state in `state_dir`."""
    import boto3

    values = read_stack_file(state_dir)
    if not values:
        raise UsageError(
            f"no local stack found ({state_dir}/stack.json is missing): start one with scripts/dev, pass "
            "--state-dir, or use --stack NAME for a deployed stack"
        )
    session = boto3.Session(
        aws_access_key_id=values.get("AWS_ACCESS_KEY_ID") or "local",
        aws_secret_access_key=values.get("AWS_SECRET_ACCESS_KEY") or "local",
        region_name=values.get("AWS_DEFAULT_REGION") or "us-east-1",
    )
    endpoints = {
        "dynamodb": values.get("AWS_ENDPOINT_URL_DYNAMODB", ""),
        "sqs": values.get("AWS_ENDPOINT_URL_SQS", ""),
        "default": values.get("AWS_ENDPOINT_URL", ""),
    }
    return Deployment(
        values.get("SCHEDULER_JOBS_TABLE", ""),
        values.get("SCHEDULER_EXECUTIONS_TABLE", ""),
        values.get("SCHEDULER_READY_QUEUE_URL", ""),
        values.get("SCHEDULER_DLQ_URL", ""),
        on_aws=False,
        session=session,
        description=f"local stack ({state_dir})",
        endpoints={k: v for k, v in endpoints.items() if v},
        log_dir=state_dir / "logs",
        lane_queue_urls={
            lane: url
            for lane, url in (
                ("high", values.get("SCHEDULER_READY_QUEUE_HIGH_URL", "")),
                ("low", values.get("SCHEDULER_READY_QUEUE_LOW_URL", "")),
            )
            if url
        },
    )
