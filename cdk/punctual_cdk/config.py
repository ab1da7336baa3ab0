"""Typed, validated configuration of the deployment, read from CDK context.

Where it comes from, in order (later wins):

1. the object under the context key ``punctual`` (``cdk.json`` ships the defaults there);
2. one flat context key per field, ``punctual.<field>``, so a single value can be overridden from the
   command line: ``scripts/deploy -c punctual.stage=prod -c punctual.shard_count=16``.

CLI values arrive as strings; pydantic coerces numbers and booleans, a list may be given as JSON
(``'["arn:...","arn:..."]'``) or comma-separated, and ``null``/``none``/empty clears an optional value.
Unknown keys are rejected, so a typo fails the synth instead of silently deploying a default. A
``null`` in the context object means "not set" (CDK drops null context values), so the default applies.

This module is plain pydantic (no CDK import), so it is cheap to test and the constraints read as a table.
"""

from __future__ import annotations

import json
import re
import typing
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo

from scheduler.schema import FUNCTION_MEMORY_MB, WORKER_BATCH_SIZE, WORKER_MAX_CONCURRENCY
from scheduler.settings import Settings, TenantTargets

#: The context key holding the configuration object (and the prefix of the flat override keys).
CONTEXT_KEY = "punctual"

#: The values CloudWatch Logs accepts for RetentionInDays.
LOG_RETENTION_DAYS = frozenset(
    {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}
)

# Target ARNs are exact resources, never patterns: the worker's IAM policy grants exactly these. The
# character classes exclude `*` and `?`, so a wildcard cannot slip in as a "name".
_PARTITION = r"arn:aws(?:-[a-z]+)*"
_REGION_ACCOUNT = r"[a-z]{2}(?:-[a-z]+)+-\d:\d{12}"
SQS_QUEUE_ARN = rf"^{_PARTITION}:sqs:{_REGION_ACCOUNT}:[A-Za-z0-9_-]{{1,80}}(?:\.fifo)?$"
SNS_TOPIC_ARN = rf"^{_PARTITION}:sns:{_REGION_ACCOUNT}:[A-Za-z0-9_-]{{1,256}}(?:\.fifo)?$"
#: A function ARN, optionally qualified (version or alias): the grant covers exactly what is listed.
LAMBDA_FUNCTION_ARN = (
    rf"^{_PARTITION}:lambda:{_REGION_ACCOUNT}:function:[A-Za-z0-9_-]{{1,64}}(?::[A-Za-z0-9_$-]{{1,128}})?$"
)
STATE_MACHINE_ARN = rf"^{_PARTITION}:states:{_REGION_ACCOUNT}:stateMachine:[A-Za-z0-9_-]{{1,80}}$"
EVENT_BUS_ARN = rf"^{_PARTITION}:events:{_REGION_ACCOUNT}:event-bus/[A-Za-z0-9._/-]{{1,256}}$"
KMS_KEY_ARN = rf"^{_PARTITION}:kms:{_REGION_ACCOUNT}:key/[A-Za-z0-9-]{{1,64}}$"

#: Target field -> (pattern, what it must look like), for a clear error message.
TARGET_ARN_FIELDS: dict[str, tuple[str, str]] = {
    "target_sqs_queue_arns": (SQS_QUEUE_ARN, "an SQS queue ARN arn:aws:sqs:<region>:<account>:<name>"),
    "target_sns_topic_arns": (SNS_TOPIC_ARN, "an SNS topic ARN arn:aws:sns:<region>:<account>:<name>"),
    "target_lambda_function_arns": (
        LAMBDA_FUNCTION_ARN,
        "a Lambda function ARN arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]",
    ),
    "target_state_machine_arns": (
        STATE_MACHINE_ARN,
        "a state machine ARN arn:aws:states:<region>:<account>:stateMachine:<name>",
    ),
    "target_event_bus_arns": (
        EVENT_BUS_ARN,
        "an event bus ARN arn:aws:events:<region>:<account>:event-bus/<name>",
    ),
    "target_kms_key_arns": (KMS_KEY_ARN, "a KMS key ARN arn:aws:kms:<region>:<account>:key/<id>"),
}


#: A tenant id as scheduler.security.identity makes it (principal ARN and unique id).
TENANT_KEY = re.compile(r"^arn:aws(?:-[a-z]+)*:iam::\d{12}:(?:role/[\w+=,.@/-]+#AROA|user/[\w+=,.@/-]+#AIDA)[A-Z0-9]+$")

