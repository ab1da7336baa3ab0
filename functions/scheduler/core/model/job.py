"""The job definition a user submits, the stored job, and the states of jobs and runs."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, field_validator, model_validator

from scheduler.core.model.flow import FlowControl
from scheduler.core.model.labels import LabelSelector, external_id_problem, labels_problem
from scheduler.core.model.schedules import Instant, Schedule

#: The largest payload accepted, in bytes of compact JSON. A DynamoDB item holds 400 KB and an SQS message
#: 256 KB; the job item also carries the definition, and the payload travels in SNS/EventBridge/Step
#: Functions inputs (256 KB caps), so 64 KB leaves generous room for every target.
MAX_PAYLOAD_BYTES = 64 * 1024
MAX_ATTEMPTS_LIMIT = 20
#: The longest operator's note a resolve takes (it is kept in the run's history).
MAX_NOTE = 500


class JobState(StrEnum):
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"
    #: Stored: the schedule has no occurrence left to dispatch. Shown only once the last one has finished.
    COMPLETED = "COMPLETED"
    #: Never stored: how the API shows a COMPLETED job whose last occurrence has not finished yet (it waits in the
    #: queue, runs, or waits for a retry).
    DISPATCHED = "DISPATCHED"


class RunState(StrEnum):
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"
    RECONCILING = "RECONCILING"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_RUN_STATES


class BackfillState(StrEnum):
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"


TERMINAL_RUN_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.DEAD, RunState.CANCELLED, RunState.SKIPPED, RunState.RECONCILING}
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


#: RFC 7230 `token`: the characters a header name may have.
HEADER_NAME = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]{1,128}$")
MAX_HEADER_VALUE = 4096
#: Headers the scheduler sets on every call (its values win, whatever the case of a job's header).
SCHEDULER_HEADERS = frozenset({"idempotency-key", "content-type", "user-agent"})
#: Hop-by-hop and framing headers: they describe one connection or the message's framing, which the scheduler
#: owns; a job setting them could smuggle a second request or break the call (RFC 7230 6.1, 3.3; RFC 7231 5.1.1).
REFUSED_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "content-length",
        "host",
        "proxy-authenticate",
        "proxy-authorization",
    }
)
#: Every header value is a secret (stored sealed, sent, never shown again) unless its name is public: one of these
#: standard headers, which describe the request and never carry a credential, or one the target lists in
#: `public_headers`. A name heuristic (Authorization, ...Token) misses X-Signature, X-Hub-Signature-256 and the
#: like, so secrecy is the default and publicity is declared.
PUBLIC_BY_DEFAULT = frozenset(
    {"accept", "accept-charset", "accept-encoding", "accept-language", "cache-control", "content-type", "user-agent"}
)
#: Words in a header name that mark a credential: such a header cannot be declared public.
SECRET_HEADER_WORDS = (
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "cookie",
    "key",
    "session",
    "credential",
    "signature",
)
REDACTED = "<redacted>"


def looks_like_credential(name: str) -> bool:
    """Whether a header's name says it carries a credential (Authorization, X-Api-Key, X-Signature, ...)."""
    low = name.lower()
    return any(word in low for word in SECRET_HEADER_WORDS)


def is_secret_header(name: str, public: Iterable[str] = ()) -> bool:
    """Whether a header's value is a secret: every header's is, unless its name is public by default or listed in
    `public` (a target's `public_headers`; names are case-insensitive)."""
    low = name.lower()
    return low not in PUBLIC_BY_DEFAULT and low not in {p.lower() for p in public}


def redact_headers(headers: dict[str, str], public: Iterable[str] = ()) -> dict[str, str]:
    """The headers as a read shows them: every value but those of public headers replaced by REDACTED."""
    shown = tuple(public)
    return {name: REDACTED if is_secret_header(name, shown) else value for name, value in headers.items()}


