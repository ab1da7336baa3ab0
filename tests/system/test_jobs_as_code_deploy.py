"""Jobs as code, deployed: `cdk deploy` into ministack (a local AWS emulator) of an app as a user writes one - its own
stack with the `Punctual` construct and two `ScheduledJob`s (scheduler_local.emulated_aws.jobs_app) - three times, and
a stack delete; after each, the jobs as the deployed API (SigV4, API Gateway) shows them.

1. Ping (every minute, to a local receiver) and Report (a nightly cron): both created, owned by the stack; Ping fires.
2. Report's schedule changed: Report changed in place (same job, next version); Ping untouched.
3. Ping removed: Ping cancelled (its run history kept); Report untouched.
4. The stack deleted: Report cancelled before the API went (read from the retained jobs table).

The custom resources run as CloudFormation runs them: ministack invokes the provider function and waits for its
answer at the ResponseURL; the only adjustments are those named in scheduler_local.emulated_aws.adjustments, each shown
to be still needed (here those of JOBS_ADJUSTMENTS; tests/system/test_deploy.py the others).

If ministack cannot be installed (it needs Python 3.12 and PyPI), this fails; it never skips.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from harness import Receiver

from punctual_cli.client import SchedulerClient, SigV4Auth
from punctual_sdk.models import Job
from scheduler.adapters.codec import job_from_item
from scheduler.core.model.labels import MANAGED_BY_LABEL
from scheduler_local.emulated_aws import adjustments
from scheduler_local.emulated_aws.deploy import Deployment, deploy, local_api_url
from scheduler_local.emulated_aws.jobs_app import JOBS_APP, JOBS_FILE, STACK_NAME
from scheduler_local.emulators import ROOT
from scheduler_local.ministack import CREDENTIALS, REGION, Ministack, MinistackNotInstalled, ensure_installed

pytestmark = [pytest.mark.system, pytest.mark.deploy, pytest.mark.load_tolerant]

OWNER = f"cdk.{STACK_NAME}"
REPORT = {
    "name": "nightly report",
    "schedule": {"type": "cron", "expression": "0 3 * * *", "timezone": "Europe/Berlin"},
    "target": {"type": "http", "url": "http://127.0.0.1:9/report"},  # (never due while the test runs)
    "payload": {"report": "daily"},
    "labels": {"team": "orders"},
}
REPORT_MOVED = {**REPORT, "schedule": {"type": "cron", "expression": "30 4 * * *", "timezone": "Europe/Berlin"}}
#: The sweeper's rule fires a minute after it is created; a rate job's first occurrence is a minute after its
#: creation; the functions start cold on a loaded 2-core machine.
FIRE_TIMEOUT = 300


@pytest.fixture(scope="module")
def workdir() -> Path:
    path = ROOT / ".local" / "jobs-deploy-test"
    path.mkdir(parents=True, exist_ok=True)
    for stale in ("cdk.log", "ministack.log"):
        (path / stale).unlink(missing_ok=True)
    return path


@pytest.fixture(scope="module")
def emulator(workdir: Path) -> Iterator[Ministack]:
    try:
        program = ensure_installed()
    except MinistackNotInstalled as error:
        pytest.fail(f"the jobs-as-code deploy test needs ministack and cannot run without it: {error}", pytrace=False)
    emulator = Ministack(workdir / "ministack.log", env=adjustments.EMULATOR_ENV, program=program)
    emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


@pytest.fixture(scope="module")
def aws(emulator: Ministack) -> Callable[[str], Any]:
    """A boto3 client of the emulator (never of a real account)."""
    session = boto3.Session(
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=REGION,
    )
    return lambda service: session.client(service, endpoint_url=emulator.endpoint)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    receiver = Receiver().start()
    try:
        yield receiver
    finally:
        receiver.stop()


@dataclass
class JobsApp:
    """The app's deployments, one after another, each with the jobs it declared."""

    emulator: Ministack
    workdir: Path
    deployments: list[Deployment]

    def deploy(self, jobs: dict[str, dict[str, Any]]) -> Deployment:
        jobs_file = self.workdir / f"jobs-{len(self.deployments) + 1}.json"
        jobs_file.write_text(json.dumps(jobs))
        deployed = deploy(
            self.emulator,
            self.workdir / "cdk.log",
            app=JOBS_APP,
            context={JOBS_FILE: str(jobs_file)},
            bootstrap=not self.deployments,
        )
        print(f"deploy {len(self.deployments) + 1} in {sum(deployed.timings.values()):.0f}s: {deployed.timings}")
        self.deployments.append(deployed)
        return deployed

    def api(self) -> SchedulerClient:
        """The deployed API, signed as the test's credentials. (ministack runs functions with the account's root
        credentials and takes the test's for the root as well: the provider's tenant and the test's are one here.)"""
        session = boto3.Session(
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
        )
        return SchedulerClient(self.deployments[-1].api_url, SigV4Auth(REGION, session))


