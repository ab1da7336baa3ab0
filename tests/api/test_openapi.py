"""The checked-in OpenAPI document is the one generated from the route table and the request models, and the
route table is the only way a route reaches the resolver."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from scheduler.core.model.ids import TOKEN_ID
from scheduler.core.model.job import BackfillRequest, JobSpec
from scheduler.handlers.api import route
from scheduler.handlers.api_routes import DeclaredResolver, Param, Routes, UndocumentedRoute
from scheduler.handlers.openapi import document, render

ROOT = Path(__file__).resolve().parents[2]


def test_the_checked_in_document_matches_the_models() -> None:
    regenerate = "PYTHONPATH=functions .venv/bin/python -m scheduler.handlers.api_document > docs/openapi.json"
    assert (ROOT / "docs" / "openapi.json").read_text() == render(route.operations), (
        f"docs/openapi.json is stale: run `{regenerate}`"
    )


def test_the_job_schema_forbids_unknown_fields_like_the_api() -> None:
    spec = document(route.operations)["components"]["schemas"]["JobSpec"]
    assert spec["additionalProperties"] is False
    assert set(spec["properties"]) == set(JobSpec.model_fields)


def test_the_routes_and_the_document_name_the_same_operations() -> None:
    """The route table is the one list of routes: the resolver dispatches exactly its operations and the document
    describes exactly its documented ones (the console's files, outside /v1, are no API operation)."""
    from scheduler.handlers.api import app, route

    resolved = {(r.method.upper(), r.openapi_path) for r in [*app._static_routes, *app._dynamic_routes]}
    declared = {(operation.method, operation.path) for operation in route.operations}
    assert resolved == declared
    api = {(operation.method, operation.path) for operation in route.operations if operation.documented}
    assert api == {(method, path) for method, path in declared if path.startswith("/v1/")}
    described = {
        (method.upper(), path)
        for path, operations in document(route.operations)["paths"].items()
        for method in operations
    }
    assert described == api
    json.dumps(document(route.operations))  # serialisable


def test_a_route_registered_without_its_declaration_fails_naming_it() -> None:
    from scheduler.handlers.api import app, route

    before = len(app._static_routes) + len(app._dynamic_routes)
    with pytest.raises(UndocumentedRoute, match=r"GET /v1/undeclared .*@route\.get"):
        app.get("/v1/undeclared")
    with pytest.raises(UndocumentedRoute, match="POST, PUT /v1/undeclared/<thing_id>"):
        app.route("/v1/undeclared/<thing_id>", ["POST", "PUT"])
    # A router's routes are registered through the same door when it is included
    router = APIGatewayRouter()
    router.get("/v1/routed")(lambda: None)
    with pytest.raises(UndocumentedRoute, match="GET /v1/routed"):
        app.include_router(router)
    assert len(app._static_routes) + len(app._dynamic_routes) == before == len(route.operations)


def _declared_operation() -> Routes:
    routes = Routes(DeclaredResolver())

    @routes.post(
        "/v1/things/<thing_id>/backfill",
        summary="a declared route",
        params=(Param.path("thing_id", "names the thing", rule=TOKEN_ID), Param.query("dry_run", {"type": "boolean"})),
        body=BackfillRequest,
        responses={202: ("accepted", "Job"), 404: "no such thing"},
    )
    def handler(thing_id: str) -> Response[str]:
        return Response(202, "application/json", "{}")

    return routes


def test_a_declaration_becomes_its_operation_with_the_statuses_of_its_kind() -> None:
    # Given one route declared on a table of its own
    routes = _declared_operation()

    # When its document is rendered
    rendered = document(routes.operations)

    # Then its operation says what the declaration says, and the statuses of an authenticated route with a body
    operation = rendered["paths"]["/v1/things/{thing_id}/backfill"]["post"]
    assert [(p["name"], p["in"], p.get("required")) for p in operation["parameters"]] == [
        ("thing_id", "path", True),
        ("dry_run", "query", None),
    ]
    assert operation["parameters"][0]["description"] == "names the thing"
    assert operation["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/BackfillRequest"
    }
    assert rendered["components"]["schemas"]["BackfillRequest"] == BackfillRequest.model_json_schema(
        ref_template="#/components/schemas/{model}"
    )
    assert operation["responses"]["404"]["description"] == "no such thing"
    assert set(operation["responses"]) == {"202", "404", "400", "401", "403", "413", "415", "422", "429", "500", "503"}
    assert "security" not in operation
    # And the resolver dispatches it
    assert routes.resolver._dynamic_routes[0].func.__name__ == "handler"


def test_a_public_route_without_input_has_only_the_statuses_any_route_has() -> None:
    routes = Routes(DeclaredResolver())
    routes.get("/v1/ping", summary="ping", public=True, responses={200: ("pong", None)})(lambda: None)

    operation = document(routes.operations)["paths"]["/v1/ping"]["get"]

    assert operation["security"] == []
    assert set(operation["responses"]) == {"200", "500", "503"}
    assert operation["responses"]["200"] == {"description": "pong"}


def test_a_declaration_that_cannot_be_true_is_refused() -> None:
    routes = Routes(DeclaredResolver())
    with pytest.raises(ValueError, match=r"path parameter\(s\) \['job_id'\]"):
        routes.get("/v1/things", summary="s", params=(Param.path("job_id"),), responses={200: ("ok", None)})
    with pytest.raises(ValueError, match="no successful response"):
        routes.get("/v1/things", summary="s", responses={404: "gone"})
    routes.get("/v1/things", summary="s", responses={200: ("ok", "NoSuchSchema")})(lambda: None)
    with pytest.raises(ValueError, match="GET /v1/things names the schema 'NoSuchSchema'"):
        document(routes.operations)
    with pytest.raises(ValueError, match="GET /v1/things is declared twice"):
        routes.get("/v1/things/", summary="again", responses={200: ("ok", None)})
    # A path parameter reaches a store's key: one without a rule is refused
    with pytest.raises(ValueError, match="path parameter 'thing_id' has no id rule"):
        routes.get("/v1/things/<thing_id>", summary="s", responses={200: ("ok", None)})


def test_every_id_in_a_path_or_a_cursor_declares_its_length_and_characters() -> None:
    rendered = json.loads(render(route.operations))
    checked = 0
    for path, operations in rendered["paths"].items():
        for method, operation in operations.items():
            for param in operation.get("parameters", []):
                if param["in"] == "path" or param["name"] == "cursor":
                    assert {"maxLength", "pattern"} <= set(param["schema"]), (method, path, param)
                    assert param["schema"]["maxLength"] <= 4096, (method, path, param)
                    checked += 1
    assert checked >= 20


def test_the_405s_come_from_the_route_table() -> None:
    from scheduler.handlers.api import registered_routes

    routes = registered_routes()
    jobs = next(methods for pattern, methods in routes.items() if pattern.match("/v1/jobs/j1"))
    assert jobs == {"GET", "PATCH", "DELETE"}
