"""The job view of the api Lambda while a one-shot's occurrence is in flight: DISPATCHED with its last
occurrence QUEUED once the sweeper has sent it, COMPLETED (last occurrence SUCCEEDED) once the worker has run it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.core.model.timefmt import rfc3339
from scheduler.handlers import sweeper
from scheduler.handlers.local_invocation import LocalContext

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")


def test_a_dispatched_one_shot_is_not_shown_completed_before_it_ran(api_call: Any) -> None:
    at = rfc3339(datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=3))
    created = api_call("POST", "/v1/jobs", {"schedule": {"type": "once", "at": at},
                                            "target": {"type": "http", "url": "http://127.0.0.1:9/hook"}})  # fmt: skip
    assert created.status == 201, created.text
    job_id = created.body["job_id"]
    assert created.body["state"] == "ACTIVE" and "last_run" not in created.body

    sweeper.lambda_handler({"source": "aws.events"}, LocalContext("punctual-sweeper", 60))

    view = api_call("GET", f"/v1/jobs/{job_id}").body
    assert view["state"] == "DISPATCHED"
    assert view["last_run"] == {"occurrence_key": f"{job_id}:{at}", "scheduled_for": at, "state": "QUEUED"}
    assert view["next_run_at"] == at
    assert api_call("GET", f"/v1/jobs/{job_id}/runs").body["runs"] == []
    listed = api_call("GET", "/v1/jobs?state=DISPATCHED").body["jobs"]
    assert [j["job_id"] for j in listed] == [job_id]
    assert api_call("GET", "/v1/jobs?state=COMPLETED").body["jobs"] == []
