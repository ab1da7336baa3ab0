"""punctual as a CDK construct library (docs/construct.md): `Punctual`, the scheduler in an app's own stack, with its
settings (`PunctualConfig`); `ScheduledJob`, a job of it declared in the app (docs/jobs-as-code.md)."""

from __future__ import annotations

from punctual_cdk.config import ConfigError, PunctualConfig, load_config, parse_config
from punctual_cdk.punctual import Punctual
from punctual_cdk.scheduled_job import ScheduledJob

__all__ = ["ConfigError", "Punctual", "PunctualConfig", "ScheduledJob", "load_config", "parse_config"]