#: Allow-list kind -> the grant field its entries must be among.
ALLOW_LIST_GRANTS = {
    "sqs": "target_sqs_queue_arns",
    "sns": "target_sns_topic_arns",
    "lambda": "target_lambda_function_arns",
    "stepfunctions": "target_state_machine_arns",
    "eventbridge": "target_event_bus_arns",
}


def function_setting(name: str, **bounds: Any) -> Any:
    """A deployable setting of the functions: its meaning, bounds and default are declared once, on
    `scheduler.settings.Settings`; here it is unset (None) unless the deployment sets it, and then it is validated
    with Settings' own bounds (and `bounds`, what the deployment needs beyond them) and passed to every function as
    `SCHEDULER_<NAME>` (punctual_cdk.environment)."""
    source = Settings.model_fields[name]
    extra: FieldInfo = Field(**bounds)
    return FieldInfo.merge_field_infos(
        source, extra, default=None, default_factory=None, json_schema_extra={FUNCTION_SETTING: True}
    )


#: Marks the configuration fields that are settings of the functions (`function_setting`).
FUNCTION_SETTING = "function_setting"


def function_settings() -> tuple[str, ...]:
    """The names of the configuration fields that are settings of the functions."""
    return tuple(
        name
        for name, field in PunctualConfig.model_fields.items()
        if isinstance(field.json_schema_extra, dict) and field.json_schema_extra.get(FUNCTION_SETTING)
    )


class ConfigError(ValueError):
    """The deployment configuration is invalid; the message names each offending key."""