class HttpTarget(_Strict):
    """POST (or PUT/PATCH) the payload to a URL, with the occurrence key as `Idempotency-Key`."""

    type: Literal["http"]
    url: AnyHttpUrl
    method: Literal["POST", "PUT", "PATCH"] = "POST"
    #: Extra request headers. Names are RFC 7230 tokens, values have no control characters; hop-by-hop and
    #: framing headers are refused. Every value is write-only (sealed at rest, redacted on read) unless the header
    #: is public: a standard one (`PUBLIC_BY_DEFAULT`) or one listed in `public_headers`.
    headers: dict[str, str] = Field(default_factory=dict, max_length=20)
    #: The headers whose values a read may show (case-insensitive); a name that looks like a credential is refused.
    public_headers: list[str] = Field(
        default_factory=list,
        max_length=20,
        description="headers whose values a read may show; every other header value is write-only (sealed at rest)",
    )
    timeout_seconds: int = Field(strict=True, default=30, ge=1, le=900)

    @field_validator("headers")
    @classmethod
    def _no_reserved_headers(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            low = name.lower()
            if low.startswith("x-scheduler-") or low in {"idempotency-key", "content-length", "host"}:
                raise ValueError(f"header '{name}' is set by the scheduler and cannot be overridden")
        return value

    @field_validator("public_headers")
    @classmethod
    def _public_headers_are_not_credentials(cls, value: list[str]) -> list[str]:
        for name in value:
            if not HEADER_NAME.fullmatch(name):
                raise ValueError(f"public header name {name!r} is not an RFC 7230 token")
            if looks_like_credential(name):
                raise ValueError(
                    f"header '{name}' looks like a credential; its value stays write-only and cannot be declared public"
                )
        return value


def header_problem(headers: dict[str, str]) -> tuple[str, str] | None:
    """(header name, why) for the first header a job may not send, or None. Checked at submit (a 422 naming
    `target.headers.<name>`) and again before every call (jobs stored before a rule existed are refused, not sent);
    not in the model's validation, so such a stored job still reads."""
    seen: set[str] = set()
    for name, value in headers.items():
        low = name.lower()
        if not HEADER_NAME.fullmatch(name):
            return name, f"header name {name!r} is not an RFC 7230 token (letters, digits and !#$%&'*+-.^_`|~)"
        if low in seen:
            return name, f"header '{name}' is given twice (header names are case-insensitive)"
        seen.add(low)
        if low in REFUSED_HEADERS:
            return name, (
                f"header '{name}' is a hop-by-hop or framing header; the scheduler owns the connection and the "
                "message framing, so a job cannot set it"
            )
        if len(value) > MAX_HEADER_VALUE:
            return name, f"header '{name}': the value is over {MAX_HEADER_VALUE} characters"
        bad = next((c for c in value if (ord(c) < 0x20 and c != "\t") or ord(c) == 0x7F), None)
        if bad is not None:
            return name, f"header '{name}': the value holds the control character {bad!r} (no CR, LF or NUL)"
        if not value.isascii():
            return name, f"header '{name}': the value must be ASCII"
        if value != value.strip(" \t"):
            return name, f"header '{name}': the value has leading or trailing whitespace"
    return None


class SqsTarget(_Strict):
    """Send the payload to an SQS queue; FIFO queues get the key as `MessageDeduplicationId`."""

    type: Literal["sqs"]
    queue_url: str = Field(min_length=1, max_length=512)
    message_group_id: str | None = Field(default=None, max_length=128)


class SnsTarget(_Strict):
    type: Literal["sns"]
    topic_arn: str = Field(pattern=r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[A-Za-z0-9_.-]{1,256}$")


class EventBridgeTarget(_Strict):
    type: Literal["eventbridge"]
    event_bus_name: str = Field(default="default", min_length=1, max_length=1600)
    source: str = Field(default="scheduled.job", min_length=1, max_length=256)
    detail_type: str = Field(default="Scheduled Occurrence", min_length=1, max_length=128)


class LambdaTarget(_Strict):
    type: Literal["lambda"]
    function_name: str = Field(min_length=1, max_length=170)


class StepFunctionsTarget(_Strict):
    type: Literal["stepfunctions"]
    state_machine_arn: str = Field(pattern=r"^arn:aws[a-z-]*:states:[a-z0-9-]+:\d{12}:stateMachine:.+$")


class HandlerTarget(_Strict):
    """A Python function registered by name in the worker package (`scheduler.targets.registry`)."""

    type: Literal["handler"]
    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,127}$")


Target = Annotated[
    HttpTarget | SqsTarget | SnsTarget | EventBridgeTarget | LambdaTarget | StepFunctionsTarget | HandlerTarget,
    Field(discriminator="type"),
]


#: The `type` of each kind of target (`GET /v1/jobs?target_type=`).
TARGET_TYPES: tuple[str, ...] = tuple(
    kind.model_fields["type"].annotation.__args__[0]  # type: ignore[union-attr]
    for kind in (HttpTarget, SqsTarget, SnsTarget, EventBridgeTarget, LambdaTarget, StepFunctionsTarget, HandlerTarget)
)


class RetryPolicy(_Strict):
    max_attempts: int = Field(strict=True, default=5, ge=1, le=MAX_ATTEMPTS_LIMIT)
    initial_backoff_seconds: int = Field(strict=True, default=5, ge=1, le=3600)
    max_backoff_seconds: int = Field(strict=True, default=900, ge=1, le=43_200)
    max_event_age_seconds: int = Field(strict=True, default=86_400, ge=60, le=14 * 86_400)

    @model_validator(mode="after")
    def _ordered(self) -> RetryPolicy:
        if self.max_backoff_seconds < self.initial_backoff_seconds:
            raise ValueError("'max_backoff_seconds' must be at least 'initial_backoff_seconds'")
        return self


MisfirePolicy = Literal["run_once", "skip", "run_all"]
#: Which ready queue (lane) a job's occurrences go to; each lane has its own reserved worker capacity.
Priority = Literal["high", "normal", "low"]
PRIORITIES: tuple[Priority, ...] = ("high", "normal", "low")
OverlapPolicy = Literal["skip", "buffer_one", "allow"]
Delivery = Literal["at_least_once", "at_most_once"]


class JobSpec(_Strict):
    """What a user submits (the body of `POST /v1/jobs`); unknown fields are refused."""

    name: str | None = Field(default=None, min_length=1, max_length=128)
    schedule: Schedule
    target: Target
    payload: Any = None
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    jitter_seconds: int = Field(strict=True, default=0, ge=0, le=3600)
    misfire_policy: MisfirePolicy = "run_once"
    overlap_policy: OverlapPolicy = "skip"
    delivery: Delivery = "at_least_once"
    priority: Priority = "normal"
    #: The destination's flow-control key and its limits (scheduler.core.model.flow): the key's limits become these.
    flow_control: FlowControl | None = None
    #: Publish this job's terminal outcomes as completion events (EventBridge PutEvents, $1.00 per million). Left
    #: out: the deployment's default (`SCHEDULER_COMPLETION_EVENTS_DEFAULT`, off), so nobody pays for events
    #: nobody listens to.
    events: bool | None = Field(default=None, strict=True)
    #: Kubernetes-style labels (scheduler.core.model.labels): the job list filters by them (`label=key:value`).
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="at most 20; key: [DNS-subdomain prefix/]name of 1-63 [A-Za-z0-9-_.]; value: empty or the same",
    )
    #: The caller's own id of the job, unique among the tenant's jobs (a second create with it is a 409); the job is
    #: read by it at `GET /v1/jobs/by-external-id/{external_id}`. Set on create; it cannot change.
    external_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="unique per tenant; 1-128 printable ASCII characters without spaces or '/'",
    )

    @field_validator("labels")
    @classmethod
    def _labels_are_kubernetes_labels(cls, value: dict[str, str]) -> dict[str, str]:
        problem = labels_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("external_id")
    @classmethod
    def _external_id_is_printable(cls, value: str | None) -> str | None:
        problem = external_id_problem(value) if value is not None else None
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("payload")
    @classmethod
    def _payload_is_json(cls, value: Any) -> Any:
        json.dumps(value)  # raises for values that JSON cannot carry
        return value


