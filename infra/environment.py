"""The environment every function gets: the `SCHEDULER_*` variables `scheduler.settings.Settings` reads,
plus Powertools' service name and metrics namespace.

The variables are checked at synth time against the handler's own `Settings` model, so a value the
handlers would reject (or a variable they newly require) fails `cdk synth`, not the first invocation.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from infra.config import PunctualConfig
from scheduler.settings import Settings

#: Powertools' `service` dimension on every metric and log line; the dashboard and alarms filter on it.
SERVICE_NAME = "punctual"
#: The CloudWatch namespace the handlers' EMF metrics land in.
METRICS_NAMESPACE = "Punctual"
#: The prefix `Settings` reads (its `env_prefix`).
ENV_PREFIX = "SCHEDULER_"
#: The signing secret is not in the environment (it would show in the console and in GetFunction);
#: the worker and the API get its ARN and resolve it from Secrets Manager.
SIGNING_SECRET_ARN_VARIABLE = "SCHEDULER_SIGNING_SECRET_ARN"


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
        "SCHEDULER_SHARD_COUNT": str(config.shard_count),
        "SCHEDULER_LOOKAHEAD_SECONDS": str(config.lookahead_seconds),
        "SCHEDULER_LEASE_SECONDS": str(config.lease_seconds),
        "SCHEDULER_COMPLETION_EVENTS": "true" if config.completion_events else "false",
        "SCHEDULER_EVENT_BUS_NAME": event_bus_name,
        # Explicit, so that no local-development default can open the SSRF guard on AWS.
        "SCHEDULER_ALLOW_PRIVATE_TARGETS": "false",
        "SCHEDULER_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": config.log_level,
    }
    optional = {
        "SCHEDULER_BUCKET_LEASE_SECONDS": config.bucket_lease_seconds,
        "SCHEDULER_MISFIRE_GRACE_SECONDS": config.misfire_grace_seconds,
        "SCHEDULER_CATCHUP_WINDOW_SECONDS": config.catchup_window_seconds,
        "SCHEDULER_DISPATCH_BUDGET": config.dispatch_budget,
        "SCHEDULER_SWEEP_SAFETY_SECONDS": config.sweep_safety_seconds,
        "SCHEDULER_MAX_ACTIVE_JOBS_PER_TENANT": config.max_active_jobs_per_tenant,
        "SCHEDULER_BACKFILL_WAVE_SIZE": config.backfill_wave_size,
        "SCHEDULER_BACKFILL_MAX_OCCURRENCES": config.backfill_max_occurrences,
        "SCHEDULER_TENANT_DISPATCH_RATE": config.tenant_dispatch_rate,
        "SCHEDULER_TENANT_DISPATCH_BURST": config.tenant_dispatch_burst,
        "SCHEDULER_TENANT_MAX_CONCURRENCY": config.tenant_max_concurrency,
    }
    env.update({name: str(value) for name, value in optional.items() if value is not None})
    return env


def with_signing_secret(env: Mapping[str, str], secret_arn: str) -> dict[str, str]:
    """`env` plus the signing secret's ARN, for the functions that sign (worker) or hand out keys (api)."""
    return {**env, SIGNING_SECRET_ARN_VARIABLE: secret_arn}


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
    try:
        _DeclaredSettings.model_validate(values)
    except ValidationError as error:
        raise ValueError(
            f"the {function_name} function's environment would fail scheduler.settings.Settings:\n{error}"
        ) from None
