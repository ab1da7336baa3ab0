"""Alarms notify the topic; the dashboard shows the application and AWS metrics."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match

from punctual_cdk.metrics import APPLICATION_METRICS


def _alarms(synthesized) -> dict[str, dict]:
    return {
        alarm["Properties"]["AlarmName"]: alarm["Properties"]
        for alarm in synthesized.resources("AWS::CloudWatch::Alarm").values()
    }


def test_dead_letter_queue_alarm_fires_on_any_visible_message(default) -> None:
    alarm = _alarms(default)["punctual-dev-dlq-not-empty"]

    assert alarm["Namespace"] == "AWS/SQS"
    assert alarm["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert alarm["Dimensions"] == [
        {
            "Name": "QueueName",
            "Value": {"Fn::GetAtt": [default.logical_id(default.punctual.queues.dead_letter_queue), "QueueName"]},
        }
    ]
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["Threshold"] == 0


def test_dispatch_lag_alarm_fires_after_three_minutes_over_two(default) -> None:
    alarm = _alarms(default)["punctual-dev-dispatch-lag"]

    assert (alarm["Namespace"], alarm["MetricName"]) == ("Punctual", "DispatchLagSeconds")
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "punctual"}]
    assert alarm["Statistic"] == "Maximum"
    assert alarm["Threshold"] == 120
    assert alarm["EvaluationPeriods"] == 3
    assert alarm["DatapointsToAlarm"] == 3
    # A sweeper that reports nothing is not running: that must alarm too.
    assert alarm["TreatMissingData"] == "breaching"


def test_ready_queue_age_alarm_allows_the_longest_delay_plus_slack(default) -> None:
    alarm = _alarms(default)["punctual-dev-ready-queue-backlog"]

    assert alarm["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert alarm["Dimensions"][0]["Value"] == {
        "Fn::GetAtt": [default.logical_id(default.punctual.queues.ready_queue), "QueueName"]
    }
    assert alarm["Threshold"] == 900 + 300


@pytest.mark.parametrize("handler", ["api", "sweeper", "worker"])
def test_each_function_has_an_error_rate_alarm(default, handler: str) -> None:
    alarm = _alarms(default)[f"punctual-dev-{handler}-errors"]
    function_id, _ = default.function(handler)

    metrics = {query["Id"]: query for query in alarm["Metrics"]}
    assert metrics["errors"]["MetricStat"]["Metric"]["MetricName"] == "Errors"
    assert metrics["errors"]["MetricStat"]["Metric"]["Dimensions"] == [
        {"Name": "FunctionName", "Value": {"Ref": function_id}}
    ]
    assert metrics["invocations"]["MetricStat"]["Metric"]["MetricName"] == "Invocations"
    (expression,) = [query for query in alarm["Metrics"] if "Expression" in query]
    assert "errors" in expression["Expression"] and "invocations" in expression["Expression"]
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"


def test_fenced_writes_alarm_is_informational(default) -> None:
    alarm = _alarms(default)["punctual-dev-fenced-writes"]

    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == ("Punctual", "FencedWrites", "Sum")
    assert alarm["Threshold"] == 0
    assert alarm["AlarmDescription"].startswith("Informational")


def test_every_alarm_notifies_the_alarm_topic(default) -> None:
    topic = {"Ref": default.logical_id(default.punctual.monitoring.topic)}
    alarms = _alarms(default)

    assert len(alarms) == 12
    for name, alarm in alarms.items():
        assert alarm["AlarmActions"] == [topic], name
        assert alarm["OKActions"] == [topic], name


def test_alarm_topic_is_encrypted_with_a_key_cloudwatch_may_use(default) -> None:
    (topic,) = default.resources("AWS::SNS::Topic").values()
    key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
    key = default.json["Resources"][key_id]["Properties"]

    assert key["EnableKeyRotation"] is True
    statements = key["KeyPolicy"]["Statement"]
    assert any(
        statement.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
        and {"kms:Decrypt", "kms:GenerateDataKey*"} <= set(statement["Action"])
        for statement in statements
    )
    default.template.has_resource_properties(
        "AWS::SNS::TopicPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Allow",
                                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                                "Action": "sns:Publish",
                            }
                        )
                    ]
                )
            }
        },
    )


def test_alarm_email_is_subscribed_only_when_configured(default, configured) -> None:
    assert default.resources("AWS::SNS::Subscription") == {}
    configured.template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "oncall@example.com"}
    )


def test_dashboard_shows_every_application_metric_and_the_queues(default) -> None:
    (dashboard,) = default.resources("AWS::CloudWatch::Dashboard").values()
    body = json.dumps(dashboard["Properties"]["DashboardBody"])

    for metric in APPLICATION_METRICS:
        assert f'\\"{metric}\\"' in body, metric
    for queue in (default.punctual.queues.ready_queue, default.punctual.queues.dead_letter_queue):
        assert default.logical_id(queue) in body
    assert "ApproximateAgeOfOldestMessage" in body


def test_the_fan_out_alarms_on_sweeps_not_started_and_on_sweeps_lambda_dropped(default) -> None:
    alarms = _alarms(default)
    failures = alarms["punctual-dev-sweep-fan-out-failures"]
    assert (failures["Namespace"], failures["MetricName"], failures["Statistic"]) == (
        "Punctual",
        "SweepFanOutFailures",
        "Sum",
    )
    dropped = alarms["punctual-dev-sweep-fan-out-dropped"]
    sweeper_id, _ = default.function("sweeper")
    assert (dropped["Namespace"], dropped["MetricName"]) == ("AWS/Lambda", "AsyncEventsDropped")
    assert dropped["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": sweeper_id}}]
    assert failures["Threshold"] == dropped["Threshold"] == 0
