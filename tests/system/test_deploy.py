"""The real deployment: `cdk bootstrap` + `cdk deploy` of the CDK app into ministack (a local AWS emulator), then jobs
fired through what was deployed - API Gateway (SigV4) -> api function -> DynamoDB, the EventBridge rule -> sweeper ->
SQS -> event source mapping -> worker -> HTTP - with only the named emulator adjustments
(scheduler_local.emulated_aws.adjustments), each shown here to be still needed.

If ministack cannot be installed (it needs Python 3.12 and PyPI), this fails; it never skips.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.exceptions import ClientError
from harness import Receiver

from punctual_cdk.bundling import PIP_PLATFORM
from punctual_cli.client import Run, SchedulerClient, SigV4Auth
from punctual_sdk.errors import ApiError
from punctual_sdk.receiver import verify_v2
from scheduler.adapters.address_guard import AddressGuard, BlockedAddress
from scheduler.core.model.timefmt import rfc3339
from scheduler_local.emulated_aws import adjustments
from scheduler_local.emulated_aws.deploy import STACK_NAME, Deployment, deploy
from scheduler_local.emulators import ROOT
from scheduler_local.ministack import CREDENTIALS, REGION, Ministack, MinistackNotInstalled, ensure_installed

pytestmark = [pytest.mark.system, pytest.mark.deploy, pytest.mark.load_tolerant]

#: The sweeper's EventBridge rule fires a minute after it is created (rate(1 minute)); jobs are due just after that
#: first sweep, so that it is the sweeper that hands them to SQS, on time.
FIRST_SWEEP_AFTER = timedelta(seconds=60)
MARGIN = timedelta(seconds=8)
#: How long after its due time an occurrence may take to reach its target: the functions start cold (a fresh
#: interpreter importing boto3, pydantic and Powertools), on a loaded 2-core machine.
FIRE_TIMEOUT = 120


@pytest.fixture(scope="module")
def workdir() -> Path:
    path = ROOT / ".local" / "deploy-test"
    path.mkdir(parents=True, exist_ok=True)
    for stale in ("cdk.log", "ministack.log", "auth-probe.log"):
        (path / stale).unlink(missing_ok=True)
    return path


@pytest.fixture(scope="module")
def ministack_program() -> Path:
    try:
        return ensure_installed()
    except MinistackNotInstalled as error:
        pytest.fail(f"the deploy-and-fire test needs ministack and cannot run without it: {error}", pytrace=False)


@pytest.fixture(scope="module")
def emulator(ministack_program: Path, workdir: Path) -> Iterator[Ministack]:
    emulator = Ministack(workdir / "ministack.log", env=adjustments.EMULATOR_ENV, program=ministack_program)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="module")
def deployment(emulator: Ministack, workdir: Path) -> Deployment:
    deployed = deploy(emulator, workdir / "cdk.log")
    print(f"deployed in {sum(deployed.timings.values()):.0f}s: {deployed.timings}")
    return deployed


@pytest.fixture(scope="module")
def session() -> boto3.Session:
    return boto3.Session(
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=REGION,
    )


@pytest.fixture(scope="module")
def aws(emulator: Ministack, session: boto3.Session) -> Callable[[str], Any]:
    """A boto3 client of the emulator (never of a real account)."""
    return lambda service: session.client(service, endpoint_url=emulator.endpoint)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def api(deployment: Deployment, session: boto3.Session) -> SchedulerClient:
    """The punctual client as `punctual --api <url> --aws` uses it: SigV4-signed requests to the deployed API."""
    return SchedulerClient(deployment.api_url, SigV4Auth(REGION, session))


# -- the adjustments -------------------------------------------------------------------------------------------


@dataclass
class Context:
    emulator: Ministack
    aws: Callable[[str], Any]
    deployment: Deployment
    receivers: Receivers
    ministack_program: Path
    workdir: Path
    session: boto3.Session


def evidence_asset_platform(ctx: Context) -> None:
    """The emulator's interpreter is the Lambda runtime's Python, yet cannot load the Lambda platform's wheels."""
    probe = (
        "import sys; from pip._vendor.packaging.tags import sys_tags; "
        f"print(sys.version_info[:2] == (3, 12), any(tag.platform == {PIP_PLATFORM!r} for tag in sys_tags()))"
    )
    python = ctx.emulator.executable.parent / "python"
    runtime_python, loads_lambda_wheels = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.split()
    assert runtime_python == "True", "ministack's venv must be Python 3.12, the Lambda runtime"
    assert loads_lambda_wheels == "False", f"this machine loads {PIP_PLATFORM} wheels: drop the host-platform asset"


