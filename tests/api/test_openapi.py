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


def test_the_routes_and_the_document_name_the_same_operations() -> None:
    """The decorators are the one list of routes; the document must describe exactly those (a route added without
    its description, or a description left after its route went, fails here)."""
    from scheduler.handlers.api import app

    routes = [*app._static_routes, *app._dynamic_routes]
    # The API's operations (the console's static files, outside /v1, are not API operations)
    registered = {(route.method.upper(), route.openapi_path) for route in routes if route.path.startswith("/v1/")}
    described = {(method.upper(), path) for path, operations in document()["paths"].items() for method in operations}
    assert registered == described
    json.dumps(document())  # serialisable


def test_the_405s_come_from_the_registered_routes() -> None:
    from scheduler.handlers.api import registered_routes

    routes = registered_routes()
    jobs = next(methods for pattern, methods in routes.items() if pattern.match("/v1/jobs/j1"))
    assert jobs == {"GET", "PATCH", "DELETE"}
