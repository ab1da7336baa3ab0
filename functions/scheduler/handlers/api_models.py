"""The API's response views, declared once: the handlers build these (TypedDicts, so mypy holds every key and type)
and the OpenAPI document renders each as a component under its class name (`openapi._component`). The SDK's models
read the same views; `tests/api/test_views.py` keeps their fields and these properties one set.

A `Job` is its definition (`JobSpec`'s fields, as `secrecy.spec_view` shows them) and the fields below; the document
merges the two. The pages (`JobList`, `RunList`, `BackfillList`) are `openapi._page_of` of these views."""

from __future__ import annotations

from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field, WithJsonSchema
from typing_extensions import TypedDict

from scheduler.core.jobs.bulk import BulkAction, OperationState
from scheduler.core.model.job import BackfillState, JobState, RunState

#: An instant, RFC 3339 in UTC with `Z`.
Instant = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
OptionalInstant = Annotated[str | None, WithJsonSchema({"type": ["string", "null"], "format": "date-time"})]


def _named(description: str, schema: dict[str, Any] | None = None) -> Any:
    """A field's description (and, for a value the view holds as a plain string, the schema it follows)."""
    return WithJsonSchema({**schema, "description": description}) if schema else Field(description=description)


def _one_of(values: list[str]) -> dict[str, Any]:
    return {"type": "string", "enum": values}


class Health(TypedDict):
    """The liveness answer: the function runs and its routes are loaded."""

    status: Literal["ok"]


class LastRun(TypedDict):
    """A COMPLETED or DISPATCHED job's last occurrence; state QUEUED: dispatched, no run yet."""

    occurrence_key: str
    scheduled_for: OptionalInstant
    state: Annotated[
        str | None, WithJsonSchema({"type": ["string", "null"], "enum": ["QUEUED", *(s.value for s in RunState), None]})
    ]


class Job(TypedDict):
    """A job as the API shows it: its definition (JobSpec's fields) and what the scheduler tracks about it."""

    job_id: str
    state: Annotated[str, WithJsonSchema(_one_of([s.value for s in JobState]))]
    version: Annotated[int, Field(ge=1)]
    created_at: Instant
    updated_at: Instant
    next_run_at: OptionalInstant
    next_runs: NotRequired[Annotated[list[Instant], _named("the next occurrences, with ?preview=N")]]
    last_dispatched_for: OptionalInstant
    last_run: NotRequired[LastRun]
    misfire_skipped: int
    replayed: NotRequired[Annotated[bool, _named("true when an Idempotency-Key replay returned this job")]]


class RunHold(TypedDict):
    """What held a run back before its first attempt: its flow-control key (docs/flow-control.md, "What a held run
    shows")."""

    key: Annotated[str, _named("the flow-control key that held the run")]
    reasons: Annotated[
        list[str],
        _named(
            "which of the key's limits held it: rate (its calendar released it after its fire time, or start pacing), "
            "parallelism (every slot was taken), paused (its destination asked for a pause); more may come",
            {"type": "array", "items": {"type": "string"}},
        ),
    ]
    since: Annotated[Instant, _named("when the hold began: the run's fire time")]
    seconds: Annotated[
        float | None, _named("how long the key held it: from its fire time to its first attempt (null: not yet)")
    ]
    detail: Annotated[str, _named("the hold as people read it")]


class Run(TypedDict):
    """One occurrence's run: its key, ledger state, attempts, times, last error and history."""

    occurrence_key: str
    scheduled_for: Instant
    state: Annotated[str, WithJsonSchema(_one_of([s.value for s in RunState]))]
    attempts: int
    created_at: OptionalInstant
    updated_at: OptionalInstant
    finished_at: OptionalInstant
    next_attempt_at: OptionalInstant
    last_error: str | None
    result: str | None
    history: list[dict[str, Any]]
    held: Annotated[RunHold | None, _named("what held the run back before its first attempt (null: nothing)")]


class SigningKey(TypedDict):
    key_id: Annotated[str, _named("`<root>` (version 1) or `<root>.<version>`")]
    key: str
    version: Annotated[int, Field(ge=1)]
    expires_at: Annotated[
        str | None,
        _named(
            "when a replaced version stops signing; null for the current one",
            {"type": ["string", "null"], "format": "date-time"},
        ),
    ]


class SigningKeys(TypedDict):
    """The job's signature v2 keys (docs/security.md): verify X-Scheduler-Signature with them. The current version's
    keys come first; during a rotation's overlap the replaced version's follow, with the instant they stop signing."""

    job_id: str
    signature: Literal["v2"]
    algorithm: Literal["HMAC-SHA256"]
    current_key_id: str
    key_version: Annotated[int, Field(ge=1, description="the current version of the key")]
    keys: list[SigningKey]


