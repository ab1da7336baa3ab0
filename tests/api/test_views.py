"""The API's response views and the SDK's models that read them are one set of fields: every property of a view in
docs/openapi.json is a field of the SDK's matching model, and every field of the model is a property of the view (a
field the API never sends would always be its default; a property the SDK drops is lost to its users)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from punctual_sdk import models
from scheduler.handlers import api_models

SCHEMAS: dict[str, Any] = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())[
    "components"
]["schemas"]

#: View (component) -> the SDK model that reads it.
READ_BY_THE_SDK: dict[str, type[BaseModel]] = {
    "Job": models.Job,
    "LastRun": models.LastRun,
    "Run": models.Run,
    "RunHold": models.RunHold,
    "Backfill": models.Backfill,
    "Trigger": models.Triggered,
    "SigningKeys": models.SigningKeys,
    "SigningKey": models.SigningKey,
    "BulkOperation": models.BulkOperation,
    "BulkFailure": models.BulkFailure,
    "Forecast": models.Forecast,
    "ForecastMinute": models.ForecastMinute,
    "OperatorStatus": models.OperatorStatus,
    "QueueLoad": models.QueueLoad,
    "LaneLoad": models.LaneLoad,
    "FlowControlKey": models.FlowControlKey,
    "FlowControlKeys": models.FlowControlKeys,
}
#: Views the SDK reads otherwise, and why.
NOT_A_MODEL = {
    "Problem": "an error answer: the SDK raises it as a PunctualError subclass",
    "FieldProblem": "part of Problem",
    "JobBatchResults": "create_many returns each item as a Job or a PunctualError",
    "BatchResult": "part of JobBatchResults",
    "BulkSelector": "BulkOperation.selector is kept as the dict the request sent",
}


def _fields(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize("view", sorted(READ_BY_THE_SDK))
def test_each_view_and_its_sdk_model_have_the_same_fields(view: str) -> None:
    properties = set(SCHEMAS[view]["properties"])
    model = READ_BY_THE_SDK[view]

    assert sorted(properties - _fields(model)) == [], f"{model.__name__} lacks what the API sends"
    assert sorted(_fields(model) - properties) == [], f"{model.__name__} reads what the API does not send"


def test_every_response_view_is_read_by_an_sdk_model_or_says_why_not() -> None:
    declared = {view.__name__ for view in api_models.RESPONSE_VIEWS}
    nested = {ref.rsplit("/", 1)[1] for name in declared for ref in _refs(SCHEMAS[name])}
    views = (declared | nested | {"OperatorStatus"}) - _request_side()
    assert sorted(views - set(READ_BY_THE_SDK) - set(NOT_A_MODEL)) == []


def _refs(schema: Any) -> list[str]:
    if isinstance(schema, dict):
        own = [schema["$ref"]] if "$ref" in schema else []
        return own + [ref for value in schema.values() for ref in _refs(value)]
    if isinstance(schema, list):
        return [ref for value in schema for ref in _refs(value)]
    return []


def _request_side() -> set[str]:
    """JobSpec and what it is made of: the definition a Job view carries is the request's (the SDK's JobDefinition)."""
    return {"JobSpec", *(ref.rsplit("/", 1)[1] for ref in _refs(SCHEMAS["JobSpec"]))}