def evidence_metric_math(ctx: Context) -> None:
    """The emulator's CloudFormation still refuses an alarm on metric math (the stack's error-rate alarms)."""
    # The deployed template has no such alarm left; the adjustment found some in the real stack, or synth failed.
    alarms = [r for r in ctx.deployment.template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]  # type: ignore[attr-defined]
    assert not [a for a in alarms if "Metrics" in a["Properties"]]
    cloudformation = ctx.aws("cloudformation")
    name = "punctual-probe-metric-math"
    metric = {"Namespace": "AWS/Lambda", "MetricName": "Errors"}
    template = {
        "Resources": {
            "Rate": {
                "Type": "AWS::CloudWatch::Alarm",
                "Properties": {
                    "ComparisonOperator": "GreaterThanThreshold",
                    "EvaluationPeriods": 1,
                    "Threshold": 1,
                    "Metrics": [
                        {"Id": "rate", "Expression": "100 * errors / invocations", "ReturnData": True},
                        {"Id": "errors", "MetricStat": {"Metric": metric, "Period": 300, "Stat": "Sum"}},
                        {
                            "Id": "invocations",
                            "MetricStat": {
                                "Metric": {**metric, "MetricName": "Invocations"},
                                "Period": 300,
                                "Stat": "Sum",
                            },
                            "ReturnData": False,
                        },
                    ],
                },
            }
        }
    }
    cloudformation.create_stack(StackName=name, TemplateBody=json.dumps(template))
    status = _stack_status(cloudformation, name)
    cloudformation.delete_stack(StackName=name)
    assert status != "CREATE_COMPLETE", (
        "ministack now creates metric-math alarms: drop the plain-error-alarms adjustment"
    )


def evidence_private_targets(ctx: Context) -> None:
    """The SSRF guard, as the stack configures it, refuses the loopback receivers."""
    with pytest.raises(BlockedAddress):
        AddressGuard(allow_private=False).addresses(ctx.receivers.ok.url)
    functions = [r for r in ctx.deployment.template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]  # type: ignore[attr-defined]
    assert {f["Properties"]["Environment"]["Variables"][adjustments.ALLOW_PRIVATE_TARGETS] for f in functions} == {
        "true"
    }


def evidence_iam(ctx: Context) -> None:
    """With AUTH=true, ministack denies SendMessageBatch to a principal that AWS would allow (sqs:SendMessage)."""
    with Ministack(ctx.workdir / "auth-probe.log", env={"AUTH": "true"}, program=ctx.ministack_program) as probe:
        iam = ctx.session.client("iam", endpoint_url=probe.endpoint)
        sqs = ctx.session.client("sqs", endpoint_url=probe.endpoint)
        queue = sqs.create_queue(QueueName="probe")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        iam.create_user(UserName="sender")
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": arn}],
        }
        iam.put_user_policy(UserName="sender", PolicyName="send", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="sender")["AccessKey"]
        sender = boto3.client(
            "sqs",
            endpoint_url=probe.endpoint,
            region_name=REGION,
            aws_access_key_id=key["AccessKeyId"],
            aws_secret_access_key=key["SecretAccessKey"],
        )
        sender.send_message(QueueUrl=queue, MessageBody="allowed")  # enforcement is on and the policy applies
        with pytest.raises(ClientError):
            sender.purge_queue(QueueUrl=queue)  # not granted: denied
        try:
            sender.send_message_batch(QueueUrl=queue, Entries=[{"Id": "1", "MessageBody": "batch"}])
        except ClientError as error:
            assert "AccessDenied" in str(error)
        else:
            pytest.fail("ministack authorizes SendMessageBatch as AWS does now: run it with AUTH=true")


