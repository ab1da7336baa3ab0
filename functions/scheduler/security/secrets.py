"""The functions' secrets: resolved once per process from Secrets Manager, or - in local mode only - from their
public development values (docs/security.md, "Keys")."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

from scheduler.settings import LOCAL_MESSAGE_SECRET, LOCAL_SIGNING_KEYS, LOCAL_SIGNING_SECRET, Settings

_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=20)


class MissingSecret(RuntimeError):
    """A function's secret has no ARN outside local mode: refuse to start rather than use a public value."""


#: The secrets a function may read, with their public local-mode values.
_LOCAL_SECRETS = {
    "signing_secret": LOCAL_SIGNING_SECRET,
    "signing_keys": LOCAL_SIGNING_KEYS,
    "message_secret": LOCAL_MESSAGE_SECRET,
}


def resolve_secret(settings: Settings, name: str, client: Any | None = None) -> str:
    """The value of one of the functions' secrets (`signing_secret`, `signing_keys`, `message_secret`): from Secrets
    Manager when its ARN is set (`SCHEDULER_<NAME>_ARN`; how the stack configures every function), else the
    setting itself - but never its public development value outside local mode (MissingSecret: fail closed)."""
    arn = getattr(settings, f"{name}_arn")
    if arn:
        client = client or boto3.client("secretsmanager", config=_CONFIG)
        return str(client.get_secret_value(SecretId=arn)["SecretString"])
    value = str(getattr(settings, name))
    if value == _LOCAL_SECRETS[name] and not settings.local_mode:
        raise MissingSecret(
            f"SCHEDULER_{name.upper()}_ARN is not set and this is not local mode (SCHEDULER_LOCAL_MODE): refusing to "
            f"use the public development value of {name}"
        )
    return value
