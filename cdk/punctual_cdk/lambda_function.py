"""One scheduler Lambda function: pinned runtime and architecture, its own role and log group.

Each function gets an explicit role with nothing attached but write access to its own log group, instead
of CDK's default role with the AWSLambdaBasicExecutionRole managed policy (which may write to any log
group in the account). Everything else is granted by the construct that owns the function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aws_cdk import Acknowledgment, Duration, RemovalPolicy, Validations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from punctual_cdk.bundling import PYTHON_VERSION
from punctual_cdk.config import PunctualConfig
from punctual_cdk.environment import check_against_handler_settings

#: Pinned with the bundling's pip target (`punctual_cdk.bundling.PYTHON_VERSION`); upgrade both together.
RUNTIME = lambda_.Runtime.PYTHON_3_12
#: Graviton: cheaper per GB-second, and the wheels are bundled for manylinux aarch64.
ARCHITECTURE = lambda_.Architecture.ARM_64
DEFAULT_MEMORY_MB = 512

if RUNTIME.name != f"python{PYTHON_VERSION}":
    raise RuntimeError(f"Lambda runtime {RUNTIME.name} does not match the bundling target {PYTHON_VERSION}")

_RETENTION_BY_DAYS = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}


def log_retention(config: PunctualConfig) -> logs.RetentionDays:
    return _RETENTION_BY_DAYS[config.log_retention_days]


def data_removal_policy(config: PunctualConfig) -> RemovalPolicy:
    """RETAIN for anything holding state or evidence (tables, the secret, logs) unless the stage is
    throwaway (`retain_data: false`)."""
    return RemovalPolicy.RETAIN if config.retain_data else RemovalPolicy.DESTROY


@dataclass(frozen=True)
class Entry:
    """One of the scheduler's functions: its construct id, its entry point (a `scheduler.handlers.*` handler),
    what it does (its description after "punctual <stage> <name>: "), how long it may run and its memory."""

    name: str
    handler: str
    does: str
    timeout: Duration
    memory_mb: int = DEFAULT_MEMORY_MB


@dataclass(frozen=True)
class FunctionBuild:
    """What one of the scheduler's functions is built from: the stage's configuration, the code asset, the
    environment all functions share (table and queue names, settings), and the secrets this function reads -
    each named by the variable that carries its ARN, and granted to the function (read only), no other."""

    config: PunctualConfig
    code: lambda_.Code
    environment: Mapping[str, str]
    secrets: Mapping[str, secretsmanager.ISecret] = field(default_factory=dict)

    @property
    def function_environment(self) -> dict[str, str]:
        """The shared environment plus the ARNs of this function's secrets."""
        return {**self.environment, **{variable: s.secret_arn for variable, s in self.secrets.items()}}


class SchedulerFunction(Construct):
    """A Lambda function running one of the `scheduler.handlers.*` entry points, allowed to read its secrets."""

    def __init__(
        self,
        scope: Construct,
        entry: Entry,
        build: FunctionBuild,
        *,
        reserved_concurrent_executions: int | None = None,
        retry_attempts: int | None = None,
        max_event_age: Duration | None = None,
    ) -> None:
        config, code, environment = build.config, build.code, build.function_environment
        construct_id, handler, timeout, memory_size = entry.name, entry.handler, entry.timeout, entry.memory_mb
        description = f"punctual {config.stage} {entry.name.lower()}: {entry.does}"
        super().__init__(scope, construct_id)
        check_against_handler_settings(construct_id, environment)
        self.log_group = _build_log_group(self, config)
        self.role = _build_role(self, description, self.log_group)
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=code,
            description=description,
            environment=dict(environment),
            timeout=timeout,
            memory_size=memory_size,
            role=self.role,
            log_group=self.log_group,
            reserved_concurrent_executions=reserved_concurrent_executions,
            retry_attempts=retry_attempts,
            max_event_age=max_event_age,
        )
        for secret in build.secrets.values():
            secret.grant_read(self.function)
        Validations.of(self.function).acknowledge(
            Acknowledgment(
                id="AwsSolutions-L1",
                reason=(
                    "Runtime pinned to python3.12 on purpose: the dependencies are bundled as cp312 "
                    "manylinux aarch64 wheels (punctual_cdk/bundling.py); moving to a newer runtime is a "
                    "deliberate change of RUNTIME and PYTHON_VERSION together, tested, not a drift."
                ),
            )
        )


def _build_log_group(scope: Construct, config: PunctualConfig) -> logs.LogGroup:
    return logs.LogGroup(
        scope,
        "Logs",
        retention=log_retention(config),
        removal_policy=data_removal_policy(config),
    )


def _build_role(scope: Construct, description: str, log_group: logs.LogGroup) -> iam.Role:
    role = iam.Role(
        scope,
        "Role",
        assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
        description=f"Execution role: {description}",
    )
    # The log group exists before the function, so no logs:CreateLogGroup is needed.
    log_group.grant_write(role)
    return role
