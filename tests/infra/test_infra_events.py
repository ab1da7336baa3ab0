"""Completion events: the bus, the publish grants of the worker, the sweeper and the api, the sweeper's narrow
access to the ledger's outbox, the environment, and the outbox-backlog alarm."""

from __future__ import annotations

import json
from typing import Any

from punctual_cdk.events import OUTBOX_ATTRIBUTES, OUTBOX_INDEX
from scheduler.schema import EXECUTIONS_TABLE


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _put_events_statements(synthesized: Any, handler: str) -> list[dict[str, Any]]:
    return [s for s in synthesized.statements(handler) if "events:PutEvents" in _as_list(s["Action"])]


def test_the_stack_creates_its_own_bus_by_default(default) -> None:
    [bus] = default.resources("AWS::Events::EventBus").values()
    assert bus["Properties"]["Name"] == "punctual-dev-events"


def test_the_functions_that_record_outcomes_may_put_events_on_that_bus_only(default) -> None:
    # worker: every outcome it records; sweeper: the outbox drain; api: an operator's resolve of a RECONCILING run
    bus_id = default.logical_id(default.punctual.completion.bus)
    for handler in ("worker", "sweeper", "api"):
        [statement] = _put_events_statements(default, handler)
        assert statement["Resource"] == {"Fn::GetAtt": [bus_id, "Arn"]}


def test_the_sweeper_reads_only_the_outbox_index_and_updates_only_outbox_attributes(default) -> None:
    table_id = default.logical_id(default.punctual.storage.executions_table)
    on_ledger = [s for s in default.statements("sweeper") if table_id in json.dumps(s["Resource"])]

    by_action = {tuple(_as_list(s["Action"])): s for s in on_ledger}
    assert set(by_action) == {("dynamodb:Query",), ("dynamodb:UpdateItem",)}
    assert f"/index/{OUTBOX_INDEX}" in json.dumps(by_action[("dynamodb:Query",)]["Resource"])
    update = by_action[("dynamodb:UpdateItem",)]
    assert update["Condition"] == {"ForAllValues:StringEquals": {"dynamodb:Attributes": list(OUTBOX_ATTRIBUTES)}}
    # the attributes the drain writes are exactly those the ledger adapter clears (plus the key)
    assert set(OUTBOX_ATTRIBUTES) == {"PK", "outbox", "event_pending", "event_ms"}


def test_the_outbox_index_is_sparse_on_the_pending_flag(default) -> None:
    table = default.table(EXECUTIONS_TABLE)
    [index] = [i for i in table["GlobalSecondaryIndexes"] if i["IndexName"] == OUTBOX_INDEX]
    assert [k["AttributeName"] for k in index["KeySchema"]] == ["event_pending", "event_ms"]


def test_functions_get_the_bus_name(default) -> None:
    bus_id = default.logical_id(default.punctual.completion.bus)
    for handler in ("worker", "sweeper", "api"):
        _, props = default.function(handler)
        variables = props["Environment"]["Variables"]
        assert variables["SCHEDULER_EVENT_BUS_NAME"] == {"Ref": bus_id}
        assert variables["SCHEDULER_COMPLETION_EVENTS"] == "true"


def test_an_existing_bus_can_be_named_instead(synth) -> None:
    synthesized = synth({"event_bus_name": "default"})

    assert synthesized.resources("AWS::Events::EventBus") == {}
    [statement] = _put_events_statements(synthesized, "worker")
    assert json.dumps(statement["Resource"]).endswith(':event-bus/default"]]}')
    _, props = synthesized.function("worker")
    assert props["Environment"]["Variables"]["SCHEDULER_EVENT_BUS_NAME"] == "default"


def test_completion_events_can_be_turned_off(synth) -> None:
    synthesized = synth({"completion_events": False})

    for handler in ("worker", "sweeper"):
        assert _put_events_statements(synthesized, handler) == []
        _, props = synthesized.function(handler)
        assert props["Environment"]["Variables"]["SCHEDULER_COMPLETION_EVENTS"] == "false"


def test_outbox_backlog_alarm_fires_when_the_drain_keeps_finding_events(default) -> None:
    alarms = {
        a["Properties"]["AlarmName"]: a["Properties"] for a in default.resources("AWS::CloudWatch::Alarm").values()
    }
    alarm = alarms["punctual-dev-outbox-backlog"]

    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == ("Punctual", "OutboxBacklog", "Minimum")
    assert alarm["Threshold"] == 0
    assert alarm["EvaluationPeriods"] == alarm["DatapointsToAlarm"] == 5
    assert alarm["TreatMissingData"] == "notBreaching"
