"""The sweeper's step after each sweep (scheduler.handlers.prescaling): the forecast and its metric, and - when
pre-scaling is on - the worker mappings' pollers raised ahead of a herd, with nothing written twice."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.memory import MemoryPollerControl
from scheduler.core.model.timefmt import minute_of, rfc3339
from scheduler.handlers import prescaling, sweeper, wiring
from scheduler.handlers.local_invocation import LocalContext

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT = "arn:aws:iam::111111111111:user/alice"


@pytest.fixture
def pollers(env: Any, monkeypatch: pytest.MonkeyPatch) -> MemoryPollerControl:
    """Pre-scaling on, sized so that 40 occurrences in one second need 4 pollers (3 s each, 3 s to start them)."""
    monkeypatch.setenv("SCHEDULER_PRESCALE_ENABLED", "true")
    monkeypatch.setenv("SCHEDULER_PRESCALE_MAPPINGS", json.dumps({"normal": "esm-normal", "high": "esm-high"}))
    monkeypatch.setenv("SCHEDULER_PRESCALE_SECONDS_PER_OCCURRENCE", "3")
    monkeypatch.setenv("SCHEDULER_PRESCALE_CEILING_POLLERS", "20")
    wiring.container.cache_clear()
    control = MemoryPollerControl({"normal": 2, "high": 2})
    wiring.container(sweeper.metrics).poller_control = control
    return control


def sweep() -> dict[str, Any]:
    prescaling._last_minute.clear()  # the step runs once a minute per environment: these sweeps are a minute apart
    event = {"id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
    return sweeper.lambda_handler(event, LocalContext("punctual-sweeper", 60))


def herd(api_call: Any, count: int, at: datetime) -> None:
    body = {"schedule": {"type": "once", "at": rfc3339(at)}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}}
    for _ in range(count):
        assert api_call("POST", "/v1/jobs", body, tenant=TENANT).status == 201


def test_a_herd_inside_the_lead_raises_the_normal_lane_once(api_call, pollers: MemoryPollerControl) -> None:
    # Given 40 jobs due in the same second, three minutes ahead (inside the 5-minute lead)
    due = (minute_of(datetime.now(UTC)) + timedelta(minutes=3)).replace(second=20)
    herd(api_call, 40, due)
    # When the sweeper runs, twice
    first, second = sweep(), sweep()
    # Then the forecast saw the herd, the normal lane went to 4 pollers once, the high lane stayed
    assert first["forecast_peak_due"] == 40 and first["forecast_peak_minute"] == rfc3339(minute_of(due))
    assert pollers.writes == [("normal", 4)] and pollers.pollers == {"normal": 4, "high": 2}
    normal = next(c for c in first["prescale"] if c["lane"] == "normal")
    assert normal["from"] == 2 and normal["to"] == 4 and normal["applied"] and "40 due" in normal["reason"]
    assert all(c["from"] == c["to"] for c in second["prescale"])


def test_a_failing_mapping_call_never_fails_the_sweep(api_call, pollers: MemoryPollerControl) -> None:
    def refuse(lane: str) -> int | None:
        raise RuntimeError("AccessDenied")

    pollers.minimum_pollers = refuse  # type: ignore[method-assign]
    summary = sweep()
    assert "AccessDenied" in summary["prescale_error"] and "dispatched" in summary


def test_without_pre_scaling_the_forecast_still_runs(env, api_call) -> None:
    due = (minute_of(datetime.now(UTC)) + timedelta(minutes=4)).replace(second=5)
    herd(api_call, 3, due)
    summary = sweep()
    assert summary["forecast_peak_due"] == 3 and "prescale" not in summary


def test_the_step_runs_once_a_minute_per_environment(env, api_call) -> None:
    assert "forecast_peak_due" in sweep()
    first = prescaling._last_minute[0]
    event = {"id": str(uuid.uuid4()), "detail-type": "Scheduled Event", "source": "aws.events", "detail": {}}
    again = sweeper.lambda_handler(event, LocalContext("punctual-sweeper", 60))
    assert "dispatched" in again
    if prescaling._last_minute[0] == first:  # the second sweep came in the same minute: no forecast
        assert "forecast_peak_due" not in again
    else:  # a minute boundary fell between the sweeps: the new minute's forecast
        assert "forecast_peak_due" in again


def test_on_the_local_stack_the_sweeper_writes_the_pollers_the_worker_pool_reads(
    env, api_call, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from scheduler_local.prescale import FILE_NAME, forecast_workers

    monkeypatch.setenv("SCHEDULER_PRESCALE_ENABLED", "true")
    monkeypatch.setenv("SCHEDULER_PRESCALE_STATE_FILE", str(tmp_path / FILE_NAME))
    monkeypatch.setenv("SCHEDULER_PRESCALE_SECONDS_PER_OCCURRENCE", "3")
    wiring.container.cache_clear()
    due = (minute_of(datetime.now(UTC)) + timedelta(minutes=3)).replace(second=40)
    herd(api_call, 40, due)
    summary = sweep()
    assert {c["lane"]: c["to"] for c in summary["prescale"]} == {"high": 2, "low": 2, "normal": 4}
    assert forecast_workers(tmp_path, invocations_per_worker=5) == 4  # 2 pollers above the floor = 20 invocations
