"""The ready queue and DLQ follow scheduler.schema.READY_QUEUE and the worker's timeout."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from scheduler.schema import READY_LANES, READY_QUEUE

FOURTEEN_DAYS = 14 * 24 * 3600


def _queue(synthesized, construct) -> dict:
    return synthesized.json["Resources"][synthesized.logical_id(construct)]["Properties"]


def test_ready_queue_visibility_is_six_times_the_worker_timeout(default) -> None:
    ready = _queue(default, default.punctual.queues.ready_queue)
    _, worker = default.function("worker")

    assert worker["Timeout"] == READY_QUEUE.worker_timeout_seconds
    assert ready["VisibilityTimeout"] == READY_QUEUE.visibility_timeout_seconds == 6 * worker["Timeout"]


def test_ready_queue_dead_letters_after_the_schema_receive_count(default) -> None:
    ready = _queue(default, default.punctual.queues.ready_queue)
    dlq_id = default.logical_id(default.punctual.queues.dead_letter_queue)

    assert ready["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": READY_QUEUE.max_receive_count,
    }


def test_dead_letter_queue_keeps_messages_fourteen_days(default) -> None:
    dlq = _queue(default, default.punctual.queues.dead_letter_queue)

    assert READY_QUEUE.dlq_retention_days == 14
    assert dlq["MessageRetentionPeriod"] == FOURTEEN_DAYS


def test_ready_queue_outlives_a_long_worker_outage(default) -> None:
    # The SQS default (4 days) would drop dispatched occurrences during a longer outage.
    assert _queue(default, default.punctual.queues.ready_queue)["MessageRetentionPeriod"] == FOURTEEN_DAYS


def test_every_queue_is_encrypted_and_refuses_plain_http(default) -> None:
    queues = default.resources("AWS::SQS::Queue")
    assert len(queues) == 4  # three priority lanes and the DLQ
    for queue in queues.values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True

    policies = default.resources("AWS::SQS::QueuePolicy")
    protected = set()
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}:
                protected |= {queue["Fn::GetAtt"][0] for queue in _as_list(statement["Resource"])}
    assert protected == set(queues)


def test_every_lane_is_a_ready_queue_sharing_the_dlq(default) -> None:
    dlq_id = default.logical_id(default.punctual.queues.dead_letter_queue)
    lanes = default.punctual.queues.lanes

    assert set(lanes) == set(READY_LANES) == {"high", "normal", "low"}
    assert lanes["normal"] is default.punctual.queues.ready_queue
    for priority, queue in lanes.items():
        props = _queue(default, queue)
        assert props["VisibilityTimeout"] == READY_LANES[priority].visibility_timeout_seconds
        assert props["MessageRetentionPeriod"] == FOURTEEN_DAYS
        assert props["RedrivePolicy"]["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}


@pytest.mark.parametrize("handler", ["api", "sweeper"])
def test_api_and_sweeper_send_to_every_lane_and_the_worker_consumes_them(default, handler: str) -> None:
    for queue in default.punctual.queues.lanes.values():
        assert "sqs:SendMessage" in default.actions_on(handler, queue)
        assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:ChangeMessageVisibility"} <= default.actions_on(
            "worker", queue
        )


def test_each_lane_has_a_backlog_alarm(default) -> None:
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"] for a in default.resources("AWS::CloudWatch::Alarm").values()
    }
    lanes = default.punctual.queues.lanes
    for name, lane in (("ready-queue", "normal"), ("ready-high", "high"), ("ready-low", "low")):
        alarm = alarms[f"punctual-dev-{name}-backlog"]
        assert alarm["MetricName"] == "ApproximateAgeOfOldestMessage"
        assert alarm["Dimensions"][0]["Value"] == {"Fn::GetAtt": [default.logical_id(lanes[lane]), "QueueName"]}
        assert alarm["Threshold"] == 900 + 300


def test_queue_names_are_generated_not_fixed(default) -> None:
    default.template.all_resources_properties("AWS::SQS::Queue", {"QueueName": Match.absent()})


def _as_list(value):
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("handler", ["api", "sweeper", "worker"])
def test_every_function_knows_the_lane_queues(default, handler: str) -> None:
    _, props = default.function(handler)
    variables = props["Environment"]["Variables"]
    lanes = default.punctual.queues.lanes

    assert variables["SCHEDULER_READY_QUEUE_HIGH_URL"] == {"Ref": default.logical_id(lanes["high"])}
    assert variables["SCHEDULER_READY_QUEUE_LOW_URL"] == {"Ref": default.logical_id(lanes["low"])}