@pytest.fixture(scope="module")
def app(emulator: Ministack, workdir: Path) -> JobsApp:
    return JobsApp(emulator, workdir, [])


@dataclass
class Jobs:
    """The jobs as the API showed them after a deployment, by construct id."""

    ping: Job | None
    report: Job


def _ping(receiver: Receiver) -> dict[str, Any]:
    return {"schedule": {"type": "rate", "every_seconds": 60}, "target": {"type": "http", "url": receiver.url}}


def _job(api: SchedulerClient, deployment: Deployment, name: str) -> Job:
    """The job of construct `name`: by the id the stack outputs, checked against its external id."""
    job = api.get(deployment.outputs[f"{name}JobId"])
    assert api.get_by_external_id(f"{OWNER}:{name}").job_id == job.job_id
    return job


@pytest.fixture(scope="module")
def first(app: JobsApp, receiver: Receiver) -> Jobs:
    deployment = app.deploy({"Ping": _ping(receiver), "Report": REPORT})
    api = app.api()
    return Jobs(_job(api, deployment, "Ping"), _job(api, deployment, "Report"))


def test_the_first_deploy_creates_both_jobs_owned_by_the_stack(app: JobsApp, first: Jobs) -> None:
    assert first.ping is not None
    for job, name in ((first.ping, "Ping"), (first.report, "Report")):
        assert job.state.value == "ACTIVE"
        assert job.external_id == f"{OWNER}:{name}"
        assert job.labels[MANAGED_BY_LABEL] == OWNER
    assert first.report.labels == {"team": "orders", MANAGED_BY_LABEL: OWNER}
    assert first.report.schedule is not None and first.report.schedule.model_dump()["expression"] == "0 3 * * *"
    managed = list(app.api().iter_jobs(labels={MANAGED_BY_LABEL: OWNER}))
    assert sorted(job.job_id for job in managed) == sorted([first.ping.job_id, first.report.job_id])


@pytest.fixture(scope="module")
def fired(first: Jobs, receiver: Receiver, aws: Callable[[str], Any]) -> None:
    calls = receiver.wait_for(1, timeout=FIRE_TIMEOUT)
    assert calls, f"Ping never fired\n{_function_logs(aws)}"


def test_the_declared_job_fires(first: Jobs, fired: None, receiver: Receiver, app: JobsApp) -> None:
    assert first.ping is not None
    assert receiver.calls[0].headers["x-scheduler-job-id"] == first.ping.job_id
    runs = list(app.api().iter_runs(first.ping.job_id))
    assert runs and runs[-1].state.value == "SUCCEEDED"


def test_the_jobs_adjustments_are_still_needed(app: JobsApp, first: Jobs, aws: Callable[[str], Any]) -> None:
    assert set(JOBS_EVIDENCE) == set(adjustments.JOBS_ADJUSTMENTS), "each adjustment needs its evidence here"
    for adjustment, evidence in JOBS_EVIDENCE.items():
        evidence(app, aws)
        print(f"still needed: {adjustment.name}")


def evidence_jobs_api(app: JobsApp, aws: Callable[[str], Any]) -> None:
    """The stack's API URL is AWS's execute-api host, which is not the emulator's address; the deployed provider calls
    the emulator's address of the same API and stage instead."""
    deployment = app.deployments[0]
    stack_url = deployment.outputs["ApiUrl"]
    assert str(urlsplit(stack_url).hostname).endswith(".amazonaws.com"), stack_url
    assert not stack_url.startswith(app.emulator.endpoint)
    functions = aws("lambda").list_functions()["Functions"]
    (provider,) = [f for f in functions if f["Handler"] == "scheduler.handlers.scheduled_job.lambda_handler"]
    variables = provider["Environment"]["Variables"]
    assert variables[adjustments.JOBS_API_URL_VARIABLE] == local_api_url(app.emulator, stack_url)


