"""Generated bodies against the worker's message parsing: any text either parses to a dispatch that survives a
round trip, or is refused as MalformedMessage - never another exception that would fail the whole batch."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.adapters.dispatch_message import MalformedMessage, dispatch_from_body, dispatch_to_body
from scheduler.core.ports import Dispatch
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
FIELDS = {
    "v": st.sampled_from([1, 2, "1", None]) | SCALARS,
    "job_id": st.sampled_from(["job-1", "", "a:b"]) | SCALARS,
    "tenant": st.sampled_from(["alice"]) | SCALARS,
    "scheduled_for": st.sampled_from(["2030-01-07T09:00:00Z", "2030-01-07T09:00:00", "yesterday"]) | SCALARS,
    "fire_at": st.sampled_from(["2030-01-07T09:00:01.250Z", "2030-13-45T99:00:00Z"]) | SCALARS,
    "version": st.sampled_from([1, 7, True, "3"]) | SCALARS,
    "kind": st.sampled_from(["scheduled", "manual", "other"]) | SCALARS,
}
MESSAGES = st.fixed_dictionaries({}, optional=FIELDS)  # type: ignore[arg-type]


def check(body: str) -> None:
    try:
        dispatch = dispatch_from_body(body, LOCAL_MESSAGE_KEY)
    except MalformedMessage:
        return
    assert dispatch_from_body(dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY), LOCAL_MESSAGE_KEY) == dispatch


@settings(max_examples=400, deadline=None)
@given(message=MESSAGES)
def test_generated_dispatch_shaped_bodies_parse_or_are_refused_as_malformed(message: dict[str, Any]) -> None:
    check(json.dumps(message))


@settings(max_examples=300, deadline=None)
@given(body=st.text(max_size=200) | VALUES.map(json.dumps))
def test_arbitrary_text_parses_or_is_refused_as_malformed(body: str) -> None:
    check(body)


@given(seconds=st.integers(0, 10**9), millis=st.integers(0, 999), version=st.integers(1, 10**6))
def test_every_real_dispatch_round_trips(seconds: int, millis: int, version: int) -> None:
    at = datetime(2000, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds, milliseconds=millis)
    dispatch = Dispatch("job-1", "arn:aws:iam::111111111111:user/alice", at, at + timedelta(seconds=3), version)
    assert dispatch_from_body(dispatch_to_body(dispatch, LOCAL_MESSAGE_KEY), LOCAL_MESSAGE_KEY) == dispatch
