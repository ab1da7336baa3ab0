"""`punctual status --via-api`: the operator's view read through the API (`GET /v1/operator/status`) shows what
`punctual status` shows when it reads AWS itself. Against the scripted API; no network."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from punctual_cli.status import QueueDepth, Status, from_operator_view, render
from punctual_sdk.models import OperatorStatus
from scheduler.handlers.api_operator import view
from tests.cli.fakes import FakeApi, problem, run

pytestmark = pytest.mark.usefixtures("no_network")

SNAPSHOT = Status(
    source="punctual-prod",
    checked_at=datetime(2026, 1, 5, 9, 0, 30, tzinfo=UTC),
    watermark=datetime(2026, 1, 5, 9, 5, tzinfo=UTC),
    dispatch_lag_seconds=0.0,
    largest_lag_seconds=4.0,
    ready_queue=QueueDepth(3, 1, 12, 7.5),
    lanes={"high": QueueDepth(0, 0, 0), "normal": QueueDepth(1, 1, 2, 7.5), "low": QueueDepth(2, 0, 10)},
    queues={"high": "p-ready-high", "normal": "p-ready", "low": "p-ready-low"},
    dead_letter_queue=QueueDepth(4, 0, 0),
    recent={"DeadLetters": 1.0, "FencedWrites": 0.0},
    recent_source="CloudWatch, last hour",
    notes=["a note"],
    problems=[],
)


def test_the_apis_view_of_a_snapshot_reads_back_as_the_same_snapshot() -> None:
    # The API's answer for a snapshot (the handler's own `view`), read by the CLI: every figure survives the trip
    answered = OperatorStatus.model_validate(view(SNAPSHOT))
    assert from_operator_view(answered, source=SNAPSHOT.source) == SNAPSHOT


def test_status_via_the_api_shows_what_status_shows_from_aws() -> None:
    api = FakeApi({"GET /v1/operator/status": (200, view(SNAPSHOT))})

    result = run("status", "--via-api", client=api.client())

    assert result.code == 0, result.err
    assert api.sent()[:2] == ("GET", "/v1/operator/status")
    expected = render(from_operator_view(OperatorStatus.model_validate(view(SNAPSHOT)), source=api.client().base_url))
    assert result.out.strip() == expected
    assert "  low lane         2 waiting, 0 in flight, 10 delayed; oldest message n/a" in result.out
    assert "dead-letter queue  4 waiting, 0 in flight, 0 delayed" in result.out
    assert "largest lag, 1 h   4s" in result.out


def test_status_via_the_api_in_json_has_the_shape_of_status_from_aws() -> None:
    api = FakeApi({"GET /v1/operator/status": (200, view(SNAPSHOT))})

    result = run("status", "--via-api", "--json", client=api.client())

    assert result.code == 0, result.err
    document = result.json()
    assert document == {**SNAPSHOT.to_json(), "source": api.client().base_url}


def test_a_principal_that_is_not_an_operator_is_told_which_setting_to_change() -> None:
    detail = "this principal is not an operator: tenant 't-bob' is not in the operators setting"
    api = FakeApi({"GET /v1/operator/status": problem(403, "Forbidden", detail)})

    result = run("status", "--via-api", client=api.client())

    assert result.code == 1 and "operators setting" in result.err
    assert result.out == ""