class PunctualConfig(BaseModel):
    """Everything that differs between deployments. Defaults are what `cdk.json` ships."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: Names the stack (`punctual-<stage>`), the API stage, the dashboard and the alarms.
    stage: str = Field(default="dev", pattern=r"^[a-z][a-z0-9-]{0,19}$")

    # --- scheduler tuning: each is a setting of the functions, declared once on scheduler.settings.Settings (its
    # meaning, bounds and default); unset (null), the functions' default applies, set, it becomes SCHEDULER_<NAME>.
    shard_count: int | None = function_setting("shard_count")
    lookahead_seconds: int | None = function_setting("lookahead_seconds")
    lease_seconds: int | None = function_setting("lease_seconds")
    bucket_lease_seconds: int | None = function_setting("bucket_lease_seconds")
    misfire_grace_seconds: int | None = function_setting("misfire_grace_seconds")
    catchup_window_seconds: int | None = function_setting("catchup_window_seconds")
    dispatch_budget: int | None = function_setting("dispatch_budget")
    sweep_concurrency: int | None = function_setting("sweep_concurrency")
    fan_out_max_sweeps: int | None = function_setting("fan_out_max_sweeps")
    forecast_minutes: int | None = function_setting("forecast_minutes")
    occurrences_per_message: int | None = function_setting("occurrences_per_message")
    sweep_safety_seconds: int | None = function_setting("sweep_safety_seconds", le=45)
    max_active_jobs_per_tenant: int | None = function_setting("max_active_jobs_per_tenant")
    backfill_wave_size: int | None = function_setting("backfill_wave_size")
    backfill_max_occurrences: int | None = function_setting("backfill_max_occurrences")
    tenant_dispatch_rate: float | None = function_setting("tenant_dispatch_rate")
    tenant_dispatch_burst: int | None = function_setting("tenant_dispatch_burst")
    tenant_max_concurrency: int | None = function_setting("tenant_max_concurrency")
    #: The sweeper's memory, MB: its CPU share (one vCPU at 1,769 MB) bounds how fast one sweep dispatches, however
    #: many buckets it works on at once. 512 dispatches about 20,000 occurrences of one minute within the 300 s
    #: look-ahead; 1,769 about 67,000 (docs/capacity.md). Above 1,769 it is no faster (one Python process).
    sweeper_memory_mb: int = Field(default=FUNCTION_MEMORY_MB["sweeper"], ge=128, le=10_240)
    #: The worker's memory, MB: its CPU share. At 512 an occurrence took 21.8 ms of worker time in the last cost
    #: run, at 1,769 (a vCPU) 11.4 ms: a herd of 500,000 in one second needs the latter (docs/capacity.md). Lambda
    #: bills GB-seconds, so 1,769 costs about 1.8x a quiet deployment's worker time.
    worker_memory_mb: int = Field(default=FUNCTION_MEMORY_MB["worker"], ge=128, le=10_240)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    # --- completion events ----------------------------------------------------------------------------
    #: Publish every terminal outcome of an occurrence to an EventBridge bus.
    completion_events: bool = True
    #: An existing bus to publish to (e.g. `default`); none: the stack creates `punctual-<stage>-events`.
    event_bus_name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._/-]{1,256}$")

    # --- webhook signatures ---------------------------------------------------------------------------
    #: Also sign every http call with signature v1 (the body only, one key per tenant) and give the worker the v1
    #: master secret. Off for new stacks; a stack whose receivers still verify v1 keeps it on until they verify v2
    #: (docs/security.md, "Retiring v1"). The secret itself stays in the stack either way, so turning v1 back on
    #: restores the same tenant keys.
    signature_v1: bool = False

    # --- capacity -------------------------------------------------------------------------------------
    #: Messages per worker invocation. At most 10: larger batches need a batching window, which delays
    #: starts, and the scheduler promises ~1 s start precision.
    worker_batch_size: int = Field(default=WORKER_BATCH_SIZE, ge=1, le=10)
    #: Upper bound on concurrent worker invocations (the event source mapping's MaximumConcurrency).
    worker_max_concurrency: int = Field(default=WORKER_MAX_CONCURRENCY, ge=2, le=1000)
    #: The same for the `high` and `low` priority lanes (each lane has its own event source mapping, so a
    #: burst in one lane never takes the capacity reserved for another).
    worker_max_concurrency_high: int = Field(default=20, ge=2, le=1000)
    worker_max_concurrency_low: int = Field(default=5, ge=2, le=1000)
    #: Pre-scaling (docs/capacity.md): the worker mappings run in provisioned mode (instead of the maximum
    #: concurrencies above, which AWS does not combine with it) and the sweeper raises their MinimumPollers ahead of
    #: forecast peaks and lowers them after. Provisioned mode is billed per poller-hour even when idle.
    prescale: bool = False
    #: The most MinimumPollers the sweeper may set on one mapping (AWS: 2-200).
    prescale_ceiling_pollers: int = Field(default=50, ge=2, le=200)
    #: Each mapping's MaximumPollers: how far AWS may scale it on its own beyond the minimum (AWS: up to 2,000).
    prescale_maximum_pollers: int = Field(default=200, ge=2, le=2000)
    #: How long before a peak minute the pollers go up.
    prescale_lead_seconds: int = Field(default=300, ge=60, le=1800)
    #: Reserved concurrency of the sweeper (several may run at once; claims keep them disjoint). It bounds the
    #: fan-out: a tick and its sweeps, and the next tick's while the last ones finish, so at least twice
    #: `fan_out_max_sweeps` (its default, 8, when unset). 0 leaves it unreserved, for accounts whose concurrency
    #: quota is still the new-account 10 (Lambda's own meaning of 0, "disabled", is never wanted for the sweeper).
    #: Not null: CDK drops null context values.
    sweeper_reserved_concurrency: int = Field(default=16, ge=0, le=200)
    #: Reserved concurrency of the api function: what the API may take at most (a tenant's bulk actions hold an
    #: invocation for up to about 20 s each), so no load on the API can take the account's concurrency from the
    #: workers, and what it keeps for itself. 0 leaves it unreserved and unbounded (accounts whose concurrency quota
    #: is still the new-account 10).
    api_reserved_concurrency: int = Field(default=50, ge=0, le=1000)
    tenant_request_rate: float | None = function_setting("tenant_request_rate")
    bulk_max_running: int | None = function_setting("bulk_max_running")
    #: The tenants that may read the operator's view (`GET /v1/operator/status`), keyed as the API keys them (as in
    #: `tenant_targets`). Unset: nobody.
    operators: list[str] | None = function_setting("operators")
    #: API Gateway stage throttling: steady requests per second and burst.
    api_throttle_rate_limit: float = Field(default=50.0, gt=0, le=10_000)
    api_throttle_burst_limit: int = Field(default=100, ge=1, le=5_000)
    #: The console's files (`GET /console/...`, the one unauthenticated route besides the health check) have a
    #: throttle of their own, within the stage's: anonymous traffic can take only this share of the function.
    console_throttle_rate_limit: float = Field(default=5.0, gt=0, le=10_000, validate_default=True)
    console_throttle_burst_limit: int = Field(default=20, ge=1, le=5_000, validate_default=True)
    #: Create the account-level role API Gateway needs to write logs. Turn off when the account's
    #: API Gateway settings already name a CloudWatch role (it is one setting per account and region).
    api_cloudwatch_role: bool = True

    # --- operations -----------------------------------------------------------------------------------
    #: Subscribe this address to the alarm topic (it must confirm the subscription e-mail).
    alarm_email: str | None = Field(default=None, pattern=r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
    #: Keep tables, the signing secret and logs when the stack is deleted, and protect tables from
    #: deletion. Turn off only for throwaway stages.
    retain_data: bool = True
    log_retention_days: int = 30

    # --- targets the worker may call: exact ARNs, empty by default ------------------------------------
    target_sqs_queue_arns: tuple[str, ...] = ()
    target_sns_topic_arns: tuple[str, ...] = ()
    target_lambda_function_arns: tuple[str, ...] = ()
    target_state_machine_arns: tuple[str, ...] = ()
    target_event_bus_arns: tuple[str, ...] = ()
    #: Customer-managed keys of encrypted target queues/topics (the worker must use them to send).
    target_kms_key_arns: tuple[str, ...] = ()
    #: Per-tenant allow-lists, checked at submit and at call time (scheduler.targets.policy) and by IAM (each grant
    #: of the target role is conditioned on the tenant's session tag): tenant -> {"sqs": [...], "sns": [...],
    #: "lambda": [...], "stepfunctions": [...], "eventbridge": [...], "eventbridge_sources": [...], "handler": [...]},
    #: full ARNs among the grants above; `"*"` allows every granted resource of that type. A tenant is keyed as the
    #: API keys it: `arn:aws:iam::<account>:role/<name>#<role id AROA...>` (or `user/<name>#<AIDA...>`).
    tenant_targets: dict[str, TenantTargets] = Field(default_factory=dict)
    #: Whether a tenant without an entry in `tenant_targets` may call every granted AWS target (true: the grants are
    #: shared by every tenant) or none (false). Never opens `handler` targets.
    default_targets_open: bool = False

    @field_validator(*TARGET_ARN_FIELDS)
    @classmethod
    def _exact_arns(cls, arns: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        pattern, shape = TARGET_ARN_FIELDS[str(info.field_name)]
        for arn in arns:
            if not re.match(pattern, arn):
                raise ValueError(f"{arn!r} is not exactly one resource: expected {shape} (no wildcards)")
        if len(set(arns)) != len(arns):
            raise ValueError("lists an ARN twice")
        return arns

    @field_validator("tenant_targets")
    @classmethod
    def _tenants_keyed_as_the_api_keys_them(cls, tenants: dict[str, TenantTargets]) -> dict[str, TenantTargets]:
        for tenant, allow in tenants.items():
            if not TENANT_KEY.match(tenant):
                raise ValueError(
                    f"{tenant!r} is not a tenant as the API names it: arn:aws:iam::<account>:role/<name>#<AROA...> "
                    "(the role's RoleId, `aws iam get-role --role-name <name> --query Role.RoleId`) or "
                    "arn:aws:iam::<account>:user/<name>#<AIDA...>; a key that matches no tenant would leave its "
                    "allow-list unused"
                )
            if allow.eventbridge and not allow.eventbridge_sources:
                raise ValueError(
                    f"tenant {tenant!r} lists eventbridge buses but no eventbridge_sources: list the sources it may "
                    "publish under (e.g. ['com.example.*']), so no tenant can publish under another's"
                )
        return tenants

    @field_validator("operators")
    @classmethod
    def _operators_keyed_as_the_api_keys_them(cls, operators: list[str] | None) -> list[str] | None:
        for tenant in operators or ():
            if not TENANT_KEY.match(tenant):
                raise ValueError(
                    f"{tenant!r} is not a tenant as the API names it: arn:aws:iam::<account>:role/<name>#<AROA...> "
                    "(the role's RoleId, `aws iam get-role --role-name <name> --query Role.RoleId`) or "
                    "arn:aws:iam::<account>:user/<name>#<AIDA...>; a key that matches no tenant makes nobody an "
                    "operator"
                )
        return operators

    @field_validator("console_throttle_rate_limit", "console_throttle_burst_limit")
    @classmethod
    def _console_within_the_stage(cls, value: float, info: ValidationInfo) -> float:
        stage = str(info.field_name).replace("console_", "api_")
        if stage in info.data and value > info.data[stage]:
            raise ValueError(f"must be at most {stage} ({info.data[stage]}): the console's share of the stage's")
        return value

    @model_validator(mode="after")
    def _fan_out_within_the_sweepers_concurrency(self) -> PunctualConfig:
        sweeps = self.fan_out_max_sweeps or Settings.model_fields["fan_out_max_sweeps"].default
        reserved = self.sweeper_reserved_concurrency
        if reserved and reserved < 2 * sweeps:
            raise ValueError(
                f"sweeper_reserved_concurrency: {reserved} is below twice fan_out_max_sweeps ({sweeps}): a tick's "
                "fan-out sweeps would be throttled and dropped; raise it, or set it to 0 (unreserved)"
            )
        return self

    @model_validator(mode="after")
    def _allow_lists_within_the_grants(self) -> PunctualConfig:
        for tenant, allow in self.tenant_targets.items():
            for kind, field in ALLOW_LIST_GRANTS.items():
                granted = set(getattr(self, field))
                for entry in getattr(allow, "lambda_" if kind == "lambda" else kind):
                    if entry != "*" and entry not in granted:
                        raise ValueError(
                            f"tenant_targets.{tenant}.{kind}: {entry!r} is not granted; add it to {field} as well"
                        )
        return self

    @field_validator("log_retention_days")
    @classmethod
    def _retention_is_a_cloudwatch_value(cls, value: int) -> int:
        if value not in LOG_RETENTION_DAYS:
            raise ValueError(f"must be one of CloudWatch's retention values {sorted(LOG_RETENTION_DAYS)}")
        return value

    def lane_max_concurrency(self, priority: str) -> int:
        """The worker's maximum concurrency on one priority lane."""
        return {"high": self.worker_max_concurrency_high, "low": self.worker_max_concurrency_low}.get(
            priority, self.worker_max_concurrency
        )

    @property
    def stack_name(self) -> str:
        return f"punctual-{self.stage}"

    @property
    def has_targets(self) -> bool:
        return any(
            (
                self.target_sqs_queue_arns,
                self.target_sns_topic_arns,
                self.target_lambda_function_arns,
                self.target_state_machine_arns,
                self.target_event_bus_arns,
            )
        )


