"""The ready queue's message format: what the API, the sweeper and redrive send and the worker reads.

A message is versioned by its `v` field, and every version a deployed sender may still have in flight stays
readable, because an upgrade and its rollback run old and new functions side by side over the same queues:

- **version 1**: one occurrence - `occurrence_key`, `job_id`, `tenant`, `scheduled_for`, `fire_at`, `version`, `kind`
  and `priority` (absent before priority lanes: read as `normal`), and `mac`, the HMAC-SHA256 of those nine fields
  under the message key. A body without `mac` is refused unless the upgrade window accepts unsigned messages; a
  wrong `mac` always is.
- **the job copy** (optional, in a version-1 body): `job`, the job's definition at `version`, and `job_mac` over the
  nine fields and the copy. `mac` covers exactly what it covered before copies existed, so a worker of that version
  authenticates a message with a copy, ignores the copy and reads the job.
- **the flow-control key** (optional, in a version-1 body): `flow`, `{"key": ..., "release": ...}`: the job's
  flow-control key and, when it released the occurrence later than `fire_at`, that instant; and `flow_mac` over the
  nine fields and it. The worker starts the occurrence no sooner than its release (a message lands up to a second
  early, SQS counting its delay in whole seconds). A worker of the version before ignores both.
- **version 2, the packed message**: `{"v": 2, "occurrences": [version-1 bodies]}`, each occurrence under its own `mac`;
  one that fails makes the whole message unreadable (its sender signs them all at once). A worker of a version
  before packed messages dead-letters one unrun, and redrive splits it into a message per occurrence.

Changing this format means adding a version that the previous release can at least dead-letter without running,
and reading every older one: tests/adapters/test_dispatch_message.py holds the compatibility cases.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from scheduler.core.model.job import Job, Priority
from scheduler.core.model.timefmt import parse_rfc3339, rfc3339
from scheduler.core.ports import Dispatch

#: The fields of a dispatch message its HMAC covers, in this order (every field but the HMAC itself).
_MAC_FIELDS = ("v", "occurrence_key", "job_id", "tenant", "scheduled_for", "fire_at", "version", "kind", "priority")
_MAC_FIELD = "mac"


def message_key(secret: str) -> bytes:
    """The HMAC key of dispatch messages, from the message secret (SCHEDULER_MESSAGE_SECRET)."""
    return hashlib.sha256(b"punctual dispatch message\x00" + secret.encode()).digest()


#: The message's copy of its job (`Dispatch.job_copy`) and its own HMAC, over the fields `mac` covers and the copy.
#: `mac` stays what it was before copies existed, so a worker of that version authenticates a message with a copy,
#: ignores the copy and reads the job (an upgrade, or its rollback, loses no message).
_COPY_FIELD = "job"
_COPY_MAC_FIELD = "job_mac"
#: A keyed dispatch's flow-control key and its release (`Dispatch.not_before`), and their own HMAC.
_FLOW_FIELD = "flow"
_FLOW_MAC_FIELD = "flow_mac"


def _message_mac(key: bytes, raw: dict[str, Any], *, with_copy: bool = False, with_flow: bool = False) -> str:
    values = [raw.get(name) for name in _MAC_FIELDS]
    if with_copy:
        values.append(raw.get(_COPY_FIELD))
    if with_flow:
        values.append(raw.get(_FLOW_FIELD))
    signed = json.dumps(values, separators=(",", ":"))
    return hmac.new(key, signed.encode(), hashlib.sha256).hexdigest()


def dispatch_to_body(dispatch: Dispatch, key: bytes) -> str:
    """A ready-queue body: the dispatch and its HMAC under `key` (only holders of the message secret - the API,
    the sweeper, the worker and redrive - can write one the worker runs)."""
    return json.dumps(_dispatch_raw(dispatch, key), separators=(",", ":"))


#: The body version of a packed message, one that carries several occurrences (scheduler.core.execution.packing): `{"v":
#: 2, "occurrences": [...]}`, each a version-1 body with its own HMAC. A worker of a version before packed messages
#: reads such a message as malformed and dead-letters it unrun (redrive sends its occurrences back one a message).
PACKED_VERSION = 2


def message_to_body(dispatches: Sequence[Dispatch], key: bytes) -> str:
    """The body of a ready-queue message that carries `dispatches`: a version-1 body for one, a packed message's
    for more."""
    if len(dispatches) == 1:
        return dispatch_to_body(dispatches[0], key)
    raw = {"v": PACKED_VERSION, "occurrences": [_dispatch_raw(d, key) for d in dispatches]}
    return json.dumps(raw, separators=(",", ":"))


def _dispatch_raw(dispatch: Dispatch, key: bytes) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "v": 1,
        "occurrence_key": dispatch.key,
        "job_id": dispatch.job_id,
        "tenant": dispatch.tenant,
        "scheduled_for": rfc3339(dispatch.scheduled_for),
        "fire_at": rfc3339(dispatch.fire_at),
        "version": dispatch.version,
        "kind": dispatch.kind,
        "priority": dispatch.priority,
    }
    raw[_MAC_FIELD] = _message_mac(key, raw)
    if dispatch.flow_key is not None:
        flow: dict[str, str] = {"key": dispatch.flow_key}
        if dispatch.not_before is not None and dispatch.not_before > dispatch.fire_at:
            flow["release"] = rfc3339(dispatch.not_before)
        raw[_FLOW_FIELD] = flow
        raw[_FLOW_MAC_FIELD] = _message_mac(key, raw, with_flow=True)
    if dispatch.job_copy is not None:
        raw[_COPY_FIELD] = dispatch.job_copy.model_dump(mode="json", exclude_none=True)
        raw[_COPY_MAC_FIELD] = _message_mac(key, raw, with_copy=True)
    return raw


class MalformedMessage(ValueError):
    """A ready-queue body that is not a dispatch; it can never succeed, so it goes to the DLQ."""


class UnauthenticatedMessage(MalformedMessage):
    """A ready-queue body whose HMAC is missing or wrong: forged, planted, or sent with another key. Never run;
    dead-lettered (and redrive refuses it too)."""


def dispatch_from_body(body: str, key: bytes | None, *, accept_unsigned: bool = False) -> Dispatch:
    """The dispatch of a ready-queue body, authenticated with `key` (UnauthenticatedMessage when its HMAC does not
    hold). `key=None` reads without authenticating: for inspection only, never for running it. `accept_unsigned`
    (the upgrade window) lets a body with no HMAC at all through; a wrong HMAC is refused whatever it says."""
    return _dispatch_from_raw(_json_of(body), key, accept_unsigned)


def dispatches_from_body(body: str, key: bytes | None, *, accept_unsigned: bool = False) -> list[Dispatch]:
    """The occurrences a ready-queue message carries: one for a version-1 body, each of a packed message's (every one
    authenticated as `dispatch_from_body` does; one that fails makes the whole message unreadable: the sender
    signs them all at once, so a message with one bad occurrence was tampered with)."""
    raw = _json_of(body)
    if isinstance(raw, dict) and raw.get("v") == PACKED_VERSION:
        occurrences = raw.get("occurrences")
        if not isinstance(occurrences, list) or not occurrences:
            raise MalformedMessage("a packed message without occurrences")
        return [_dispatch_from_raw(one, key, accept_unsigned) for one in occurrences]
    return [_dispatch_from_raw(raw, key, accept_unsigned)]


def _json_of(body: str) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeError) as exc:
        raise MalformedMessage(f"malformed dispatch message: {exc}") from exc


def _dispatch_from_raw(raw: Any, key: bytes | None, accept_unsigned: bool) -> Dispatch:
    try:
        if not isinstance(raw, dict) or raw.get("v") != 1:
            raise MalformedMessage("not a version-1 dispatch message")
        if key is not None:
            given = raw.get(_MAC_FIELD)
            if given is None and not accept_unsigned:
                raise UnauthenticatedMessage("unauthenticated dispatch message: it carries no HMAC (not sent by us)")
            if given is not None and (
                not isinstance(given, str) or not hmac.compare_digest(_message_mac(key, raw).encode(), given.encode())
            ):
                raise UnauthenticatedMessage(
                    "unauthenticated dispatch message: its HMAC does not match (forged, or sent with another key)"
                )
            copy_mac = raw.get(_COPY_MAC_FIELD)
            if (_COPY_FIELD in raw or copy_mac is not None) and (
                not isinstance(copy_mac, str)
                or not hmac.compare_digest(_message_mac(key, raw, with_copy=True).encode(), copy_mac.encode())
            ):
                raise UnauthenticatedMessage(
                    "unauthenticated dispatch message: the HMAC of its copy of the job does not match (forged, or "
                    "sent with another key)"
                )
            flow_mac = raw.get(_FLOW_MAC_FIELD)
            if (_FLOW_FIELD in raw or flow_mac is not None) and (
                not isinstance(flow_mac, str)
                or not hmac.compare_digest(_message_mac(key, raw, with_flow=True).encode(), flow_mac.encode())
            ):
                raise UnauthenticatedMessage(
                    "unauthenticated dispatch message: the HMAC of its flow-control key does not match (forged, or "
                    "sent with another key)"
                )
        kind = raw["kind"]
        if kind not in ("scheduled", "manual", "backfill"):
            raise MalformedMessage(f"unknown kind {kind!r}")
        version = raw["version"]
        if not isinstance(version, int) or isinstance(version, bool):
            raise MalformedMessage("version must be an integer")
        job_id, tenant = raw["job_id"], raw["tenant"]
        if not isinstance(job_id, str) or not isinstance(tenant, str) or not job_id or ":" in job_id:
            raise MalformedMessage("job_id and tenant must be strings")
        priority = raw.get("priority", "normal")  # absent in messages sent before lanes existed
        if priority not in ("high", "normal", "low"):
            raise MalformedMessage(f"unknown priority {priority!r}")
        flow_key, release = _flow_of(raw.get(_FLOW_FIELD))
        job_copy = None
        if _COPY_FIELD in raw:
            job_copy = Job.model_validate(raw[_COPY_FIELD])
            if job_copy.job_id != job_id or job_copy.tenant != tenant or job_copy.version != version:
                raise MalformedMessage("the message's copy of its job is not of its job and version")
        return Dispatch(
            job_id=job_id,
            tenant=tenant,
            scheduled_for=parse_rfc3339(raw["scheduled_for"]),
            fire_at=parse_rfc3339(raw["fire_at"]),
            version=version,
            kind=kind,
            priority=cast(Priority, priority),
            flow_key=flow_key,
            not_before=release,
            job_copy=job_copy,
        )
    except MalformedMessage:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError) as exc:
        raise MalformedMessage(f"malformed dispatch message: {exc}") from exc


def _flow_of(flow: Any) -> tuple[str | None, datetime | None]:
    """The flow-control key and release a body's `flow` carries (none without one)."""
    if flow is None:
        return None, None
    if not isinstance(flow, dict) or not isinstance(flow.get("key"), str):
        raise MalformedMessage("flow must be an object with a key")
    release = flow.get("release")
    return flow["key"], parse_rfc3339(release) if isinstance(release, str) else None