EVIDENCE = {
    adjustments.HOST_PLATFORM_ASSET: evidence_asset_platform,
    adjustments.PLAIN_ALARMS: evidence_metric_math,
    adjustments.PRIVATE_TARGETS: evidence_private_targets,
    adjustments.IAM_NOT_ENFORCED: evidence_iam,
}


def test_every_adjustment_is_still_needed(
    emulator: Ministack,
    aws: Callable[[str], Any],
    deployment: Deployment,
    jobs: Jobs,
    ministack_program: Path,
    workdir: Path,
    session: boto3.Session,
) -> None:
    # (It asks for the jobs, so that they are created first and this runs while they wait for the first sweep.)
    assert set(EVIDENCE) == set(adjustments.ADJUSTMENTS), "each adjustment needs its evidence here"
    ctx = Context(emulator, aws, deployment, jobs.receivers, ministack_program, workdir, session)
    for adjustment, evidence in EVIDENCE.items():
        evidence(ctx)
        print(f"still needed: {adjustment.name}")


# -- jobs through the deployed API ----------------------------------------------------------------------------


@dataclass
class Receivers:
    ok: Receiver
    refusing: Receiver


@dataclass
class Jobs:
    receivers: Receivers
    due: datetime
    one_shot: str
    rate: str
    refused: str


@pytest.fixture(scope="module")
def jobs(api: SchedulerClient, aws: Callable[[str], Any]) -> Iterator[Jobs]:
    """A one-shot job, a rate job, and a one-shot job to a target answering 404, all due just after the first sweep."""
    receivers = Receivers(Receiver().start(), Receiver(respond=lambda n, h: (404, {})).start())
    rule_created = _resource_created(aws("cloudformation"), "AWS::Events::Rule")
    due = max(rule_created + FIRST_SWEEP_AFTER, datetime.now(UTC)) + MARGIN
    due = due.replace(microsecond=0)
    http = {"type": "http", "url": receivers.ok.url}
    one_shot = api.create({"schedule": {"type": "once", "at": rfc3339(due)}, "target": http, "payload": {"n": 1}})
    rate = api.create(
        {
            "schedule": {"type": "rate", "every_seconds": 60, "start_at": rfc3339(due)},
            "target": http,
            "payload": {"n": 2},
        }
    )
    refused = api.create(
        {
            "schedule": {"type": "once", "at": rfc3339(due)},
            "target": {"type": "http", "url": receivers.refusing.url},
            "retry": {"max_attempts": 3, "initial_backoff_seconds": 1},
        }
    )
    try:
        yield Jobs(receivers, due, one_shot.job_id, rate.job_id, refused.job_id)
    finally:
        receivers.ok.stop()
        receivers.refusing.stop()