class ContextReader(Protocol):
    """What `load_config` needs of a construct node (`aws_cdk` `Node`), so tests can pass a dict."""

    def try_get_context(self, key: str) -> typing.Any: ...


def load_config(node: ContextReader) -> PunctualConfig:
    """Read and validate the configuration from CDK context (see the module docstring for the sources)."""
    base = node.try_get_context(CONTEXT_KEY)
    if base is None:
        base = {}
    if not isinstance(base, Mapping):
        raise ConfigError(f"context key {CONTEXT_KEY!r} must be an object, got {type(base).__name__}")
    values = dict(base)
    for name in PunctualConfig.model_fields:
        override = node.try_get_context(f"{CONTEXT_KEY}.{name}")
        if override is not None:
            values[name] = _from_cli(name, override)
    return parse_config(values)


def parse_config(values: Mapping[str, object]) -> PunctualConfig:
    """Validate `values`; raise ConfigError naming every offending key (not pydantic's raw dump)."""
    try:
        return PunctualConfig.model_validate(dict(values))
    except ValidationError as error:
        problems = []
        for issue in error.errors():
            key = ".".join(str(part) for part in issue["loc"])
            got = f" (got {issue['input']!r})" if issue["type"] != "extra_forbidden" else ""
            message = "unknown key" if issue["type"] == "extra_forbidden" else issue["msg"]
            message = message.removeprefix("Value error, ")
            problems.append(f"  {CONTEXT_KEY}.{key}: {message}{got}")
        raise ConfigError("invalid deployment configuration:\n" + "\n".join(problems)) from None


def _from_cli(name: str, value: object) -> object:
    """Turn a `-c punctual.<name>=<string>` value into what the field expects; pass JSON types through."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if _is_sequence(name) and not text.startswith("["):
        return tuple(part.strip() for part in text.split(",") if part.strip())
    if text.lower() in {"", "null", "none"} and _is_optional(name):
        return None
    if text.startswith(("[", "{")):
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            raise ConfigError(f"{CONTEXT_KEY}.{name}: not valid JSON: {error}") from None
    return text


def _annotation(name: str) -> object:
    return PunctualConfig.model_fields[name].annotation


def _is_optional(name: str) -> bool:
    return type(None) in typing.get_args(_annotation(name))


def _is_sequence(name: str) -> bool:
    return typing.get_origin(_annotation(name)) is tuple
