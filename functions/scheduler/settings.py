"""Validated configuration of the Lambda functions, read from `SCHEDULER_*` environment variables.

The CDK stack sets these on each function; the local stack sets them for its processes. Only handlers (the
composition roots) build a Settings; the core receives plain values.
"""

from __future__ import annotations

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SCHEDULER_", extra="ignore")

    jobs_table: str = "punctual-jobs"
    executions_table: str = "punctual-executions"
    ready_queue_url: str = ""
    dlq_url: str = ""

    #: Partitions per bucket minute; spreads a hot minute. Changing it on a live system is safe for new
    #: timers only while old buckets drain, so pick it at deploy time.
    shard_count: int = Field(default=8, ge=1, le=256)
    #: How far ahead the sweeper dispatches (SQS DelaySeconds caps at 900 s, and a bucket spans 60 s).
    lookahead_seconds: int = Field(default=300, ge=0, le=780)
    bucket_lease_seconds: int = Field(default=120, ge=5, le=900)
    #: Worker lease on an occurrence; long targets heartbeat to extend it.
    lease_seconds: int = Field(default=60, ge=5, le=900)
    #: An occurrence found this much later than its fire time is a misfire (its job's policy applies).
    misfire_grace_seconds: int = Field(default=60, ge=1)
    catchup_window_seconds: int = Field(default=86_400, ge=60)
    #: Occurrences one sweeper invocation dispatches at most, so a backlog drains steadily.
    dispatch_budget: int = Field(default=20_000, ge=10)
    #: Stop starting new buckets this long before the invocation's deadline.
    sweep_safety_seconds: int = Field(default=20, ge=1)
    max_active_jobs_per_tenant: int = Field(default=10_000, ge=1)
    #: Allow `http` targets on private/loopback/link-local addresses (local development only).
    allow_private_targets: bool = False
    #: Master secret from which each tenant's HMAC signing key is derived.
    signing_secret: str = "local-development-secret"
    #: Local stack only: bearer tokens mapped to tenants, `token=tenant,token2=tenant2`.
    dev_tokens: str = ""
    service_name: str = "punctual"

    @model_validator(mode="after")
    def _lookahead_fits_sqs_delay(self) -> Settings:
        # A sweep dispatches up to the end of the look-ahead's last minute plus the seal margin (30 s), and
        # every message's DelaySeconds must fit SQS's 900 s cap.
        if self.lookahead_seconds + 60 + 30 > 900:
            raise ValueError("lookahead_seconds + 90 s (one bucket minute and the seal margin) must fit 900 s")
        return self
