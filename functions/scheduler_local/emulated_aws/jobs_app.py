"""A CDK app as a user writes one - its own stack, the `Punctual` construct in it, and `ScheduledJob`s - for a local
emulator: the jobs-as-code deploy test (tests/system/test_jobs_as_code_deploy.py) deploys it into ministack several
times, each time with the jobs the JSON file named by the context key `JOBS_FILE` declares (`{construct id:
definition}`), and with the emulator adjustments of `scheduler_local.emulated_aws.adjustments` (those of every stack
with the construct, and those of JOBS_ADJUSTMENTS), nothing else.

`cdk synth --app ".venv/bin/python -m scheduler_local.emulated_aws.jobs_app" -c punctual-jobs-file=jobs.json`
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from aws_cdk import App, CfnOutput, Environment, Stack

from punctual_cdk import Punctual, PunctualConfig, ScheduledJob
from punctual_cdk.bundling import function_code
from scheduler_local.emulated_aws.app import adjust, host_pip_platform
from scheduler_local.emulated_aws.deploy import CdkApp
from scheduler_local.emulators import ROOT

STACK_NAME = "orders-app"
#: The context key naming the JSON file of the jobs to declare.
JOBS_FILE = "punctual-jobs-file"
#: Its own cloud assembly: the host-platform asset is not the Lambda one (see deploy.ASSEMBLY_DIR).
JOBS_APP = CdkApp(
    ".venv/bin/python -m scheduler_local.emulated_aws.jobs_app", STACK_NAME, ROOT / ".local" / "cdk.out-jobs"
)


def build(app: App) -> Stack:
    jobs_file = app.node.try_get_context(JOBS_FILE)
    if not jobs_file:
        raise SystemExit(f"jobs_app: give the jobs to declare, -c {JOBS_FILE}=<a JSON file of {{id: definition}}>")
    jobs: dict[str, dict[str, object]] = json.loads(Path(jobs_file).read_text())
    stack = Stack(
        app,
        STACK_NAME,
        env=Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")),
    )
    scheduler = Punctual(
        stack,
        "Scheduler",
        config=PunctualConfig(stage="jobs"),
        code=function_code(pip_platform=host_pip_platform()),
    )
    for name, definition in jobs.items():
        job = ScheduledJob(stack, name, scheduler=scheduler, definition=definition)
        CfnOutput(stack, f"{name}JobId", value=job.job_id)
    CfnOutput(stack, "ApiUrl", value=scheduler.api_url)
    CfnOutput(stack, "JobsTableName", value=scheduler.jobs_table.table_name)
    adjust(stack)
    return stack


def main() -> None:
    app = App()
    build(app)
    app.synth()


if __name__ == "__main__":
    main()