JOBS_EVIDENCE = {adjustments.LOCAL_JOBS_API: evidence_jobs_api}


@pytest.fixture(scope="module")
def second(app: JobsApp, first: Jobs, fired: None, receiver: Receiver) -> Jobs:
    deployment = app.deploy({"Ping": _ping(receiver), "Report": REPORT_MOVED})
    api = app.api()
    return Jobs(_job(api, deployment, "Ping"), _job(api, deployment, "Report"))


def test_a_changed_schedule_changes_the_job_in_place_and_the_other_is_untouched(
    app: JobsApp, first: Jobs, second: Jobs
) -> None:
    assert first.ping is not None and second.ping is not None
    # Report: the same job, its next version, the new schedule; the rest as declared
    assert second.report.job_id == first.report.job_id
    assert second.report.created_at == first.report.created_at
    assert second.report.version == first.report.version + 1
    assert second.report.schedule is not None and second.report.schedule.model_dump()["expression"] == "30 4 * * *"
    assert second.report.payload == {"report": "daily"} and second.report.state.value == "ACTIVE"
    # Ping: declared as before, so CloudFormation did not call the provider; the job was not written
    assert second.ping.job_id == first.ping.job_id
    assert second.ping.updated_at == first.ping.updated_at
    assert list(app.api().iter_runs(second.ping.job_id)), "Ping's run history"


@pytest.fixture(scope="module")
def third(app: JobsApp, second: Jobs) -> Jobs:
    deployment = app.deploy({"Report": REPORT_MOVED})
    assert "PingJobId" not in deployment.outputs
    api = app.api()
    assert second.ping is not None
    return Jobs(api.get(second.ping.job_id), _job(api, deployment, "Report"))


def test_a_removed_job_is_cancelled_with_its_history_and_the_other_is_untouched(
    app: JobsApp, second: Jobs, third: Jobs
) -> None:
    assert third.ping is not None and second.ping is not None
    assert third.ping.state.value == "CANCELLED"
    assert list(app.api().iter_runs(third.ping.job_id)), "the cancelled job's run history"
    assert third.report.version == second.report.version and third.report.updated_at == second.report.updated_at
    managed = list(app.api().iter_jobs(state="ACTIVE", labels={MANAGED_BY_LABEL: OWNER}))
    assert [job.job_id for job in managed] == [third.report.job_id]


def test_deleting_the_stack_cancels_every_job_it_created(app: JobsApp, third: Jobs, aws: Callable[[str], Any]) -> None:
    table = app.deployments[-1].outputs["JobsTableName"]
    cloudformation = aws("cloudformation")
    cloudformation.delete_stack(StackName=STACK_NAME)
    status = _stack_status(cloudformation, STACK_NAME, timeout=300)
    assert status in ("DELETE_COMPLETE", "gone"), f"{status}\n{_function_logs(aws)}"
    # The API went with the stack; the jobs table is retained (retain_data), and Report is cancelled in it
    for job in (third.report, third.ping):
        assert job is not None
        item = aws("dynamodb").get_item(
            TableName=table, Key={"PK": {"S": f"JOB#{job.job_id}"}, "SK": {"S": "DEF"}}, ConsistentRead=True
        )["Item"]
        assert job_from_item(item).state.value == "CANCELLED", job.job_id


# -- helpers ---------------------------------------------------------------------------------------------------


def _stack_status(cloudformation: Any, name: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    status = ""
    while time.monotonic() < deadline:
        try:
            status = cloudformation.describe_stacks(StackName=name)["Stacks"][0]["StackStatus"]
        except Exception as error:  # a deleted stack is not found (as on AWS, unless asked by its id)
            if "does not exist" in str(error):
                return "gone"
            raise
        if not status.endswith("IN_PROGRESS"):
            return str(status)
        time.sleep(1)
    return status


def _function_logs(aws: Callable[[str], Any], lines: int = 120) -> str:
    """The last log lines of the emulator's log groups, for a failure's message."""
    logs = aws("logs")
    found: list[str] = []
    for page in logs.get_paginator("describe_log_groups").paginate():
        for group in page.get("logGroups", []):
            name = group["logGroupName"]
            for events in logs.get_paginator("filter_log_events").paginate(logGroupName=name):
                found += [f"{name}: {e['message'].rstrip()}" for e in events.get("events", [])]
    return "\n".join(found[-lines:])
