"""punctual as a CDK construct library (docs/construct.md): `Punctual`, the scheduler in an app's own stack, with its
settings (`PunctualConfig`)."""

from __future__ import annotations

from punctual_cdk.config import ConfigError, PunctualConfig, load_config, parse_config
from punctual_cdk.punctual import Punctual

__all__ = ["ConfigError", "Punctual", "PunctualConfig", "load_config", "parse_config"]