class Trigger(TypedDict):
    """The extra occurrence a trigger placed (it has its own occurrence key)."""

    job_id: str
    occurrence_key: str
    scheduled_for: Instant


Backfill = TypedDict(
    "Backfill",
    {
        "backfill_id": str,
        "job_id": str,
        "from": Instant,
        "to": Instant,
        "state": Annotated[str, WithJsonSchema(_one_of([s.value for s in BackfillState]))],
        "total": Annotated[int, _named("occurrences in [from, to)")],
        "dispatched": int,
        "remaining": Annotated[int, _named("0 once cancelled")],
        "waves": Annotated[int, _named("waves sent so far")],
        "wave_size": Annotated[int, _named("occurrences per wave (one wave per sweep)")],
        "waves_left": int,
        "last_dispatched_for": OptionalInstant,
        "created_at": Instant,
        "updated_at": Instant,
    },
)
Backfill.__doc__ = "A backfill and its progress: it is sent in waves of at most wave_size per sweep."


class BulkFailure(TypedDict):
    job_id: str
    reason: str


class BulkSelector(TypedDict):
    labels: dict[str, str]


class BulkOperation(TypedDict):
    """A bulk action and its progress; every job ends changed, unchanged or in failed."""

    operation_id: str
    action: Annotated[str, WithJsonSchema(_one_of([a.value for a in BulkAction]))]
    selector: BulkSelector
    state: Annotated[str, WithJsonSchema(_one_of([s.value for s in OperationState]))]
    matched: Annotated[int, _named("jobs the selector matched")]
    processed: Annotated[int, _named("changed + unchanged + failed so far")]
    changed: int
    unchanged: Annotated[int, _named("already in the requested state")]
    failed: list[BulkFailure]


class FieldProblem(TypedDict):
    field: str
    message: str


class Problem(TypedDict):
    """RFC 9457 problem details, with the members a problem of its kind adds (`errors` on a 422)."""

    type: str
    title: str
    status: int
    detail: str
    errors: NotRequired[list[FieldProblem]]
    current_version: NotRequired[Annotated[int | None, _named("a 412's current version of the job")]]
    external_id: NotRequired[str]
    job_id: NotRequired[Annotated[str | None, _named("the job that holds the external id (a 409)")]]


class BatchResult(TypedDict):
    index: Annotated[int, _named("the item's position in the request")]
    status: Annotated[int, _named("201 created, 200 replayed, else the problem's status")]
    job: NotRequired[Job]
    problem: NotRequired[Problem]


class JobBatchResults(TypedDict):
    results: list[BatchResult]


class ForecastMinute(TypedDict):
    minute: Instant
    due: int
    peak_second: Annotated[int, _named("most due within one second of the minute")]
    by_tenant: dict[str, int]


class Forecast(TypedDict):
    """Occurrences due per minute from the stored timers and their schedules (an upper bound: a cancelled or edited
    job's pending timer counts until the sweep drops it)."""

    start: Instant
    minutes: list[ForecastMinute]
    total: int
    peak_minute: OptionalInstant
    peak_due: int
    timers_read: Annotated[int, _named("timers read to compute it (its cost)")]


#: Every response view the document declares as a component (besides those a route names by type, like Health).
class FlowControlKey(TypedDict):
    """A flow-control key of the caller's tenant (docs/flow-control.md): its limits (those of the most recent write
    naming it) and what it holds now."""

    key: str
    rate: Annotated[int | None, _named("calls started per period_seconds at most (null: no rate)")]
    period_seconds: int
    parallelism: Annotated[int | None, _named("calls in flight at once at most (null: no limit)")]
    max_backlog: Annotated[int | None, _named("occurrences held at most before a create or trigger gets a 429")]
    updated_at: Instant
    backlog: Annotated[int, _named("occurrences held by the key's rate whose release is still to come")]
    in_flight: Annotated[int, _named("calls of the key running now")]
    rate_last_minute: Annotated[float, _named("releases per second over the last minute")]
    oldest_held_lateness_seconds: Annotated[float, _named("how late the oldest held occurrence already is")]
    rate_factor: Annotated[
        float, _named("the fraction of its rate the key is held to after its destination pushed back (AIMD)")
    ]
    paused_until: Annotated[
        str | None,
        WithJsonSchema(
            {
                "type": ["string", "null"],
                "format": "date-time",
                "description": "a Retry-After from the destination pauses the key until then",
            }
        ),
    ]


class FlowControlKeys(TypedDict):
    """The caller's flow-control keys, by key."""

    keys: list[FlowControlKey]


RESPONSE_VIEWS: tuple[type, ...] = (
    Job,
    Run,
    SigningKeys,
    Trigger,
    Backfill,
    BulkOperation,
    JobBatchResults,
    Problem,
    Forecast,
    FlowControlKey,
    FlowControlKeys,
)
