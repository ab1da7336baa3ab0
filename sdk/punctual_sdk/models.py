"""The API's documents as typed models: job definitions (schedules, targets, retry), jobs, runs, backfills, a
trigger, signing keys and the forecast.

Every model keeps fields it does not know (`extra="allow"`), so a newer API that adds a field does not break an
older SDK; `raw` is the document exactly as the API sent it. Schedules and targets of a kind this SDK does not
know come back as plain dicts, and a state it does not know as the `UNKNOWN` member of its enum (the state as sent
is in `raw`). A document it cannot read at all (a missing or malformed field it needs) raises `InvalidResponse`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from punctual_sdk.errors import InvalidResponse


class JobState(StrEnum):
    #: A state this SDK does not know (a newer API's): the state as sent is the document's (`job.raw["state"]`).
    UNKNOWN = "UNKNOWN"
    ACTIVE = "ACTIVE"
    PAUSED = "PAUSED"
    CANCELLED = "CANCELLED"
    #: The schedule has no occurrence left and the last one has finished.
    COMPLETED = "COMPLETED"
    #: A COMPLETED job whose last occurrence has not finished yet (queued, running or waiting for a retry).
    DISPATCHED = "DISPATCHED"


class RunState(StrEnum):
    #: A state this SDK does not know (a newer API's): the state as sent is the document's (`run.raw["state"]`).
    UNKNOWN = "UNKNOWN"
    RUNNING = "RUNNING"
    RETRY_WAIT = "RETRY_WAIT"
    SUCCEEDED = "SUCCEEDED"
    DEAD = "DEAD"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"
    #: The outcome is unknown (an at-most-once attempt was interrupted): settle it with `Client.resolve`.
    RECONCILING = "RECONCILING"

    @property
    def terminal(self) -> bool:
        """Settled for good. A state this SDK does not know is not taken for settled: a poller keeps polling."""
        return self not in (RunState.RUNNING, RunState.RETRY_WAIT, RunState.UNKNOWN)


class BackfillState(StrEnum):
    #: A state this SDK does not know (a newer API's): the state as sent is the document's (`backfill.raw["state"]`).
    UNKNOWN = "UNKNOWN"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    CANCELLED = "CANCELLED"


E = TypeVar("E", bound=StrEnum)


def _known_or_unknown(kind: type[E]) -> BeforeValidator:
    """A state as its enum's member, or `UNKNOWN` for a string the enum does not have (a newer API's state)."""

    def read(value: Any) -> Any:
        if isinstance(value, str) and value not in kind._value2member_map_:
            return kind("UNKNOWN")
        return value

    return BeforeValidator(read)


#: The states as the API's documents carry them: one this SDK does not know is `UNKNOWN`, never a validation error.
SentJobState = Annotated[JobState, _known_or_unknown(JobState)]
SentRunState = Annotated[RunState, _known_or_unknown(RunState)]
SentBackfillState = Annotated[BackfillState, _known_or_unknown(BackfillState)]


class ApiModel(BaseModel):
    """A document of the API: unknown fields kept, `raw` as sent."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    _raw: dict[str, Any] | None = PrivateAttr(default=None)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Self:
        """The model of a document the API sent; `InvalidResponse` (a `PunctualError`) when it is not one."""
        if not isinstance(body, Mapping):
            raise InvalidResponse(f"the API sent {type(body).__name__} where {cls.__name__} is a JSON object", body)
        try:
            model = cls.model_validate(dict(body))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in error['loc']) or 'the document'}: {error['msg']}"
                for error in exc.errors()
            )
            raise InvalidResponse(f"the API sent a {cls.__name__} this SDK cannot read ({problems})", body) from exc
        model._raw = dict(body)
        return model

    @property
    def raw(self) -> dict[str, Any]:
        """The document as the API sent it (for a model built here: its JSON)."""
        if self._raw is not None:
            return self._raw
        dumped: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return dumped


# -- job definitions ----------------------------------------------------------------------------------------


class _Kind(ApiModel):
    """A schedule or target: its `type` is always sent, even when left at its default."""

    @model_validator(mode="after")
    def _type_is_sent(self) -> Self:
        self.__pydantic_fields_set__.add("type")
        return self


