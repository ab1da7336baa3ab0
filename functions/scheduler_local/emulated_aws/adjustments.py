"""What deploying the real stack into ministack takes, every item named here (applied by
scheduler_local.emulated_aws.app and .deploy, nowhere else).

The deploy-and-fire test (tests/deploy) asserts each adjustment is still needed - with evidence from the
emulator or the stack, not a flag - so an emulator fix or a stack change that makes one unnecessary fails the
test and the adjustment goes; and the deployment itself fails if the stack starts to need a new one.
"""

from __future__ import annotations

from dataclasses import dataclass

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

#: The emulator's own settings (environment of the ministack process) the adjustments ask for.
EMULATOR_ENV = {"AUTH": "false"}
