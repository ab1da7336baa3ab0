"""Everything tests and scripts look up is a stack output."""

from __future__ import annotations

import json

EXPECTED = {
    "ApiUrl",
    "HealthUrl",
    "Region",
    "JobsTableName",
    "ExecutionsTableName",
    "ReadyQueueUrl",
    "ReadyQueueHighUrl",
    "ReadyQueueLowUrl",
    "DeadLetterQueueUrl",
    "AlarmTopicArn",
    "SigningKeysSecretArn",
    "MessageSecretArn",
    "DashboardName",
    "EventBusName",
    "EventBusArn",
    "ApiFunctionName",
    "SweeperFunctionName",
    "WorkerFunctionName",
}


def test_outputs_are_exactly_the_documented_ones(default, synth) -> None:
    assert set(default.json["Outputs"]) == EXPECTED
    # The v1 master secret is an output only while signature v1 is on (only then does the worker read it)
    v1 = synth({"signature_v1": True})
    assert set(v1.json["Outputs"]) == EXPECTED | {"SigningSecretArn"}
    assert v1.json["Outputs"]["SigningSecretArn"]["Value"] == {"Ref": v1.logical_id(v1.punctual.signing.secret)}


def test_outputs_point_at_the_right_resources(default) -> None:
    outputs = {key: output["Value"] for key, output in default.json["Outputs"].items()}
    scheduler = default.punctual

    assert outputs["JobsTableName"] == {"Ref": default.logical_id(scheduler.storage.jobs_table)}
    assert outputs["ExecutionsTableName"] == {"Ref": default.logical_id(scheduler.storage.executions_table)}
    assert outputs["ReadyQueueUrl"] == {"Ref": default.logical_id(scheduler.queues.ready_queue)}
    assert outputs["DeadLetterQueueUrl"] == {"Ref": default.logical_id(scheduler.queues.dead_letter_queue)}
    assert outputs["AlarmTopicArn"] == {"Ref": default.logical_id(scheduler.monitoring.topic)}
    assert outputs["SigningKeysSecretArn"] == {"Ref": default.logical_id(scheduler.signing.keys)}
    assert outputs["MessageSecretArn"] == {"Ref": default.logical_id(scheduler.signing.messages)}
    assert default.logical_id(scheduler.api.rest_api) in json.dumps(outputs["ApiUrl"])
    assert json.dumps(outputs["HealthUrl"]).endswith('"/v1/health"]]}')
    for handler in ("api", "sweeper", "worker"):
        function_id, _ = default.function(handler)
        assert outputs[f"{handler.capitalize()}FunctionName"] == {"Ref": function_id}