def test_one_shot_and_rate_jobs_fire_once_each_signed_with_key_and_token(
    jobs: Jobs, api: SchedulerClient, aws: Callable[[str], Any], deployment: Deployment
) -> None:
    # When both jobs' first occurrence is due (and a little longer, to catch a second call)
    calls = jobs.receivers.ok.wait_for(2, timeout=_until(jobs.due) + FIRE_TIMEOUT)
    time.sleep(3)

    # Then each fired exactly once, with its occurrence key, a fencing token and a valid signature
    assert len(jobs.receivers.ok.calls) == 2, f"{calls}\n{_function_logs(aws)}"
    by_job = {call.headers["x-scheduler-job-id"]: call for call in calls}
    assert set(by_job) == {jobs.one_shot, jobs.rate}
    path = urlsplit(jobs.receivers.ok.url).path
    for job_id, call in by_job.items():
        key = f"{job_id}:{rfc3339(jobs.due)}"
        assert call.headers["idempotency-key"] == key
        assert call.headers["x-scheduler-attempt"] == "1"
        assert int(call.headers["x-scheduler-fencing-token"]) >= 1
        assert call.at >= jobs.due.timestamp(), "fired early"
        # signature v2, with the job's own keys as a tenant fetches them through the deployed API (SigV4)
        keys = api.signing_keys(job_id).by_id()
        signed = verify_v2(keys, "POST", call.headers["host"], path, call.headers, call.body)
        assert (signed.occurrence_key, signed.fencing_token) == (key, int(call.headers["x-scheduler-fencing-token"]))
        # And the run history records it
        assert [(run.occurrence_key, run.state.value) for run in _runs(api, job_id)] == [(key, "SUCCEEDED")]
    assert json.loads(by_job[jobs.rate].body) == {"n": 2}

    # And it was the sweeper, started by its EventBridge rule, that dispatched them: it moved the watermark
    watermark = aws("dynamodb").get_item(
        TableName=deployment.outputs["JobsTableName"], Key={"PK": {"S": "WATERMARK"}, "SK": {"S": "WATERMARK"}}
    )
    assert "Item" in watermark, "the sweeper never ran"


def test_a_target_answering_4xx_goes_dead_and_reaches_the_dlq(
    jobs: Jobs, api: SchedulerClient, aws: Callable[[str], Any], deployment: Deployment
) -> None:
    key = f"{jobs.refused}:{rfc3339(jobs.due)}"
    try:
        run = _wait_run(api, jobs.refused, "DEAD", timeout=_until(jobs.due) + FIRE_TIMEOUT)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{_function_logs(aws)}") from None

    # Then the 404 was not retried (a refused request is permanent), the run is DEAD, and the DLQ holds it
    assert run.occurrence_key == key
    assert run.attempts == 1
    assert "404" in (run.last_error or "")
    assert len(jobs.receivers.refusing.calls) == 1
    sqs = aws("sqs")
    dlq = sqs.get_queue_url(QueueName=deployment.outputs["DeadLetterQueueUrl"].rsplit("/", 1)[1])["QueueUrl"]
    bodies = [
        m["Body"]
        for m in sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10, WaitTimeSeconds=5).get("Messages", [])
    ]
    assert any(key in body for body in bodies), bodies


def test_the_functions_log_no_error_but_the_expected_dead_occurrence(
    jobs: Jobs, aws: Callable[[str], Any], deployment: Deployment
) -> None:
    """What the offline checks cannot see - a missing variable, an unreachable bus, a wrong queue URL - shows as an
    error in the deployed functions' logs even where the jobs still fire (e.g. completion events to the outbox)."""
    dead = f"{jobs.refused}:{rfc3339(jobs.due)}"
    errors, expected = [], []
    for group, message in _log_lines(aws):
        try:
            line = json.loads(message)
        except ValueError:
            continue
        if not isinstance(line, dict) or str(line.get("level", "")).upper() not in {"ERROR", "CRITICAL"}:
            continue
        if line.get("message") == "occurrence dead" and line.get("occurrence_key") == dead:
            expected.append(group)
        else:
            errors.append(f"{group}: {message}")
    assert not errors, "\n".join(errors)
    # (And the logs were read: the worker's line about the dead occurrence is there, in the worker's log group.)
    assert len(expected) == 1, f"no 'occurrence dead' line of {dead} in the logs:\n{_function_logs(aws)}"
    assert "Worker" in expected[0]


# -- helpers ---------------------------------------------------------------------------------------------------


def _until(moment: datetime) -> float:
    return max(0.0, (moment - datetime.now(UTC)).total_seconds())


def _log_lines(aws: Callable[[str], Any]) -> Iterator[tuple[str, str]]:
    """(log group, message) of every line the emulator's log groups hold."""
    logs = aws("logs")
    for group in logs.get_paginator("describe_log_groups").paginate():
        for found in group.get("logGroups", []):
            name = found["logGroupName"]
            for page in logs.get_paginator("filter_log_events").paginate(logGroupName=name):
                for event in page.get("events", []):
                    yield name, str(event["message"]).rstrip()


