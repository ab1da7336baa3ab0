"""The API's responses as the client returns them: jobs, runs, backfills, a trigger, a page of a list."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

from pydantic import ValidationError

from scheduler.core.model import BackfillState, JobSpec, JobState, RunState
from scheduler.core.timefmt import parse_rfc3339


def instant_of(value: Any) -> datetime | None:
    return parse_rfc3339(value) if isinstance(value, str) and value else None


@dataclass(frozen=True)
class JobView:
    """A job as the API shows it: the definition plus what the scheduler tracks about it.

    `spec` is None only when the server sends a definition this client's `JobSpec` does not know (a newer
    server); `raw` always has the whole response.
    """

    job_id: str
    state: JobState
    version: int
    spec: JobSpec | None
    next_run_at: datetime | None
    next_runs: tuple[datetime, ...]
    created_at: datetime | None
    updated_at: datetime | None
    last_dispatched_for: datetime | None
    misfire_skipped: int
    replayed: bool
    raw: dict[str, Any] = field(repr=False)

    @property
    def name(self) -> str | None:
        return self.spec.name if self.spec else self.raw.get("name")

    @property
    def definition(self) -> dict[str, Any]:
        """The definition part of the response (the fields of `JobSpec`), as JSON."""
        return {k: v for k, v in self.raw.items() if k in JobSpec.model_fields}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> JobView:
        raw = dict(body)
        try:
            spec: JobSpec | None = JobSpec.model_validate({k: v for k, v in raw.items() if k in JobSpec.model_fields})
        except ValidationError:
            spec = None
        return cls(
            job_id=str(raw["job_id"]),
            state=JobState(raw["state"]),
            version=int(raw["version"]),
            spec=spec,
            next_run_at=instant_of(raw.get("next_run_at")),
            next_runs=tuple(t for t in (instant_of(v) for v in raw.get("next_runs") or []) if t is not None),
            created_at=instant_of(raw.get("created_at")),
            updated_at=instant_of(raw.get("updated_at")),
            last_dispatched_for=instant_of(raw.get("last_dispatched_for")),
            misfire_skipped=int(raw.get("misfire_skipped") or 0),
            replayed=bool(raw.get("replayed", False)),
            raw=raw,
        )


@dataclass(frozen=True)
class RunView:
    """One occurrence's run: its key, ledger state, attempts, times, last error and attempt history."""

    occurrence_key: str
    scheduled_for: datetime | None
    state: RunState
    attempts: int
    created_at: datetime | None
    updated_at: datetime | None
    finished_at: datetime | None
    next_attempt_at: datetime | None
    last_error: str | None
    result: Any
    history: list[Any]
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RunView:
        raw = dict(body)
        return cls(
            occurrence_key=str(raw["occurrence_key"]),
            scheduled_for=instant_of(raw.get("scheduled_for")),
            state=RunState(raw["state"]),
            attempts=int(raw.get("attempts") or 0),
            created_at=instant_of(raw.get("created_at")),
            updated_at=instant_of(raw.get("updated_at")),
            finished_at=instant_of(raw.get("finished_at")),
            next_attempt_at=instant_of(raw.get("next_attempt_at")),
            last_error=raw.get("last_error"),
            result=raw.get("result"),
            history=list(raw.get("history") or []),
            raw=raw,
        )


@dataclass(frozen=True)
class BackfillView:
    """A backfill of a past range and its progress (waves of at most `wave_size` occurrences, one per sweep)."""

    backfill_id: str
    job_id: str
    range_from: datetime | None
    range_to: datetime | None
    state: BackfillState
    total: int
    dispatched: int
    remaining: int
    waves: int
    waves_left: int
    wave_size: int
    last_dispatched_for: datetime | None
    created_at: datetime | None
    updated_at: datetime | None
    raw: dict[str, Any] = field(repr=False)

    @property
    def running(self) -> bool:
        """Still sending waves (COMPLETED and CANCELLED are final)."""
        return self.state == BackfillState.RUNNING

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> BackfillView:
        raw = dict(body)
        return cls(
            backfill_id=str(raw["backfill_id"]),
            job_id=str(raw.get("job_id") or ""),
            range_from=instant_of(raw.get("from")),
            range_to=instant_of(raw.get("to")),
            state=BackfillState(raw["state"]),
            total=int(raw.get("total") or 0),
            dispatched=int(raw.get("dispatched") or 0),
            remaining=int(raw.get("remaining") or 0),
            waves=int(raw.get("waves") or 0),
            waves_left=int(raw.get("waves_left") or 0),
            wave_size=int(raw.get("wave_size") or 0),
            last_dispatched_for=instant_of(raw.get("last_dispatched_for")),
            created_at=instant_of(raw.get("created_at")),
            updated_at=instant_of(raw.get("updated_at")),
            raw=raw,
        )


@dataclass(frozen=True)
class Triggered:
    """The extra occurrence `POST /v1/jobs/{id}/trigger` placed (it has its own occurrence key)."""

    job_id: str
    occurrence_key: str
    scheduled_for: datetime | None
    raw: dict[str, Any] = field(repr=False)


T = TypeVar("T")


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a listing; pass `next_cursor` back to get the next one (None: this was the last)."""

    items: list[T]
    next_cursor: str | None


# -- transport and auth -----------------------------------------------------------------------------------
