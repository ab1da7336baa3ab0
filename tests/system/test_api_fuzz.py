"""Generated bad input against the local API over HTTP: never a 5xx, always problem+json for errors, and a
rejected request never changes what is stored."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from harness import LocalStack
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.system

JSON_SCALARS = (
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=False) | st.text(max_size=30)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
FIELDS = [
    "name",
    "schedule",
    "target",
    "payload",
    "retry",
    "jitter_seconds",
    "misfire_policy",
    "overlap_policy",
    "delivery",
    "extra",
]
SCHEDULES = st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["once", "cron", "rate", "weekly"])},
        optional={
            "at": st.text(max_size=30),
            "delay_seconds": JSON_SCALARS,
            "expression": st.text(max_size=30),
            "timezone": st.text(max_size=20),
            "every_seconds": JSON_SCALARS,
            "start_at": JSON_SCALARS,
            "end_at": JSON_SCALARS,
        },
    ),
)
TARGETS = st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["http", "sqs", "sns", "lambda", "handler", "ftp"])},
        optional={
            "url": st.sampled_from(["http://127.0.0.1:1/x", "ftp://x", "not a url", "http://169.254.169.254/latest"])
            | st.text(max_size=20),
            "timeout_seconds": JSON_SCALARS,
            "name": st.text(max_size=10),
            "queue_url": st.text(max_size=10),
        },
    ),
)
BODIES = st.one_of(
    JSON_VALUES,
    st.fixed_dictionaries({}, optional={
        "schedule": SCHEDULES, "target": TARGETS, "payload": JSON_VALUES, "retry": JSON_VALUES,
        "jitter_seconds": JSON_SCALARS, "misfire_policy": JSON_SCALARS, "overlap_policy": JSON_SCALARS,
        "delivery": JSON_SCALARS, "name": JSON_SCALARS, "bogus": JSON_SCALARS}),
)  # fmt: skip
RAW = st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode))
PATHS = st.sampled_from(
    [
        "/v1/jobs",
        "/v1/jobs/nope",
        "/v1/jobs/nope/runs",
        "/v1/jobs/nope/pause",
        "/v1/jobs?limit=0",
        "/v1/jobs?limit=abc",
        "/v1/jobs?state=WHAT",
        "/v1/jobs?cursor=%%%",
        "/v1/jobs/nope/runs?cursor=zzz",
        "/v1/nothing",
        "/v1/jobs/x/runs/y/resolve",
    ]
)
METHODS = st.sampled_from(["GET", "POST", "PATCH", "DELETE", "PUT"])


def send(
    stack: LocalStack, method: str, path: str, data: bytes | None, content_type: str | None
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(stack.base + path, data=data, method=method)
    request.add_header("Authorization", "Bearer t-fuzz")
    if content_type:
        request.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def stored_jobs(stack: LocalStack) -> list[dict[str, Any]]:
    _, body, _ = stack.call("GET", "/v1/jobs?limit=100", token="t-fuzz")
    return body["jobs"]


def check(status: int, headers: dict[str, str], body: bytes) -> None:
    assert status < 500, body
    if status >= 400:
        assert headers.get("Content-Type", "").startswith("application/problem+json"), (status, headers)
        problem = json.loads(body)
        assert problem["status"] == status and problem["detail"], problem


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=BODIES)
def test_generated_job_bodies_never_cause_a_server_error_or_a_partial_write(stack: LocalStack, body: Any) -> None:
    before = stored_jobs(stack)
    status, headers, raw = send(stack, "POST", "/v1/jobs", json.dumps(body).encode(), "application/json")
    check(status, headers, raw)
    if status >= 400:
        assert stored_jobs(stack) == before
    else:
        stack.call("DELETE", f"/v1/jobs/{json.loads(raw)['job_id']}", token="t-fuzz")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(method=METHODS, path=PATHS, raw=RAW, content_type=st.sampled_from([None, "application/json", "text/plain"]))
def test_generated_requests_never_cause_a_server_error(
    stack: LocalStack, method: str, path: str, raw: bytes, content_type: str | None
) -> None:
    before = stored_jobs(stack)
    status, headers, body = send(stack, method, path, raw if method in ("POST", "PATCH", "PUT") else None, content_type)
    check(status, headers, body)
    if status >= 400:
        assert stored_jobs(stack) == before