def _function_logs(aws: Callable[[str], Any], lines: int = 120) -> str:
    """The last log lines of the emulator's log groups, for a failure's message."""
    return "\n".join(f"{group}: {message}" for group, message in list(_log_lines(aws))[-lines:])


def _runs(api: SchedulerClient, job_id: str) -> list[Run]:
    return list(api.iter_runs(job_id))


def _wait_run(api: SchedulerClient, job_id: str, state: str, timeout: float) -> Run:
    deadline = time.monotonic() + timeout
    runs: list[Run] = []
    while time.monotonic() < deadline:
        runs = _runs(api, job_id)
        if runs and runs[0].state.value == state:
            return runs[0]
        time.sleep(1)
    raise AssertionError(f"no {state} run of {job_id} within {timeout:.0f}s: {runs}")


def _stack_status(cloudformation: Any, name: str, timeout: float = 30) -> str:
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        status = cloudformation.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
        if not status.endswith("IN_PROGRESS"):
            return str(status)
        time.sleep(0.5)
    return status


def _resource_created(cloudformation: Any, resource_type: str) -> datetime:
    resources = cloudformation.describe_stack_resources(StackName=STACK_NAME)["StackResources"]
    stamp: datetime = next(r["Timestamp"] for r in resources if r["ResourceType"] == resource_type)
    return stamp.astimezone(UTC)


# -- tenant isolation at AWS targets ---------------------------------------------------------------------------


@dataclass
class Tenants:
    a: SchedulerClient
    b: SchedulerClient
    id_a: str
    queue_a: str
    queue_b: str
    job_a: str
    due: datetime


def _tenant(aws: Callable[[str], Any], deployment: Deployment, name: str) -> tuple[str, SchedulerClient]:
    """An IAM user of the emulator, its tenant id as the API keys it, and a client signing as it."""
    iam = aws("iam")
    user = iam.create_user(UserName=name)["User"]
    key = iam.create_access_key(UserName=name)["AccessKey"]
    session = boto3.Session(
        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], region_name=REGION
    )
    return f"{user['Arn']}#{user['UserId']}", SchedulerClient(deployment.api_url, SigV4Auth(REGION, session))


def _set_allow_lists(aws: Callable[[str], Any], allow: dict[str, Any]) -> None:
    """What a redeploy with `tenant_targets` sets: the allow-lists of the api (submit) and the worker (call)."""
    _set_function_env(aws, ("Api", "Worker"), "SCHEDULER_TENANT_TARGETS", json.dumps(allow))


def _set_function_env(aws: Callable[[str], Any], functions: tuple[str, ...], name: str, value: str) -> None:
    """What a redeploy with a changed setting does: the variable set on the named functions of the stack."""
    lambda_ = aws("lambda")
    resources = aws("cloudformation").describe_stack_resources(StackName=STACK_NAME)["StackResources"]
    for resource in resources:
        if resource["ResourceType"] != "AWS::Lambda::Function":
            continue
        if not resource["LogicalResourceId"].startswith(functions):
            continue
        function = resource["PhysicalResourceId"]
        variables = lambda_.get_function_configuration(FunctionName=function)["Environment"]["Variables"]
        variables[name] = value
        lambda_.update_function_configuration(FunctionName=function, Environment={"Variables": variables})


