"""Validated configuration of the Lambda functions, read from `SCHEDULER_*` environment variables.

The CDK stack sets these on each function; the local stack sets them for its processes. Only handlers (the
composition roots) build a Settings; the core receives plain values.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class TenantBudgetSetting(BaseModel):
    """One tenant's budgets (SCHEDULER_TENANT_BUDGETS: a JSON object of tenant -> {"rate", "burst", "concurrency"});
    what it leaves out is the default's."""

    rate: float | None = Field(default=None, gt=0)
    burst: int | None = Field(default=None, ge=1)
    #: Occurrences of the tenant that may run at once; 0: unlimited.
    concurrency: int | None = Field(default=None, ge=0)
    #: API requests a second the tenant may make on average; 0: unlimited.
    requests: float | None = Field(default=None, ge=0)


#: Development values of the secrets: public, so accepted only in local mode (see `Settings.local_mode`).
LOCAL_SIGNING_SECRET = "local-development-secret"
LOCAL_SIGNING_KEYS = '{"current": "local1", "local1": "local-development-signing-key"}'
LOCAL_MESSAGE_SECRET = "local-development-message-secret"


class TenantTargets(BaseModel):
    """The non-http targets one tenant may call: full ARNs (a `lambda` ARN with a qualifier admits only that alias
    or version), and for `handler` registered names. A type left out may not be called at all by that tenant; `"*"`
    allows every resource of that type the deployment grants. `eventbridge_sources`: the event sources the tenant
    may publish under (`fnmatch` patterns such as `com.example.*`); none listed, none allowed."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    sqs: list[str] = Field(default_factory=list)
    sns: list[str] = Field(default_factory=list)
    eventbridge: list[str] = Field(default_factory=list)
    stepfunctions: list[str] = Field(default_factory=list)
    handler: list[str] = Field(default_factory=list)
    lambda_: list[str] = Field(default_factory=list, alias="lambda")
    eventbridge_sources: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _full_arns(self) -> TenantTargets:
        for kind in ("sqs", "sns", "eventbridge", "stepfunctions", "lambda_"):
            for entry in getattr(self, kind):
                if entry != "*" and not entry.startswith("arn:"):
                    raise ValueError(
                        f"{kind.rstrip('_')} entry {entry!r} is not a full ARN (names alone would admit the same "
                        "name in another account or region)"
                    )
        return self


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SCHEDULER_", extra="ignore")

    jobs_table: str = "punctual-jobs"
    executions_table: str = "punctual-executions"
    ready_queue_url: str = ""
    dlq_url: str = ""
    #: The `high` and `low` priority lanes; empty: that lane's occurrences go to the (normal) ready queue.
    ready_queue_high_url: str = ""
    ready_queue_low_url: str = ""

    #: Partitions per bucket minute; spreads a hot minute, and bounds how many buckets of it sweeps work on at
    #: once. Safe to change on a live system: writers record their count before writing with it, and sweeps sweep
    #: the most ever recorded (docs/design.md §3.3), so a lowered count still sweeps the higher one's buckets.
    shard_count: int = Field(default=8, ge=1, le=4096)
    #: How far ahead the sweeper dispatches (SQS DelaySeconds caps at 900 s, and a bucket spans 60 s).
    lookahead_seconds: int = Field(default=300, ge=0, le=780)
    bucket_lease_seconds: int = Field(default=120, ge=5, le=900)
    #: Worker lease on an occurrence, renewed by a heartbeat every third of it while the target runs (a call of any
    #: length keeps it). What a dead worker's started occurrence waits: it restarts once the lease and its margin
    #: have passed since the last renewal, kept shorter than the batch hold so that it restarts within the hold
    #: (docs/reliability.md).
    lease_seconds: int = Field(default=15, ge=5, le=900)
    #: An occurrence found this much later than its fire time is a misfire (its job's policy applies).
    misfire_grace_seconds: int = Field(default=60, ge=1)
    catchup_window_seconds: int = Field(default=86_400, ge=60)
    #: Occurrences one sweeper invocation dispatches at most, so a backlog drains steadily.
    dispatch_budget: int = Field(default=20_000, ge=10)
    #: Backfill: occurrences one sweep sends of each backfill at most (its rate: this many per sweep period).
    backfill_wave_size: int = Field(default=500, ge=1, le=10_000)
    #: Backfill: occurrences one backfill may cover at most; a larger range is refused (split it).
    backfill_max_occurrences: int = Field(default=10_000, ge=1, le=100_000)
    #: Buckets (shards) of one minute a sweep works on at once, each in its own thread: a herd's minute is
    #: dispatched in about the time of its biggest bucket rather than of all of them. 1: one after another.
    sweep_concurrency: int = Field(default=8, ge=1, le=64)
    #: Sweeps a tick runs at once at most, itself included (scheduler.core.capacity.fan_out): when the forecast sees
    #: more due inside the look-ahead than one sweep's `dispatch_budget`, or a sweep ran out with buckets left, the
    #: tick starts more sweeps beside itself (on AWS, asynchronous invokes of the sweeper). 1 turns the fan-out off.
    fan_out_max_sweeps: int = Field(default=8, ge=1, le=100)
    #: The functions' per-occurrence DynamoDB and SQS calls skip botocore's request pipeline (same requests,
    #: signed by botocore, its retry rules; scheduler.adapters.fast_calls), for less CPU per occurrence. False:
    #: every call through botocore.
    fast_aws_calls: bool = True
    #: The most occurrences one ready-queue message carries (docs/design.md §3.4): a herd's occurrences due in the
    #: same instant for one tenant share messages, so SQS's send, receive, delete and hold are paid per message.
    #: 1: a message each (as before).
    occurrences_per_message: int = Field(default=10, ge=1, le=50)
    #: Stop starting new buckets this long before the invocation's deadline.
    sweep_safety_seconds: int = Field(default=20, ge=1)
    max_active_jobs_per_tenant: int = Field(default=10_000, ge=1)
    #: Per-tenant dispatch budget (scheduler.core.tenancy.fairness): occurrences per second on average; 0 turns budgets
    #: off.
    tenant_dispatch_rate: float = Field(default=100.0, ge=0)
    #: ... and at once: what a tenant may release in one instant before its rate applies.
    tenant_dispatch_burst: int = Field(default=3000, ge=1)
    #: Per-tenant execution budget (scheduler.core.tenancy.concurrency): occurrences of one tenant running at once,
    #: across every lane and worker; 0 (the default) turns it off for the tenants without their own `concurrency` in
    #: `tenant_budgets`. Each attempt under a budget costs a slot (about 2 write units and 1 read unit), so only
    #: the tenants that configured one pay for it. Keep it below the workers' concurrency, so one tenant's slow
    #: targets cannot take every worker.
    tenant_max_concurrency: int = Field(default=0, ge=0)
    #: Per-tenant API request limit (scheduler.core.tenancy.request_limits): requests a second a tenant may make on
    #: average, counted in fixed windows; one tenant cannot take the stage's whole throttle. 0 turns it off. Each
    #: counted request costs one write unit.
    tenant_request_rate: float = Field(default=20.0, ge=0)
    tenant_request_window_seconds: int = Field(default=10, ge=1, le=300)
    #: Bulk actions (scheduler.core.jobs.bulk) of one tenant running at once; another's request is a 429 meanwhile.
    #: Each job a bulk action changes counts against the tenant's request rate too. 0: no limit.
    bulk_max_running: int = Field(default=2, ge=0, le=100)
    #: Budgets of particular tenants, overriding the three above (and the request rate).
    tenant_budgets: dict[str, TenantBudgetSetting] = Field(default_factory=dict)
    #: The sweeper forecasts this many minutes ahead every sweep (scheduler.core.capacity.forecast): the metric
    #: ForecastDueOccurrences and the pre-scaler's input. 0 turns it off.
    forecast_minutes: int = Field(default=15, ge=0, le=180)
    #: Pre-scaling (scheduler.core.capacity.prescale): raise the worker mappings' provisioned pollers ahead of forecast
    #: peaks.
    prescale_enabled: bool = False
    #: Lane -> event source mapping UUID (the CDK stack sets it).
    prescale_mappings: dict[str, str] = Field(default_factory=dict)
    #: Local stack only: the pollers go to this JSON file, which the local worker pool reads (scheduler_local.prescale).
    prescale_state_file: str = ""
    #: Never more than this many MinimumPollers per mapping (AWS accepts up to 200; each one is billed hourly).
    prescale_ceiling_pollers: int = Field(default=50, ge=2, le=200)
    #: The mappings' MaximumPollers (as deployed; kept on every update).
    prescale_maximum_pollers: int = Field(default=200, ge=2, le=2000)
    prescale_lead_seconds: int = Field(default=300, ge=60, le=1800)
    #: Worker time per occurrence the pollers are sized with (scripts/bench measures it: ~0.033 s).
    prescale_seconds_per_occurrence: float = Field(default=0.034, gt=0, le=60)
    prescale_target_start_seconds: float = Field(default=5.0, ge=1, le=300)
    #: Completion events (scheduler.core.execution.events) are wired: the jobs that ask for them (`"events": true`) have
    #: their terminal outcomes published through the outbox.
    completion_events: bool = True
    #: ... and the jobs that do not say (`events` left out). Off: nothing is written or paid for the outcomes of
    #: jobs nobody listens to (PutEvents alone is $1.00 per million, the outbox 3 more write units per fire).
    completion_events_default: bool = False
    #: The EventBridge bus completion events go to (a name or an ARN; "default" is the account's default bus).
    event_bus_name: str = "default"
    #: Allow `http` targets on private and loopback addresses (local development; link-local and cloud-metadata
    #: addresses are refused whatever this says).
    allow_private_targets: bool = False
    #: The local stack (and the tests): the well-known development secrets below may be used. Outside local mode a
    #: function whose secret has no ARN fails at start-up instead of signing with a public value (fail closed).
    local_mode: bool = False
    #: Signature v1 only: the master secret each tenant's v1 key is derived from
    #: (`scheduler.security.signing.tenant_key`); on AWS it lives in Secrets Manager (`signing_secret_arn`) and only the
    #: worker reads it.
    signing_secret: str = LOCAL_SIGNING_SECRET
    signing_secret_arn: str = ""
    #: Signature v2: the root keys per key id (JSON `{"current": "<kid>", "<kid>": "<secret>", ...}`) each job's key
    #: is derived from (`scheduler.security.signing.job_key`). Read by the worker (signs) and the API (hands a tenant
    #: the keys of its jobs); on AWS in Secrets Manager (`signing_keys_arn`).
    signing_keys: str = LOCAL_SIGNING_KEYS
    signing_keys_arn: str = ""
    #: Also sign every call with v1 (the migration window for receivers that verify v1). Off unless a deployment turns
    #: it on (the stack's `signature_v1`): anything built from Settings alone signs v2 only.
    signature_v1: bool = False
    #: The key that authenticates dispatch messages (an HMAC in every ready-queue body, checked by the worker and by
    #: redrive); read by the API, the sweeper and the worker; on AWS in Secrets Manager (`message_secret_arn`).
    message_secret: str = LOCAL_MESSAGE_SECRET
    message_secret_arn: str = ""
    #: The KMS key (id, ARN or alias) that seals jobs' secret header values at rest (scheduler.adapters.sealing); the
    #: API seals and the worker opens. Empty (local mode, or a stack without the key): they are sealed under a key
    #: derived from the message secret.
    header_key_id: str = ""
    #: Upgrade window only: accept ready-queue messages that carry no HMAC at all (sent by a version before dispatch
    #: messages were authenticated). A message with a wrong HMAC is refused whatever this says.
    accept_unsigned_messages: bool = False
    #: The longest `timeout_seconds` an http target may have, and the longest a `lambda` target is waited for: the
    #: worker's Lambda timeout (120 s) less the time it needs to record the outcome. Longer http timeouts are
    #: refused at submit and cut to this at call time; a longer Lambda run is an ambiguous outcome.
    max_target_timeout_seconds: int = Field(default=90, ge=1, le=900)
    #: Python modules the worker imports to register `handler` targets (scheduler.targets.registry); none by default.
    #: The local stack registers the examples (`scheduler.examples`).
    handler_modules: list[str] = Field(default_factory=list)
    #: The role non-http targets are called with (the stack's target role: only the target grants). Empty: the
    #: function's own credentials (the local stack).
    target_role_arn: str = ""
    #: The CloudFormation stack name: resources whose names start with `<stack_name>-` are the scheduler's own and
    #: no target may name them.
    stack_name: str = ""
    #: Per-tenant target allow-lists (JSON: tenant -> {"sqs": [...], "sns": [...], ...}); see TenantTargets.
    tenant_targets: dict[str, TenantTargets] = Field(default_factory=dict)
    #: Tenants without an entry in `tenant_targets` may call every AWS target the deployment grants (true: the grants
    #: are shared), or none (false, the default). `handler` targets are never open by default.
    default_targets_open: bool = False
    #: The account and region a bare Lambda function or bus name resolves in (the CDK stack sets them); empty: the
    #: ready queue's account and AWS_REGION.
    account_id: str = ""
    region: str = ""
    #: How a caller's tenant is keyed (scheduler.security.identity): its principal and unique id (a re-created role or
    #: user is a new tenant), or - for the migration from earlier versions - its ARN alone.
    tenant_identity: Literal["unique_id", "arn"] = "unique_id"
    #: The operator's mapping of principals (unique id, or ARN) to tenants, checked first.
    tenant_map: dict[str, str] = Field(default_factory=dict)
    #: Local stack only: bearer tokens mapped to tenants, `token=tenant,token2=tenant2`.
    dev_tokens: str = ""
    #: The tenants (ids as the API keys them) that may read the operator's view of every lane's load and lag
    #: (`GET /v1/operator/status`: queue depths, the watermark, the metrics; never a job). None by default.
    operators: list[str] = Field(default_factory=list)
    #: Local stack only: the folder whose logs' EMF lines the operator's view reads its metrics from (there is no
    #: CloudWatch locally). Empty: CloudWatch.
    metrics_log_dir: str = ""
    service_name: str = "punctual"

    @model_validator(mode="after")
    def _lookahead_fits_sqs_delay(self) -> Settings:
        # A sweep dispatches up to the end of the look-ahead's last minute plus the seal margin (30 s), and
        # every message's DelaySeconds must fit SQS's 900 s cap.
        if self.lookahead_seconds + 60 + 30 > 900:
            raise ValueError("lookahead_seconds + 90 s (one bucket minute and the seal margin) must fit 900 s")
        return self