class BackfillRequest(BaseModel):
    """The body of `POST /v1/jobs/{job_id}/backfill`: materialise the job's occurrences in [from, to)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    range_from: Instant = Field(alias="from", description="the first instant of the range (inclusive)")
    to: Instant = Field(description="the end of the range (exclusive): not before `from`, and not in the future")

    @model_validator(mode="after")
    def _ordered(self) -> BackfillRequest:
        if self.to < self.range_from:
            raise ValueError("'to' must not be before 'from'")
        return self


def payload_size(payload: Any) -> int:
    return len(json.dumps(payload, separators=(",", ":")).encode())


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch, as `PATCH /v1/jobs/{id}` applies it to a definition: objects merge recursively,
    `null` removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return patch
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class Job(BaseModel):
    """A stored job: the definition plus what the scheduler tracks about it."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    tenant: str
    spec: JobSpec
    version: int
    state: JobState
    created_at: datetime
    updated_at: datetime
    next_run_at: datetime | None = None
    last_dispatched_for: datetime | None = None
    misfire_skipped: int = 0
    #: The chain's last advance: the timer it advanced from, and the instant and horizon it planned with. A sweep
    #: that re-runs that timer after a crash replays exactly this plan (docs/design.md §3.3).
    advanced_from: datetime | None = None
    planned_at: datetime | None = None
    planned_horizon: datetime | None = None
    #: The version the chain's last advance was made at (the advancing timer's). A change of version sends that plan
    #: again only while it is unproven: its next timer, written after its sends, is not stored (docs/design.md §3.3).
    planned_version: int | None = None
    #: The completions a bucket sweep made with a plain write (no transaction with the quota counter), as
    #: `completion_mark(version, scheduled_for)` of the completing timer: that sweep's page checkpoint owes the
    #: tenant's quota release, and a re-run of the page finds the mark and owes it again
    #: (scheduler.core.jobs.chain.already_advanced). A job completes at most once per version, so marks never clash;
    #: they are never removed (a later completion after an edit must not erase an earlier one's obligation).
    completed_by_checkpoint: frozenset[str] = frozenset()
    #: The last pause: when it took effect, and when the job was resumed (None while still paused). Occurrences
    #: scheduled in between are left to the misfire policy of the resumed chain, wherever they were (a queued
    #: message of them is dropped by the worker, unrecorded), so a resume handles them as the policy says.
    paused_at: datetime | None = None
    resumed_at: datetime | None = None
    paused_version: int | None = None  # the version the pause wrote
    #: The values of the secret headers of an http target, sealed together (`scheduler.core.jobs.secrecy`); the spec
    #: holds REDACTED in their place. None: none sealed (a job stored before sealing keeps its values in the spec).
    sealed_headers: str | None = None

    @property
    def flow_key(self) -> str | None:
        """The job's flow-control key (None: its calls are not flow-controlled)."""
        return self.spec.flow_control.key if self.spec.flow_control is not None else None

    #: The version of the job's webhook signing key (scheduler.security.signing.versioned_key_id): 1, the key every job
    #: had before keys had versions, until a rotation. The version it replaced still signs until `previous_key_until`.
    key_version: int = Field(default=1, ge=1)
    previous_key_until: datetime | None = None

    @classmethod
    def new(cls, job_id: str, tenant: str, spec: JobSpec, now: datetime, first: datetime | None = None) -> Job:
        """A job as it is created at `now`: version 1, active, its first occurrence at `first`."""
        return cls(
            job_id=job_id,
            tenant=tenant,
            spec=spec,
            version=1,
            state=JobState.ACTIVE,
            created_at=now,
            updated_at=now,
            next_run_at=first,
        )

    def left_to_resume(self, scheduled_for: datetime, version: int) -> bool:
        """Whether an occurrence dispatched at `version`, scheduled at this instant, is the resume's to decide: it
        falls after the job's last pause took effect and not after its resume, and was dispatched before the pause
        (the resumed chain's own dispatches carry a later version)."""
        if self.paused_at is None or self.paused_version is None or version >= self.paused_version:
            return False
        if self.state not in (JobState.PAUSED, JobState.ACTIVE, JobState.COMPLETED):
            return False
        return self.paused_at < scheduled_for and (self.resumed_at is None or scheduled_for <= self.resumed_at)