@pytest.fixture(scope="module")
def tenants(jobs: Jobs, deployment: Deployment, aws: Callable[[str], Any]) -> Tenants:
    """Two tenants, each allowed its own queue only (closed grants, the default); A's job to its queue is due with
    the other jobs."""
    sqs = aws("sqs")
    queue_a = sqs.create_queue(QueueName="tenant-a-orders")["QueueUrl"]
    queue_b = sqs.create_queue(QueueName="tenant-b-orders")["QueueUrl"]
    arn = {
        url: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for url in (queue_a, queue_b)
    }
    tenant_a, client_a = _tenant(aws, deployment, "tenant-a")
    tenant_b, client_b = _tenant(aws, deployment, "tenant-b")
    _set_allow_lists(aws, {tenant_a: {"sqs": [arn[queue_a]]}, tenant_b: {"sqs": [arn[queue_b]]}})
    due = max(jobs.due, datetime.now(UTC) + timedelta(seconds=20)).replace(microsecond=0)
    job = client_a.create(
        {"schedule": {"type": "once", "at": rfc3339(due)}, "target": {"type": "sqs", "queue_url": queue_a}}
    )
    return Tenants(client_a, client_b, tenant_a, queue_a, queue_b, job.job_id, due)


def test_a_tenant_is_refused_another_tenants_queue_and_reaches_its_own(
    tenants: Tenants, aws: Callable[[str], Any]
) -> None:
    # Given two tenants, each allowed its own queue
    # When each names the other's queue, the API refuses it, naming the field
    for client, foreign in ((tenants.a, tenants.queue_b), (tenants.b, tenants.queue_a)):
        with pytest.raises(ApiError) as refused:
            client.create(
                {
                    "schedule": {"type": "once", "at": rfc3339(tenants.due)},
                    "target": {"type": "sqs", "queue_url": foreign},
                }
            )
        assert refused.value.status == 422 and "allow-list" in str(refused.value), refused.value
    # And A's own job reaches A's queue, sent through the target role's session of tenant A; B's queue stays empty
    sqs = aws("sqs")
    deadline = time.monotonic() + _until(tenants.due) + FIRE_TIMEOUT
    messages: list[dict[str, Any]] = []
    while not messages and time.monotonic() < deadline:
        messages = sqs.receive_message(QueueUrl=tenants.queue_a, MessageAttributeNames=["All"], WaitTimeSeconds=5).get(
            "Messages", []
        )
    assert messages, f"tenant A's job never reached its queue\n{_function_logs(aws)}"
    key = messages[0]["MessageAttributes"]
    assert tenants.job_a in json.dumps(key), key
    assert not sqs.receive_message(QueueUrl=tenants.queue_b, WaitTimeSeconds=1).get("Messages")


def test_an_operator_reads_the_lanes_through_the_deployed_api_and_a_tenant_is_refused(
    tenants: Tenants, aws: Callable[[str], Any]
) -> None:
    # Given tenant A named in the `operators` setting of the deployed api function
    _set_function_env(aws, ("Api",), "SCHEDULER_OPERATORS", json.dumps([tenants.id_a]))
    # When A asks for the operator's view, SigV4-signed through API Gateway (until the sweeper has run: A's job is due)
    deadline = time.monotonic() + _until(tenants.due) + FIRE_TIMEOUT
    status = tenants.a.operator_status()
    while status.watermark is None and time.monotonic() < deadline:
        time.sleep(2)
        status = tenants.a.operator_status()
    # Then every lane's queue and the DLQ were read with the api function's own grants, and the sweeper's watermark
    assert {lane.lane for lane in status.lanes} >= {"normal"}, status
    assert status.ready_queue is not None and status.dead_letter_queue is not None, status
    assert status.watermark is not None, f"no watermark after the job fell due\n{_function_logs(aws)}"
    assert not [p for p in status.problems if "queue" in p or "jobs table" in p], status.problems
    # And B, not an operator, gets a 403 whose detail names the setting
    with pytest.raises(ApiError) as refused:
        tenants.b.operator_status()
    assert refused.value.status == 403 and "operators" in str(refused.value), refused.value


def test_the_deployed_api_serves_the_console_without_credentials(deployment: Deployment) -> None:
    # The stack's public GET /console/{proxy+} resource, answered by the api function from its packaged files
    import urllib.request

    with urllib.request.urlopen(deployment.api_url + "console/", timeout=30) as page:
        assert page.status == 200 and page.headers["Content-Type"].startswith("text/html")
        assert b"punctual" in page.read().lower()
        assert "connect-src 'self'" in page.headers["Content-Security-Policy"]
