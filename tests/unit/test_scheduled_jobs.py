"""Jobs as code, the pure parts: a declaration read from a custom resource's properties, and the merge patch that
makes a job exactly what it declares (scheduler.ops.scheduled_jobs)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from scheduler.adapters.signed_api import ApiAnswer
from scheduler.core.jobs.secrecy import spec_view
from scheduler.core.model.job import JobSpec, merge_patch
from scheduler.core.model.labels import MANAGED_BY_LABEL
from scheduler.ops.scheduled_jobs import Declaration, DeclarationError, definition_patch, stack_external_id

DEFINITION = {
    "schedule": {"type": "cron", "expression": "0 2 * * *", "timezone": "Europe/Berlin"},
    "target": {"type": "http", "url": "https://example.com/hooks/nightly", "headers": {"Authorization": "Bearer s"}},
    "payload": {"report": "daily"},
    "labels": {"team": "orders"},
}


def shown(definition: dict[str, Any]) -> dict[str, Any]:
    """The job's view as `GET /v1/jobs/{id}` shows it: defaults filled in, secrets REDACTED, the view's own fields."""
    return {"job_id": "j1", "version": 3, "state": "ACTIVE", **spec_view(JobSpec.model_validate(definition))}


def properties(**changes: Any) -> dict[str, Any]:
    return {
        "Definition": json.dumps(DEFINITION),
        "ExternalId": stack_external_id("orders", "Nightly"),
        "ManagedBy": "cdk.orders",
        **changes,
    }


def test_a_declaration_adds_its_ownership_to_the_definition() -> None:
    declared = Declaration.of(properties())
    spec = declared.spec()
    assert spec["external_id"] == "cdk.orders:Nightly"
    assert spec["labels"] == {"team": "orders", MANAGED_BY_LABEL: "cdk.orders"}
    assert {k: v for k, v in spec.items() if k not in ("external_id", "labels")} == {
        k: v for k, v in DEFINITION.items() if k != "labels"
    }


@pytest.mark.parametrize(
    ("props", "reason"),
    [
        ({"Definition": None}, "Definition is not JSON"),
        ({"Definition": "[1, 2]"}, "is not a JSON object"),
        ({"Definition": json.dumps({**DEFINITION, "external_id": "x"})}, "external_id is the stack's to set"),
        ({"Definition": json.dumps({**DEFINITION, "labels": {MANAGED_BY_LABEL: "x"}})}, "is the stack's to set"),
        ({"ExternalId": "cdk.orders:" + "N" * 130}, "external_id must be 1-128"),
        ({"ManagedBy": "cdk." + "x" * 70}, "the value must be empty or 1-63"),
    ],
)
def test_properties_that_are_not_a_declaration_are_refused(props: dict[str, Any], reason: str) -> None:
    with pytest.raises(DeclarationError, match=reason):
        Declaration.of(properties(**props))


def test_a_missing_property_is_named() -> None:
    props = properties()
    del props["ManagedBy"]
    with pytest.raises(DeclarationError, match="no ManagedBy property"):
        Declaration.of(props)


def test_a_job_that_is_as_declared_needs_no_patch_whatever_defaults_it_shows() -> None:
    spec = {**DEFINITION, "target": {"type": "http", "url": "https://example.com/hooks/nightly"}}
    assert definition_patch(shown(spec), spec) == {}


def test_the_patch_makes_the_stored_definition_exactly_the_declared_one() -> None:
    stored = {**DEFINITION, "retry": {"max_attempts": 9}, "labels": {"team": "orders", "tier": "gold"}}
    wanted = {
        "schedule": {"type": "rate", "every_seconds": 900},  # another kind of schedule
        "target": {
            "type": "http",
            "url": "https://example.com/hooks/nightly",
            "headers": {"Authorization": "Bearer s"},
        },
        "labels": {"team": "billing"},  # a label gone, one changed
        # no payload, no retry: the API's defaults
    }

    patch = definition_patch(shown(stored), wanted)

    # Applied to what is stored (as the API applies it), it gives the declaration with the API's defaults
    result = JobSpec.model_validate(merge_patch(JobSpec.model_validate(stored).model_dump(mode="json"), patch))
    assert result == JobSpec.model_validate(wanted)
    assert patch["schedule"] == {"type": "rate", "every_seconds": 900, "expression": None, "timezone": None}
    assert patch["payload"] is None
    # The secret header is REDACTED in the read, so it is sent again (its value unchanged)
    assert patch["target"] == {"headers": {"Authorization": "Bearer s"}}


def test_an_answer_tells_its_problem_as_the_api_detailed_it() -> None:
    answer = ApiAnswer(422, {"title": "Unprocessable Content", "detail": "schedule.expression: 61 is not a minute"})
    assert answer.problem == "422 Unprocessable Content: schedule.expression: 61 is not a minute"
    assert ApiAnswer(0, {"title": "No answer", "detail": "timed out"}).problem == "No answer: timed out"
    assert not answer.ok and ApiAnswer(201).ok
