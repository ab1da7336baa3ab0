"""The environment every function gets: the `SCHEDULER_*` variables `scheduler.settings.Settings` reads,
plus Powertools' service name and metrics namespace.

The variables are checked at synth time against the handler's own `Settings` model, so a value the
handlers would reject (or a variable they newly require) fails `cdk synth`, not the first invocation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aws_cdk import Aws
from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from punctual_cdk.config import PunctualConfig, function_settings
from scheduler.schema import METRICS_NAMESPACE, SERVICE_NAME
from scheduler.settings import Settings

#: The prefix `Settings` reads (its `env_prefix`).
ENV_PREFIX = "SCHEDULER_"
#: Secrets are not in the environment (they would show in the console and in GetFunction): each function gets the
#: ARNs of the secrets it uses (punctual_cdk/secrets.py) and resolves them from Secrets Manager
#: (scheduler.security.secrets).
SIGNING_SECRET_ARN_VARIABLE = "SCHEDULER_SIGNING_SECRET_ARN"
SIGNING_KEYS_ARN_VARIABLE = "SCHEDULER_SIGNING_KEYS_ARN"
MESSAGE_SECRET_ARN_VARIABLE = "SCHEDULER_MESSAGE_SECRET_ARN"


def scheduler_environment(
    config: PunctualConfig,
    *,
    jobs_table_name: str,
    executions_table_name: str,
    ready_queue_url: str,
    dlq_url: str,
    event_bus_name: str = "default",
    ready_queue_high_url: str = "",
    ready_queue_low_url: str = "",
) -> dict[str, str]:
    """The variables common to every function (resource names are CloudFormation tokens here)."""
    env = {
        "SCHEDULER_JOBS_TABLE": jobs_table_name,
        "SCHEDULER_EXECUTIONS_TABLE": executions_table_name,
        "SCHEDULER_READY_QUEUE_URL": ready_queue_url,
        "SCHEDULER_DLQ_URL": dlq_url,
        "SCHEDULER_READY_QUEUE_HIGH_URL": ready_queue_high_url,
        "SCHEDULER_READY_QUEUE_LOW_URL": ready_queue_low_url,
        "SCHEDULER_COMPLETION_EVENTS": "true" if config.completion_events else "false",
        "SCHEDULER_EVENT_BUS_NAME": event_bus_name,
        # Explicit: the handlers' own default signs with v1, which needs the v1 secret the stack grants only when on.
        "SCHEDULER_SIGNATURE_V1": "true" if config.signature_v1 else "false",
        # Explicit, so that no local-development default can open the SSRF guard on AWS.
        "SCHEDULER_ALLOW_PRIVATE_TARGETS": "false",
        # Explicit: outside local mode a missing secret ARN fails the function instead of using a public value.
        "SCHEDULER_LOCAL_MODE": "false",
        # Resources named `<stack name>-...` are the scheduler's own: no target may name them.
        "SCHEDULER_STACK_NAME": Aws.STACK_NAME,
        # Where a target named by bare name (a Lambda function, an event bus) lives: compared as a full ARN.
        "SCHEDULER_ACCOUNT_ID": Aws.ACCOUNT_ID,
        "SCHEDULER_REGION": Aws.REGION,
        "SCHEDULER_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": config.log_level,
    }
    for name in function_settings():
        value = getattr(config, name)
        if value is not None:  # unset: the functions' own default applies
            # A list goes as JSON, as the functions' Settings read it.
            text = json.dumps(value, separators=(",", ":")) if isinstance(value, list) else str(value)
            env[f"{ENV_PREFIX}{name.upper()}"] = text
    if config.tenant_targets:
        allow = {tenant: t.model_dump(by_alias=True) for tenant, t in config.tenant_targets.items()}
        env["SCHEDULER_TENANT_TARGETS"] = json.dumps(allow, separators=(",", ":"), sort_keys=True)
    env["SCHEDULER_DEFAULT_TARGETS_OPEN"] = "true" if config.default_targets_open else "false"
    return env


class _DeclaredSettings(Settings):
    """`Settings` validated from the given values only: the synthesizing machine's own SCHEDULER_*
    variables or .env files must not leak into (or excuse) the check."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def check_against_handler_settings(function_name: str, env: Mapping[str, str]) -> None:
    """Raise ValueError if the handlers' `Settings` would reject `env` at cold start."""
    values = {
        name.removeprefix(ENV_PREFIX).lower(): value
        for name, value in env.items()
        if name.startswith(ENV_PREFIX) and name.removeprefix(ENV_PREFIX).lower() in Settings.model_fields
    }
    # The environment source decodes JSON objects and lists (tenant_targets, tenant_budgets) before validating.
    values = {
        name: json.loads(value) if isinstance(value, str) and value.startswith(("{", "[")) else value
        for name, value in values.items()
    }
    try:
        _DeclaredSettings.model_validate(values)
    except ValidationError as error:
        raise ValueError(
            f"the {function_name} function's environment would fail scheduler.settings.Settings:\n{error}"
        ) from None
