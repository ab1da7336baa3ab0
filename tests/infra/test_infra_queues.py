"""The ready queue and DLQ follow scheduler.schema.READY_QUEUE and the worker's timeout."""

from __future__ import annotations

from aws_cdk.assertions import Match

from scheduler.schema import READY_QUEUE

FOURTEEN_DAYS = 14 * 24 * 3600


def _queue(synthesized, construct) -> dict:
    return synthesized.json["Resources"][synthesized.logical_id(construct)]["Properties"]


def test_ready_queue_visibility_is_six_times_the_worker_timeout(default) -> None:
    ready = _queue(default, default.stack.queues.ready_queue)
    _, worker = default.function("worker")

    assert worker["Timeout"] == READY_QUEUE.worker_timeout_seconds
    assert ready["VisibilityTimeout"] == READY_QUEUE.visibility_timeout_seconds == 6 * worker["Timeout"]


def test_ready_queue_dead_letters_after_the_schema_receive_count(default) -> None:
    ready = _queue(default, default.stack.queues.ready_queue)
    dlq_id = default.logical_id(default.stack.queues.dead_letter_queue)

    assert ready["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": READY_QUEUE.max_receive_count,
    }


def test_dead_letter_queue_keeps_messages_fourteen_days(default) -> None:
    dlq = _queue(default, default.stack.queues.dead_letter_queue)

    assert READY_QUEUE.dlq_retention_days == 14
    assert dlq["MessageRetentionPeriod"] == FOURTEEN_DAYS


def test_ready_queue_outlives_a_long_worker_outage(default) -> None:
    # The SQS default (4 days) would drop dispatched occurrences during a longer outage.
    assert _queue(default, default.stack.queues.ready_queue)["MessageRetentionPeriod"] == FOURTEEN_DAYS


def test_both_queues_are_encrypted_and_refuse_plain_http(default) -> None:
    queues = default.resources("AWS::SQS::Queue")
    assert len(queues) == 2
    for queue in queues.values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True

    policies = default.resources("AWS::SQS::QueuePolicy")
    protected = set()
    for policy in policies.values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}:
                protected |= {queue["Fn::GetAtt"][0] for queue in _as_list(statement["Resource"])}
    assert protected == set(queues)


def test_queue_names_are_generated_not_fixed(default) -> None:
    default.template.has_resource_properties("AWS::SQS::Queue", {"QueueName": Match.absent()})


def _as_list(value):
    return value if isinstance(value, list) else [value]
