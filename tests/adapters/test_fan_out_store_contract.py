"""FanOutStore contract (MemoryFanOutStore, DynamoFanOutStore on DynamoDB Local), and the sweep launchers: the event a
fan-out sweep is started with, an asynchronous invoke of the sweeper itself, a process locally."""

from __future__ import annotations

import json
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from scheduler.adapters.dynamodb import DynamoFanOutStore
from scheduler.adapters.memory.fan_out import MemoryFanOutStore
from scheduler.adapters.sweep_launchers import (
    HELPER_EVENT,
    LambdaSweepLauncher,
    ProcessSweepLauncher,
    helper_event,
    helper_of,
)
from scheduler.core.model.timefmt import ONE_MINUTE
from scheduler.core.ports import FanOutRecord, HelperSweep
from tests.adapters.conftest import BACKENDS, T0, jobs_table_store


@pytest.fixture(params=BACKENDS)
def fan_out_store(request: pytest.FixtureRequest) -> Any:
    return jobs_table_store(request, MemoryFanOutStore, DynamoFanOutStore)


def test_an_empty_store_reads_as_no_forecast_and_no_backlog(fan_out_store) -> None:
    assert fan_out_store.read() == FanOutRecord()


def test_the_forecast_and_the_backlog_are_kept_apart_and_each_replaced_whole(fan_out_store) -> None:
    fan_out_store.record_forecast({T0: 10, T0 + ONE_MINUTE: 500_000}, T0)
    fan_out_store.record_backlog(4, T0 + timedelta(seconds=5))
    fan_out_store.record_forecast({T0 + 2 * ONE_MINUTE: 7}, T0 + ONE_MINUTE)

    assert fan_out_store.read() == FanOutRecord(
        due={T0 + 2 * ONE_MINUTE: 7},
        forecast_at=T0 + ONE_MINUTE,
        backlog_sweeps=4,
        backlog_at=T0 + timedelta(seconds=5),
    )
    fan_out_store.record_forecast({}, T0 + 2 * ONE_MINUTE)
    assert fan_out_store.read().due == {}


def test_a_helper_event_round_trips_and_anything_else_is_a_tick() -> None:
    helper = HelperSweep("sweeper/abc", 3, 5)
    event = json.loads(json.dumps(helper_event(helper)))
    assert event["source"] == HELPER_EVENT
    assert helper_of(event) == helper
    assert helper_of({"source": "aws.events", "detail-type": "Scheduled Event"}) is None
    assert helper_of("not an event") is None


def test_the_lambda_launcher_invokes_the_sweeper_itself_asynchronously() -> None:
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    helper = HelperSweep("sweeper/tick", 1, 2)
    with Stubber(client) as stub:
        stub.add_response(
            "invoke",
            {"StatusCode": 202},
            {
                "FunctionName": "punctual-dev-Sweeper",
                "InvocationType": "Event",
                "Payload": json.dumps(helper_event(helper)).encode(),
            },
        )
        LambdaSweepLauncher(client, "punctual-dev-Sweeper").launch(helper)
        stub.add_client_error("invoke", "TooManyRequestsException", http_status_code=429)
        with pytest.raises(client.exceptions.TooManyRequestsException):
            LambdaSweepLauncher(client, "punctual-dev-Sweeper").launch(helper)


def test_the_process_launcher_starts_the_command_with_the_event_and_does_not_wait(tmp_path: Path) -> None:
    out = tmp_path / "event.json"
    script = f"import sys, time; time.sleep(0.3); open({str(out)!r}, 'w').write(sys.argv[1])"
    launcher = ProcessSweepLauncher([sys.executable, "-c", script])
    started = time.monotonic()
    launcher.launch(HelperSweep("tick", 2, 3))
    assert time.monotonic() - started < 0.3
    deadline = time.monotonic() + 10
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.1)
    assert helper_of(json.loads(out.read_text())) == HelperSweep("tick", 2, 3)


def test_the_lambda_launcher_makes_its_client_on_the_first_launch_only() -> None:
    made: list[Any] = []
    client = boto3.client("lambda", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")

    def make() -> Any:
        made.append(client)
        return client

    launcher = LambdaSweepLauncher(make, "punctual-dev-Sweeper")
    assert made == []  # a tick that starts nothing never makes a client
    with Stubber(client) as stub:
        stub.add_response("invoke", {"StatusCode": 202})
        stub.add_response("invoke", {"StatusCode": 202})
        launcher.launch(HelperSweep("t", 1, 3))
        launcher.launch(HelperSweep("t", 2, 3))
    assert made == [client]


def test_a_minute_is_claimed_for_a_launch_once_and_only_forward(fan_out_store) -> None:
    assert fan_out_store.claim_launch(T0 + ONE_MINUTE) is True
    assert fan_out_store.claim_launch(T0 + ONE_MINUTE) is False
    assert fan_out_store.claim_launch(T0) is False
    assert fan_out_store.claim_launch(T0 + 2 * ONE_MINUTE) is True
    # and it leaves the forecast and the backlog alone
    assert fan_out_store.read() == FanOutRecord()
