"""Derived identities: occurrence keys, deterministic jitter, fire instants and shards.

All of these are pure functions of stable inputs. A retry, a duplicate or a re-dispatch of the same
occurrence must compute the same key, the same jitter and the same shard; nothing here is random.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from scheduler.core.model.timefmt import rfc3339


def occurrence_key(job_id: str, scheduled_for: datetime) -> str:
    """`{job_id}:{scheduled_for}`: the stable identity of one occurrence (docs/design.md §1).

    `scheduled_for` is the nominal instant, before jitter, so the key of the 09:00 run is the same on every
    attempt and every re-dispatch, and differs from the key of the 10:00 run.
    """
    return f"{job_id}:{rfc3339(scheduled_for)}"


def split_occurrence_key(key: str) -> tuple[str, str]:
    """Return `(job_id, scheduled_for)` from an occurrence key."""
    job_id, _, scheduled_for = key.partition(":")
    if not job_id or not scheduled_for:
        raise ValueError(f"not an occurrence key: {key!r}")
    return job_id, scheduled_for


def _hash_int(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def jitter_offset(key: str, jitter_seconds: int) -> timedelta:
    """A deterministic offset in `[0, jitter_seconds]` (millisecond steps) derived from the occurrence key.

    It spreads a herd of jobs due at the same instant, and a re-dispatch of the same occurrence lands on the
    same instant. Jitter only ever delays: an occurrence never starts before its scheduled time.
    """
    if jitter_seconds <= 0:
        return timedelta(0)
    return timedelta(milliseconds=_hash_int("jitter:" + key) % (jitter_seconds * 1000 + 1))


def fire_at(job_id: str, scheduled_for: datetime, jitter_seconds: int) -> datetime:
    """The instant an occurrence may start: its scheduled instant plus its deterministic jitter."""
    return scheduled_for + jitter_offset(occurrence_key(job_id, scheduled_for), jitter_seconds)


def shard_of(job_id: str, shard_count: int) -> int:
    """The bucket shard of a job: spreads a hot minute (everyone at :00) over `shard_count` partitions."""
    return _hash_int("shard:" + job_id) % shard_count