class CronSchedule(_Kind):
    """A cron expression (5 fields, or 6 with seconds first) in an IANA time zone, DST handled."""

    type: Literal["cron"] = "cron"
    expression: str
    timezone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None


class RateSchedule(_Kind):
    """Every N seconds, anchored at the job's creation (or `start_at`)."""

    type: Literal["rate"] = "rate"
    every_seconds: int
    start_at: datetime | None = None
    end_at: datetime | None = None


class OnceSchedule(_Kind):
    """One occurrence: `at` an instant, or `delay_seconds` after creation."""

    type: Literal["once"] = "once"
    at: datetime | None = None
    delay_seconds: int | None = None


#: A schedule; one of a kind this SDK does not know comes back as a dict.
Schedule = Annotated[CronSchedule | RateSchedule | OnceSchedule | dict[str, Any], Field(union_mode="left_to_right")]


class HttpTarget(_Kind):
    type: Literal["http"] = "http"
    url: str
    method: str = "POST"
    #: Write-only values: the API shows secret-bearing ones redacted.
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: int = 30


class SqsTarget(_Kind):
    type: Literal["sqs"] = "sqs"
    queue_url: str
    message_group_id: str | None = None


class SnsTarget(_Kind):
    type: Literal["sns"] = "sns"
    topic_arn: str


class EventBridgeTarget(_Kind):
    type: Literal["eventbridge"] = "eventbridge"
    event_bus_name: str = "default"
    source: str = "scheduled.job"
    detail_type: str = "Scheduled Occurrence"


class LambdaTarget(_Kind):
    type: Literal["lambda"] = "lambda"
    function_name: str


class StepFunctionsTarget(_Kind):
    type: Literal["stepfunctions"] = "stepfunctions"
    state_machine_arn: str


class HandlerTarget(_Kind):
    """A handler registered in the worker (local stack and tests)."""

    type: Literal["handler"] = "handler"
    name: str


#: A target; one of a kind this SDK does not know comes back as a dict.
Target = Annotated[
    HttpTarget
    | SqsTarget
    | SnsTarget
    | EventBridgeTarget
    | LambdaTarget
    | StepFunctionsTarget
    | HandlerTarget
    | dict[str, Any],
    Field(union_mode="left_to_right"),
]


class RetryPolicy(ApiModel):
    """How a failed occurrence is retried (exponential backoff with jitter, bounded by attempts and age)."""

    max_attempts: int = 5
    initial_backoff_seconds: int = 5
    max_backoff_seconds: int = 900
    max_event_age_seconds: int = 86_400


class FlowControl(ApiModel):
    """A destination's flow-control key and its limits (docs/flow-control.md): at most `rate` calls started per
    `period_seconds`, at most `parallelism` in flight; the key's limits are those of the most recent write naming
    it. Give at least one of `rate` and `parallelism`."""

    #: 1-128 characters of letters, digits, '.', '_', ':' and '-'; the same key in two tenants is two keys.
    key: str
    rate: int | None = None
    period_seconds: int | None = None
    parallelism: int | None = None
    #: Occurrences held at most: a create or trigger beyond it is refused (`TooManyRequests`).
    max_backlog: int | None = None


