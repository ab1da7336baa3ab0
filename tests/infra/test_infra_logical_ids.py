"""An existing deployment updates in place: the resources that hold state keep their logical ids.

CloudFormation replaces a resource whose logical id changes (a new table, a new secret: the old one deleted, or
orphaned where it is retained). This stack is made of the `Punctual` construct under the id `Default`, which CDK leaves
out of logical ids, so that they are what they were when the stack composed the same constructs itself.
"""

from __future__ import annotations

#: The logical ids an existing `punctual-<stage>` stack has deployed, by type (tables, secrets, keys, queues, logs,
#: bus): replacing any of them loses data or breaks what refers to it.
STATEFUL = {
    "AWS::DynamoDB::Table": {"StorageJobs4C7573CB", "StorageExecutions50E2CF2D"},
    "AWS::SecretsManager::Secret": {"SigningKeys20285B15", "SigningMessages8D9BB43F", "SigningSecretB5CF4F25"},
    "AWS::KMS::Key": {"HeaderSealingKeyF0FC4AFA", "MonitoringAlarmTopicKeyFFA45DC9"},
    "AWS::SQS::Queue": {
        "QueuesDeadLetterA4947A69",
        "QueuesReady36332AEC",
        "QueuesReadyHighEFA592A5",
        "QueuesReadyLow1D8A0226",
    },
    "AWS::Logs::LogGroup": {"ApiAccessLogs50B185DB", "ApiLogsB8F651F4", "SweeperLogsD9CA54BF", "WorkerLogs3BDAAB9F"},
    "AWS::Events::EventBus": {"CompletionEventsBusF19C6D83"},
}


def test_the_stateful_resources_keep_their_logical_ids(default, configured) -> None:
    for synthesized in (default, configured):
        for resource_type, logical_ids in STATEFUL.items():
            if resource_type == "AWS::Events::EventBus" and not synthesized.punctual.config.completion_events:
                continue
            assert set(synthesized.resources(resource_type)) == logical_ids, resource_type


def test_the_scheduler_construct_adds_no_level_to_the_logical_ids(default) -> None:
    # The construct's children sit one level under the stack, as far as logical ids go: `Storage/Jobs` -> StorageJobs...
    assert default.punctual.node.id == "Default"
    assert default.logical_id(default.punctual.storage.jobs_table).startswith("StorageJobs")
