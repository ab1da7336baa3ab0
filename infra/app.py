"""The CDK app entry point (`cdk.json`: `python -m infra.app`).

Builds the stack from the validated configuration and registers cdk-nag's AWS Solutions pack as a
policy-validation plugin, so `cdk synth`/`deploy` fail on any finding that is not acknowledged, with a
reason, next to the resource it concerns.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Environment, Tags, Validations
from aws_cdk import aws_lambda as lambda_
from cdk_nag import AwsSolutionsChecks

from infra.stack import PunctualStack
from punctual_cdk.config import ConfigError, load_config


def build_app(
    context: Mapping[str, Any] | None = None, *, outdir: str | None = None, code: lambda_.Code | None = None
) -> tuple[App, PunctualStack]:
    """The app and its one stack. `context` adds to (and overrides) what the CLI passes; tests use it to
    configure the stack and to skip bundling (`"aws:cdk:bundling-stacks": []`). `code` replaces the
    functions' asset (`infra.bundling.function_code()`), e.g. one built for a local emulator."""
    app = App(context=dict(context) if context else None, outdir=outdir)
    config = load_config(app.node)
    stack = PunctualStack(
        app,
        config.stack_name,
        config=config,
        code=code,
        # Set by the CLI from the current credentials; absent (environment-agnostic) in unit tests.
        env=Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")),
    )
    Tags.of(app).add("project", "punctual")
    Tags.of(app).add("stage", config.stage)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app, stack


def main() -> None:
    try:
        app, _ = build_app()
    except ConfigError as error:
        sys.exit(f"punctual: {error}")
    app.synth()


if __name__ == "__main__":
    main()
