"""The checked-in OpenAPI document is the one generated from the request models, and it describes them."""

from __future__ import annotations

import json
from pathlib import Path

from scheduler.core.model import JobSpec
from scheduler.openapi import document, render

ROOT = Path(__file__).resolve().parents[2]


def test_the_checked_in_document_matches_the_models() -> None:
    regenerate = "PYTHONPATH=functions .venv/bin/python -m scheduler.openapi > docs/openapi.json"
    assert (ROOT / "docs" / "openapi.json").read_text() == render(), f"docs/openapi.json is stale: run `{regenerate}`"


def test_the_job_schema_forbids_unknown_fields_like_the_api() -> None:
    spec = document()["components"]["schemas"]["JobSpec"]
    assert spec["additionalProperties"] is False
    assert set(spec["properties"]) == set(JobSpec.model_fields)


def test_every_route_of_the_api_is_described() -> None:
    from scheduler.handlers.api import _ROUTES

    paths = document()["paths"]
    for pattern, methods in _ROUTES:
        matching = [p for p in paths if pattern.match(p.replace("{job_id}", "j").replace("{occurrence_key}", "k"))]
        assert matching, pattern.pattern
        described = {m.upper() for p in matching for m in paths[p]}
        assert methods <= described, (pattern.pattern, methods, described)
    json.dumps(document())  # serialisable