def carries_secrets(job: Job) -> bool:
    """Whether the job holds a secret a message must not carry: a secret header (sealed or, stored before sealing,
    clear), or a URL with credentials, a query or a fragment."""
    target = job.spec.target
    if not isinstance(target, HttpTarget):
        return False
    parts = urlsplit(str(target.url))
    return (
        job.sealed_headers is not None
        or any(is_secret_header(name, target.public_headers) for name in target.headers)
        or bool(parts.username or parts.password or parts.query or parts.fragment)
    )


@dataclass(frozen=True)
class JobQuery:
    """What the job list keeps, besides the state: every selector (ANDed), the target type, the name's prefix."""

    labels: tuple[LabelSelector, ...] = ()
    target_type: str | None = None
    name_prefix: str | None = None

    @property
    def empty(self) -> bool:
        return not self.labels and self.target_type is None and self.name_prefix is None

    def driving(self) -> LabelSelector | None:
        """The selector a store lists by (an exact one is narrower than a key's presence), or None."""
        exact = [s for s in self.labels if s.value is not None]
        chosen = exact or list(self.labels)
        return chosen[0] if chosen else None

    def matches(self, job: Job, state: JobState | None = None) -> bool:
        spec = job.spec
        return (
            (state is None or job.state == state)
            and all(s.matches(spec.labels) for s in self.labels)
            and (self.target_type is None or spec.target.type == self.target_type)
            and (self.name_prefix is None or (spec.name or "").startswith(self.name_prefix))
        )


ALL_JOBS = JobQuery()
