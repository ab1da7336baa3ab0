"""The ready queue's message format (scheduler.adapters.dispatch_message): round trips, the job copy, the HMACs
the version before each change checks, and malformed bodies."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import timedelta
from typing import Any

import pytest

from scheduler.adapters.codec import (
    job_from_item,
    job_to_item,
)
from scheduler.adapters.dispatch_message import (
    PACKED_VERSION,
    MalformedMessage,
    UnauthenticatedMessage,
    dispatch_from_body,
    dispatch_to_body,
    dispatches_from_body,
    message_to_body,
)
from scheduler.core.model.job import JobState
from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import Dispatch
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY
from tests.adapters.test_codec import SCHEDULES, T0, job

# -- version 1 bodies ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["scheduled", "manual"])
def test_dispatch_body_round_trip(kind: str) -> None:
    dispatch = Dispatch("j1", "tenant-a", T0, T0 + timedelta(seconds=12, milliseconds=7), 7, kind)  # type: ignore[arg-type]
    body = dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)
    assert dispatch_from_body(body, LOCAL_MESSAGE_KEY) == dispatch
    raw = json.loads(body)
    assert raw["v"] == 1
    assert raw["occurrence_key"] == dispatch.key == "j1:2026-03-29T00:30:15.123Z"


def test_a_keyed_dispatch_carries_its_flow_control_key_and_release_signed_and_older_readers_ignore_them() -> None:
    release = T0 + timedelta(seconds=3, milliseconds=200)
    dispatch = Dispatch("j1", "tenant-a", T0, T0, 7, flow_key="payments-api", not_before=release)
    body = dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)

    assert dispatch_from_body(body, LOCAL_MESSAGE_KEY) == dispatch
    raw = json.loads(body)
    assert raw["flow"] == {"key": "payments-api", "release": "2026-03-29T00:30:18.323Z"}
    assert dispatch_from_body(
        json.dumps({k: v for k, v in raw.items() if k not in ("flow", "flow_mac")}), LOCAL_MESSAGE_KEY
    ) == Dispatch(
        "j1", "tenant-a", T0, T0, 7
    )  # what the mac covers is unchanged: a worker of the version before reads it without the flow
    raw["flow"]["release"] = rfc3339(T0)  # whoever could send to the queue cannot move a key's release
    with pytest.raises(UnauthenticatedMessage, match="flow-control key does not match"):
        dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY)
    unheld = Dispatch("j1", "tenant-a", T0, T0, 7, flow_key="payments-api")
    assert "release" not in json.loads(dispatch_to_body(unheld, LOCAL_MESSAGE_KEY))["flow"]


@pytest.mark.parametrize("schedule", ["once-at", "once-delay"])
def test_a_dispatch_body_carries_its_one_shot_jobs_copy_signed_with_it(schedule: str) -> None:
    copied = job(SCHEDULES[schedule], {"ratio": 0.1, "n": [1.5, 2]})
    advanced = {"last_dispatched_for": T0, "advanced_from": T0, "planned_version": 3, "planned_at": T0}
    update = {"state": JobState.COMPLETED, "completed_by_checkpoint": frozenset({"m"}), **advanced}
    copied = job_from_item(job_to_item(copied.model_copy(update=update)))  # as the advance's ALL_NEW reads it
    dispatch = Dispatch("j1", copied.tenant, T0, T0, copied.version, job_copy=copied)
    body = dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY)

    read = dispatch_from_body(body, LOCAL_MESSAGE_KEY)
    assert read == dispatch and read.job_copy == copied
    raw = json.loads(body)
    raw["job"]["spec"]["payload"]["ratio"] = 0.2  # whoever could send to the queue cannot change what it runs
    with pytest.raises(UnauthenticatedMessage, match="copy of the job does not match"):
        dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY)
    for dropped in ("job_mac", "mac"):
        without = {name: value for name, value in json.loads(body).items() if name != dropped}
        with pytest.raises(UnauthenticatedMessage):
            dispatch_from_body(json.dumps(without), LOCAL_MESSAGE_KEY)
    planted = json.loads(dispatch_to_body(Dispatch("j1", copied.tenant, T0, T0, copied.version), LOCAL_MESSAGE_KEY))
    planted["job"] = json.loads(body)["job"]  # a copy added to a message sent without one
    with pytest.raises(UnauthenticatedMessage, match="copy of the job"):
        dispatch_from_body(json.dumps(planted), LOCAL_MESSAGE_KEY)


def test_a_copy_of_another_job_or_version_is_malformed_even_when_signed() -> None:
    other = job({"type": "once", "delay_seconds": 90})
    for dispatch in (
        Dispatch("j2", other.tenant, T0, T0, other.version, job_copy=other),
        Dispatch("j1", other.tenant, T0, T0, other.version + 1, job_copy=other),
    ):
        with pytest.raises(MalformedMessage, match="copy of its job"):
            dispatch_from_body(dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY), LOCAL_MESSAGE_KEY)


@pytest.mark.parametrize("with_copy", [False, True])
def test_the_message_hmac_is_the_one_the_version_before_copies_checks(with_copy: bool) -> None:
    """`mac` covers the nine fields it covered before copies existed, with or without a copy: a worker of that
    version authenticates a message with a copy (it ignores the copy and reads the job), so neither an upgrade nor
    its rollback dead-letters a message; and the messages in flight from that version authenticate here."""
    copied = job({"type": "once", "delay_seconds": 90}) if with_copy else None
    dispatch = Dispatch("j1", "arn:aws:iam::123456789012:role/team", T0, T0, 3, job_copy=copied)
    raw = json.loads(dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY))
    nine = ("v", "occurrence_key", "job_id", "tenant", "scheduled_for", "fire_at", "version", "kind", "priority")
    signed = json.dumps([raw[name] for name in nine], separators=(",", ":")).encode()
    assert ("job" in raw) == with_copy
    assert raw["mac"] == hmac.new(LOCAL_MESSAGE_KEY, signed, hashlib.sha256).hexdigest()


def _body(**changes: Any) -> str:
    raw = json.loads(dispatch_to_body(Dispatch("j1", "tenant-a", T0, T0, 1), LOCAL_MESSAGE_KEY))
    for key, value in changes.items():
        if value is ...:
            raw.pop(key)
        else:
            raw[key] = value
    return json.dumps(raw)


@pytest.mark.parametrize(
    "body",
    [
        "",
        "not json",
        "{",
        "null",
        "[]",
        '"a string"',
        "42",
        _body(v=2),
        _body(v=...),
        _body(kind="cron"),
        _body(kind=...),
        _body(version="1"),
        _body(version=1.0),
        _body(version=True),
        _body(version=None),
        _body(job_id=""),
        _body(job_id="a:b"),
        _body(job_id=5),
        _body(job_id=...),
        _body(tenant=None),
        _body(tenant=...),
        _body(scheduled_for="2026-03-29T00:30:15"),  # no offset: ambiguous
        _body(scheduled_for="yesterday"),
        _body(scheduled_for=12345),
        _body(fire_at=...),
        _body(fire_at=None),
    ],
)
def test_malformed_bodies_are_rejected(body: str) -> None:
    with pytest.raises(MalformedMessage):
        dispatch_from_body(body, LOCAL_MESSAGE_KEY)


# -- compatibility ----------------------------------------------------------------------------------------------


def test_a_body_sent_before_priority_lanes_reads_as_normal() -> None:
    raw = json.loads(dispatch_to_body(Dispatch("j1", "tenant-a", T0, T0, 1, priority="high"), LOCAL_MESSAGE_KEY))
    del raw["priority"]
    nine = ("v", "occurrence_key", "job_id", "tenant", "scheduled_for", "fire_at", "version", "kind", "priority")
    signed = json.dumps([raw.get(name) for name in nine], separators=(",", ":")).encode()
    raw["mac"] = hmac.new(LOCAL_MESSAGE_KEY, signed, hashlib.sha256).hexdigest()
    assert dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY).priority == "normal"


def test_an_packed_message_carries_version_one_bodies_each_under_its_own_hmac() -> None:
    dispatches = [Dispatch(f"j{i}", "tenant-a", T0, T0, 1) for i in range(3)]
    raw = json.loads(message_to_body(dispatches, LOCAL_MESSAGE_KEY))
    assert raw["v"] == PACKED_VERSION == 2
    assert [json.loads(dispatch_to_body(d, LOCAL_MESSAGE_KEY)) for d in dispatches] == raw["occurrences"]
    assert dispatches_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY) == dispatches
    with pytest.raises(MalformedMessage):  # a reader of single dispatches does not run a packed message
        dispatch_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY)
    # one occurrence that fails its HMAC makes the whole message unreadable
    raw["occurrences"][1]["tenant"] = "tenant-b"
    with pytest.raises(UnauthenticatedMessage):
        dispatches_from_body(json.dumps(raw), LOCAL_MESSAGE_KEY)


@pytest.mark.parametrize("body", [{"v": 2, "occurrences": []}, {"v": 2}])
def test_a_packed_message_without_occurrences_is_malformed(body: dict[str, Any]) -> None:
    with pytest.raises(MalformedMessage):
        dispatches_from_body(json.dumps(body), LOCAL_MESSAGE_KEY)


def test_a_single_occurrence_is_sent_as_a_version_one_body() -> None:
    one = Dispatch("j1", "tenant-a", T0, T0, 1)
    assert message_to_body([one], LOCAL_MESSAGE_KEY) == dispatch_to_body(one, LOCAL_MESSAGE_KEY)
    assert dispatches_from_body(dispatch_to_body(one, LOCAL_MESSAGE_KEY), LOCAL_MESSAGE_KEY) == [one]