class JobDefinition(ApiModel):
    """What `POST /v1/jobs` takes. Only the fields you set are sent; the API applies its defaults to the rest and
    validates the whole (a refusal is an `Unprocessable` naming the field)."""

    name: str | None = None
    schedule: Schedule
    target: Target
    payload: Any = None
    retry: RetryPolicy | None = None
    jitter_seconds: int | None = None
    #: run_once | skip | run_all: what a resume or a late sweep does with missed occurrences.
    misfire_policy: str | None = None
    #: skip | buffer_one | allow: what an occurrence does while the previous one still runs.
    overlap_policy: str | None = None
    #: at_least_once | at_most_once
    delivery: str | None = None
    #: high | normal | low
    priority: str | None = None
    #: The destination's flow-control key and its limits.
    flow_control: FlowControl | None = None
    events: bool | None = None
    #: Up to the API's limit of labels, keys and values as Kubernetes labels; find and act on jobs by them.
    labels: dict[str, str] | None = None
    #: Your own id for the job, unique per tenant: `get_by_external_id`, and a create with it is done once.
    external_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The request body: the fields that were set, as JSON."""
        body: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return body


# -- what the API answers -----------------------------------------------------------------------------------


class LastRun(ApiModel):
    occurrence_key: str
    scheduled_for: datetime | None = None
    state: str | None = None


class Job(ApiModel):
    """A job as the API shows it: its definition plus what the scheduler tracks about it."""

    job_id: str
    state: SentJobState
    version: int
    name: str | None = None
    schedule: Schedule | None = None
    target: Target | None = None
    payload: Any = None
    retry: RetryPolicy | None = None
    jitter_seconds: int = 0
    misfire_policy: str | None = None
    overlap_policy: str | None = None
    delivery: str | None = None
    priority: str | None = None
    flow_control: FlowControl | None = None
    #: Whether its outcomes are published as completion events (None: the deployment's default).
    events: bool | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    external_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    next_run_at: datetime | None = None
    #: The next occurrences, with `get(job_id, preview=N)`.
    next_runs: list[datetime] = Field(default_factory=list)
    last_dispatched_for: datetime | None = None
    misfire_skipped: int = 0
    #: A create answered from an earlier request with the same Idempotency-Key.
    replayed: bool = False
    last_run: LastRun | None = None

    @property
    def definition(self) -> dict[str, Any]:
        """The definition part of the document (the fields `JobDefinition` takes), as JSON."""
        return {k: v for k, v in self.raw.items() if k in JobDefinition.model_fields}


class RunHold(ApiModel):
    """What held a run back before its first attempt: its flow-control key (docs/flow-control.md)."""

    key: str
    #: Which of the key's limits held it: `rate`, `parallelism`, `paused` (kept as sent: a newer API may add one).
    reasons: list[str] = Field(default_factory=list)
    #: When the hold began: the run's fire time.
    since: datetime | None = None
    #: How long the key held it, from its fire time to its first attempt (None: not yet).
    seconds: float | None = None
    #: The hold as people read it.
    detail: str = ""


class Run(ApiModel):
    """One occurrence's run: its key, ledger state, attempts, times, last error and history."""

    occurrence_key: str
    scheduled_for: datetime | None = None
    state: SentRunState
    attempts: int = 0
    created_at: datetime | None = None
    updated_at: datetime | None = None
    finished_at: datetime | None = None
    next_attempt_at: datetime | None = None
    last_error: str | None = None
    result: Any = None
    history: list[Any] = Field(default_factory=list)
    #: What held the run back before its first attempt (None: nothing did, or an older API).
    held: RunHold | None = None


class Backfill(ApiModel):
    """A backfill of a past range and its progress (waves of at most `wave_size` occurrences, one per sweep)."""

    backfill_id: str
    job_id: str = ""
    range_from: datetime | None = Field(default=None, alias="from")
    range_to: datetime | None = Field(default=None, alias="to")
    state: SentBackfillState
    total: int = 0
    dispatched: int = 0
    remaining: int = 0
    waves: int = 0
    waves_left: int = 0
    wave_size: int = 0
    last_dispatched_for: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @property
    def running(self) -> bool:
        """Still sending waves (COMPLETED and CANCELLED are final)."""
        return self.state == BackfillState.RUNNING


class Triggered(ApiModel):
    """The extra occurrence `trigger` placed (it has its own occurrence key)."""

    job_id: str
    occurrence_key: str
    scheduled_for: datetime | None = None


class SigningKey(ApiModel):
    key_id: str
    key: str
    #: The job key's version this key signs for.
    version: int = 1
    #: When a replaced version stops signing (RFC 3339; None: the current one); a receiver must not accept it after.
    #: Kept as the API sent it: the receiver kit reads it, and refuses a key whose expiry it cannot read.
    expires_at: str | None = None


class SigningKeys(ApiModel):
    """A job's signature keys: every key that may sign its calls now (more than one while keys rotate)."""

    job_id: str
    keys: list[SigningKey] = Field(default_factory=list)
    signature: str | None = None
    algorithm: str | None = None
    current_key_id: str | None = None
    #: The current version of the job's key.
    key_version: int | None = None

    def by_id(self) -> dict[str, str]:
        """Key id -> key, as a receiver's verifier takes them."""
        return {k.key_id: k.key for k in self.keys}


