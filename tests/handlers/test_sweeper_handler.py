"""The sweeper Lambda with an EventBridge scheduled event: jobs created through the api handler reach the ready
queue, with a delay that never lets them out more than the rounding second before their fire time."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from scheduler.adapters.dispatch_message import dispatch_from_body
from scheduler.adapters.dynamodb import DynamoFanOutStore
from scheduler.adapters.sweep_launchers import helper_event
from scheduler.core.model.timefmt import ONE_MINUTE, minute_of, parse_rfc3339, rfc3339, truncate_ms
from scheduler.core.ports import Dispatch, HelperSweep
from scheduler.handlers import sweeper, wiring
from scheduler.handlers.local_invocation import LocalContext
from scheduler_local import sweep_helper
from scheduler_local.dev_keys import LOCAL_MESSAGE_KEY

pytestmark = [pytest.mark.emulator, pytest.mark.filterwarnings("ignore:No application metrics:UserWarning")]

TENANT = "arn:aws:iam::111111111111:user/alice"


def scheduled_event() -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": "123456789012",
        "time": rfc3339(datetime.now(UTC).replace(microsecond=0)),
        "region": "us-east-1",
        "resources": ["arn:aws:events:us-east-1:123456789012:rule/punctual-sweeper"],
        "detail": {},
    }


def create_once(api_call: Any, at: datetime) -> str:
    body = {"schedule": {"type": "once", "at": rfc3339(at)}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}}
    response = api_call("POST", "/v1/jobs", body, tenant=TENANT)
    assert response.status == 201, response.text
    return str(response.body["job_id"])


def receive(sqs_client: Any, queue_url: str, count: int, timeout: float) -> list[tuple[float, Dispatch]]:
    """Poll until `count` messages arrived; returns (arrival time, dispatch) pairs."""
    got: list[tuple[float, Dispatch]] = []
    deadline = time.time() + timeout
    while len(got) < count and time.time() < deadline:
        for m in sqs_client.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", []):
            got.append((time.time(), dispatch_from_body(m["Body"], LOCAL_MESSAGE_KEY)))
        time.sleep(0.05)
    return got


def test_sweep_sends_due_jobs_to_the_ready_queue(env, api_call, sqs_client) -> None:
    # Given a one-shot job due in 2.5 s, and one that was cancelled before it fell due
    at = truncate_ms(datetime.now(UTC) + timedelta(milliseconds=2500))
    job = create_once(api_call, at)
    cancelled = create_once(api_call, at)
    assert api_call("DELETE", f"/v1/jobs/{cancelled}", tenant=TENANT).status == 200

    # When the sweeper runs
    started = datetime.now(UTC)
    report = sweeper.lambda_handler(scheduled_event(), LocalContext("punctual-sweeper", 60))
    finished = datetime.now(UTC)

    # Then it dispatched the live job only, and moved the watermark past every bucket of its look-ahead
    assert report["dispatched"] == 1
    assert report["buckets_done"] > 0 and report["stopped_early"] is False
    lookahead = timedelta(seconds=300)  # Settings().lookahead_seconds
    watermark = parse_rfc3339(report["watermark"])
    assert minute_of(started + lookahead) + ONE_MINUTE <= watermark <= minute_of(finished + lookahead) + ONE_MINUTE
    [(arrived, dispatch)] = receive(sqs_client, env.ready_queue_url, 1, timeout=6)
    assert dispatch == Dispatch(job, TENANT, at, at, 1, "scheduled")
    # DelaySeconds rounds down: the message may come up to a second early (the worker waits), never sooner
    assert arrived >= at.timestamp() - 1.2
    # And the one-shot chain is complete, but the job says its occurrence is still on its way
    view = api_call("GET", f"/v1/jobs/{job}", tenant=TENANT).body
    assert view["state"] == "DISPATCHED"
    assert view["last_run"]["state"] == "QUEUED"
    assert view["last_dispatched_for"] == rfc3339(at)
    assert receive(sqs_client, env.ready_queue_url, 1, timeout=0.5) == []


def test_a_job_created_into_a_swept_bucket_is_dispatched_by_the_api(env, api_call, sqs_client) -> None:
    # Given a sweep that sealed every bucket up to its look-ahead
    report = sweeper.lambda_handler(scheduled_event(), LocalContext("punctual-sweeper", 60))
    assert report["dispatched"] == 0

    # When a job due in a second is created afterwards (its bucket is sealed: no sweep will query it again)
    at = truncate_ms(datetime.now(UTC) + timedelta(seconds=1))
    job = create_once(api_call, at)

    # Then the API dispatched it itself (docs/design.md §3.2), without another sweep
    [(_, dispatch)] = receive(sqs_client, env.ready_queue_url, 1, timeout=5)
    assert dispatch == Dispatch(job, TENANT, at, at, 1, "scheduled")
    # and a later sweep sends nothing twice from the late lane (it was drained once sent)
    again = sweeper.lambda_handler(scheduled_event(), LocalContext("punctual-sweeper", 60))
    assert again["late_drained"] == 0


def queue_depth(sqs_client: Any, queue_url: str) -> int:
    attributes = sqs_client.get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(attributes["ApproximateNumberOfMessagesDelayed"])


def test_a_recurring_job_is_dispatched_once_per_occurrence_and_its_chain_moves_on(
    env, api_call, sqs_client, dynamodb_client
) -> None:
    # Given a job that runs every minute
    body = {"schedule": {"type": "rate", "every_seconds": 60}, "target": {"type": "http", "url": "http://127.0.0.1:9/"}}
    created = api_call("POST", "/v1/jobs", body, tenant=TENANT).body
    job, created_at = created["job_id"], parse_rfc3339(created["created_at"])

    # When the sweeper runs twice in a row
    first = sweeper.lambda_handler(scheduled_event(), LocalContext("punctual-sweeper", 60))
    second = sweeper.lambda_handler(scheduled_event(), LocalContext("punctual-sweeper", 60))

    # Then the first sent every occurrence of its look-ahead (300 s, up to the end of the last bucket minute),
    # each once, and the second sent nothing again
    sent = first["dispatched"]
    assert 5 <= sent <= 6
    assert second["dispatched"] == 0
    assert queue_depth(sqs_client, env.ready_queue_url) == sent
    # And the chain moved past them: the job remembers the last one, and the next timer waits in its bucket
    view = api_call("GET", f"/v1/jobs/{job}", tenant=TENANT).body
    last = created_at + timedelta(seconds=60 * sent)
    assert (view["state"], view["last_dispatched_for"]) == ("ACTIVE", rfc3339(last))
    listed = dynamodb_client.query(
        TableName=env.jobs_table,
        IndexName="by_tenant",
        KeyConditionExpression="tenant_pk = :t",
        ExpressionAttributeValues={":t": {"S": f"TENANT#{TENANT}"}},
    )["Items"]
    # timers never show up in the tenant's job index (keys only: the job's own key)
    assert [j["PK"]["S"] for j in listed] == [f"JOB#{job}"]
    scanned = dynamodb_client.scan(
        TableName=env.jobs_table,
        FilterExpression="begins_with(PK, :due) AND job_id = :j",
        ExpressionAttributeValues={":due": {"S": "DUE#"}, ":j": {"S": job}},
        ConsistentRead=True,
    )["Items"]
    pending = sorted(int(t["sched_ms"]["N"]) for t in scanned)
    next_ms = int((last + timedelta(seconds=60)).timestamp() * 1000)
    assert pending[-1] == next_ms


class RecordingLauncher:
    def __init__(self) -> None:
        self.launched: list[HelperSweep] = []

    def launch(self, helper: HelperSweep) -> None:
        self.launched.append(helper)


def test_a_tick_fans_out_by_the_recorded_forecast_and_a_fan_out_sweep_sweeps_buckets_only(
    env, api_call, sqs_client
) -> None:
    # Given a forecast that saw 50,000 due two minutes ahead (more than two sweeps' budgets of 20,000)
    container = wiring.container(sweeper.metrics)
    launcher = RecordingLauncher()
    container.sweep_launcher = launcher
    now = datetime.now(UTC)
    DynamoFanOutStore(env.jobs_table, container.clients.dynamodb).record_forecast(
        {minute_of(now) + 2 * ONE_MINUTE: 50_000}, now
    )
    # and a job due in 2.5 s
    at = truncate_ms(datetime.now(UTC) + timedelta(milliseconds=2500))
    create_once(api_call, at)

    # When a tick runs, it starts two sweeps beside itself, and says so
    report = sweeper.lambda_handler(scheduled_event(), LocalContext("punctual-sweeper", 60))
    assert (report["fan_out"], report["fan_out_reason"], report["fan_out_due_in_window"]) == (3, "forecast", 50_000)
    assert [(h.index, h.sweeps) for h in launcher.launched] == [(1, 3), (2, 3)]
    assert len({h.tick for h in launcher.launched}) == 1 and launcher.launched[0].tick.startswith("sweeper/")
    assert report["dispatched"] == 1

    # And a fan-out sweep started with that event sweeps buckets only (nothing is left in them) and starts none
    helper = sweeper.lambda_handler(helper_event(launcher.launched[0]), LocalContext("punctual-sweeper", 60))
    assert helper["dispatched"] == 0 and helper["late_drained"] == 0
    assert helper["fan_out_index"] == 1 and "fan_out" not in helper
    assert len(launcher.launched) == 2


def test_a_local_fan_out_sweep_runs_the_handler_with_its_event(env, api_call, sqs_client, monkeypatch) -> None:
    # Given a job due in 2.5 s, in a bucket no sweep has sealed yet
    at = truncate_ms(datetime.now(UTC) + timedelta(milliseconds=2500))
    create_once(api_call, at)
    # When the local stack's fan-out process (what ProcessSweepLauncher runs) is started with a helper's event
    event = helper_event(HelperSweep("sweeper/tick", 1, 2))
    monkeypatch.setattr("sys.argv", ["sweep_helper", json.dumps(event)])
    summary = sweep_helper.main()
    # Then it swept the buckets as a fan-out sweep of that tick: the job is dispatched, the late lane left alone
    assert summary["fan_out_of"] == "sweeper/tick" and summary["dispatched"] == 1 and summary["late_drained"] == 0
    assert len(receive(sqs_client, env.ready_queue_url, 1, timeout=6)) == 1
