"""What deploying the real stack into ministack takes, every item named here (applied by
scheduler_local.emulated_aws.app and .deploy, nowhere else).

The deploy-and-fire test (tests/system/test_deploy.py; for JOBS_ADJUSTMENTS, tests/system/test_jobs_as_code_deploy.py)
asserts each adjustment is still needed - with evidence from the emulator or the stack, not a flag - so an emulator
fix or a stack change that makes one unnecessary fails the test and the adjustment goes; and the deployment itself
fails if the stack starts to need a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.ops.scheduled_jobs import API_URL_VARIABLE

#: The variable the jobs-as-code provider reads the API's URL from.
JOBS_API_URL_VARIABLE = API_URL_VARIABLE

#: The variable opening the worker's SSRF guard for private addresses (`scheduler.settings.Settings`).
ALLOW_PRIVATE_TARGETS = "SCHEDULER_ALLOW_PRIVATE_TARGETS"


@dataclass(frozen=True)
class Adjustment:
    name: str
    why: str


HOST_PLATFORM_ASSET = Adjustment(
    "host-platform-asset",
    "ministack runs the functions with its own interpreter on this machine, where the Lambda asset's "
    "manylinux aarch64 wheels (pydantic-core) do not load; the asset is built for this machine's platform "
    "instead, into its own cloud assembly (the asset hash does not cover the platform).",
)
PLAIN_ALARMS = Adjustment(
    "plain-error-alarms",
    "ministack's CloudFormation cannot create an alarm on metric math (Properties.Metrics): each function's "
    "error-rate alarm becomes an alarm on the function's Errors count, with the same actions.",
)
PRIVATE_TARGETS = Adjustment(
    "private-targets",
    f"the receivers are on 127.0.0.1, which the SSRF guard refuses: {ALLOW_PRIVATE_TARGETS}=true in the "
    "deployed functions' environment.",
)
IAM_NOT_ENFORCED = Adjustment(
    "iam-not-enforced",
    "with AUTH=true ministack authorizes SendMessageBatch as sqs:SendMessageBatch, an action that does not "
    "exist (AWS authorizes it as sqs:SendMessage), so the sweeper's dispatch is denied; the emulator runs "
    "without IAM enforcement and signatures are not checked.",
)
ADJUSTMENTS = (HOST_PLATFORM_ASSET, PLAIN_ALARMS, PRIVATE_TARGETS, IAM_NOT_ENFORCED)

LOCAL_JOBS_API = Adjustment(
    "jobs-api-on-the-emulator",
    "the jobs-as-code provider calls the API at the stack's URL, AWS's execute-api host "
    "(https://<api id>.execute-api.<region>.amazonaws.com/<stage>/), which is not on this machine and which the "
    f"emulator serves at its own address instead: {JOBS_API_URL_VARIABLE} names the emulator's path-style address of "
    "the same API and stage (http://127.0.0.1:<port>/_aws/execute-api/<api id>/<stage>/).",
)
#: What an app with `ScheduledJob`s needs besides ADJUSTMENTS (tests/system/test_jobs_as_code_deploy.py has the
#: evidence of each).
JOBS_ADJUSTMENTS = (LOCAL_JOBS_API,)

#: The emulator's own settings (environment of the ministack process) the adjustments ask for.
EMULATOR_ENV = {"AUTH": "false"}