class FlowControlKey(ApiModel):
    """A flow-control key of your tenant: its limits and what it holds now."""

    key: str
    rate: int | None = None
    period_seconds: int = 1
    parallelism: int | None = None
    max_backlog: int | None = None
    updated_at: datetime | None = None
    #: Occurrences held by the key's rate whose release is still to come.
    backlog: int = 0
    #: Calls of the key running now.
    in_flight: int = 0
    #: Releases per second over the last minute.
    rate_last_minute: float = 0.0
    #: How late the oldest held occurrence already is (seconds).
    oldest_held_lateness_seconds: float = 0.0
    #: The fraction of its rate the key is held to since its destination pushed back (1: all of it).
    rate_factor: float = 1.0
    #: A Retry-After from the destination pauses the key until then.
    paused_until: datetime | None = None


class FlowControlKeys(ApiModel):
    keys: list[FlowControlKey] = Field(default_factory=list)


class ForecastMinute(ApiModel):
    minute: datetime
    due: int = 0
    peak_second: int = 0
    by_tenant: dict[str, int] = Field(default_factory=dict)


class Forecast(ApiModel):
    """Occurrences due per minute (an upper bound: a cancelled job's pending timer counts until the sweep)."""

    start: datetime | None = None
    minutes: list[ForecastMinute] = Field(default_factory=list)
    total: int = 0
    peak_minute: datetime | None = None
    peak_due: int = 0
    timers_read: int = 0


class BulkFailure(ApiModel):
    """A job a bulk action could not change, and why."""

    job_id: str
    reason: str


class BulkOperation(ApiModel):
    """A bulk action's progress: `state` RUNNING (send the same request, with the same key, again to go on) or DONE
    (the final report: each matched job changed, already so, or in `failed` with its reason)."""

    operation_id: str
    action: str
    state: str
    selector: dict[str, Any] = Field(default_factory=dict)
    matched: int = 0
    processed: int = 0
    changed: int = 0
    unchanged: int = 0
    failed: list[BulkFailure] = Field(default_factory=list)


class QueueLoad(ApiModel):
    """One queue's messages (SQS's approximate counts)."""

    visible: int = 0
    in_flight: int = 0
    delayed: int = 0
    oldest_age_seconds: float | None = None


class LaneLoad(QueueLoad):
    """A priority lane's ready queue."""

    lane: str
    queue: str = ""


class OperatorStatus(ApiModel):
    """Every lane's load and the dispatch lag (`GET /v1/operator/status`, for operators): no job of any tenant."""

    checked_at: datetime
    watermark: datetime | None = None
    dispatch_lag_seconds: float | None = None
    largest_lag_seconds: float | None = None
    lanes: list[LaneLoad] = Field(default_factory=list)
    ready_queue: QueueLoad | None = None
    dead_letter_queue: QueueLoad | None = None
    recent: dict[str, float] = Field(default_factory=dict)
    recent_source: str = ""
    window_seconds: int = 0
    notes: list[str] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; pass `next_cursor` back to get the next one (None: this was the last)."""

    items: list[T]
    next_cursor: str | None


__all__ = [
    "ApiModel",
    "Backfill",
    "BackfillState",
    "BulkFailure",
    "BulkOperation",
    "CronSchedule",
    "EventBridgeTarget",
    "Forecast",
    "ForecastMinute",
    "HandlerTarget",
    "HttpTarget",
    "Job",
    "JobDefinition",
    "JobState",
    "LambdaTarget",
    "LaneLoad",
    "LastRun",
    "OnceSchedule",
    "OperatorStatus",
    "Page",
    "QueueLoad",
    "RateSchedule",
    "RetryPolicy",
    "Run",
    "RunHold",
    "RunState",
    "Schedule",
    "SigningKey",
    "SigningKeys",
    "SnsTarget",
    "SqsTarget",
    "StepFunctionsTarget",
    "Target",
    "Triggered",
]
