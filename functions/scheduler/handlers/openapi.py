"""The OpenAPI 3.1 document of the public API, generated from the same pydantic models that validate requests.

Its paths are rendered from the route table (`scheduler.handlers.api_routes`): each route's declaration, plus the
statuses its kind of route answers, added here by rule. The components are the models' schemas and the views below.
Served at `GET /v1/openapi.json` and checked in at `docs/openapi.json` (a test keeps the two identical):
`python -m scheduler.handlers.api_document > docs/openapi.json` regenerates it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter

from scheduler.core.jobs.bulk import BulkAction
from scheduler.core.jobs.signing_keys import DEFAULT_KEY_OVERLAP, MAX_KEY_OVERLAP
from scheduler.core.model.flow import FlowControl
from scheduler.core.model.job import MAX_NOTE, JobSpec
from scheduler.core.model.labels import MAX_SELECTORS
from scheduler.handlers import api_models as views
from scheduler.handlers.api_routes import NO_JOB

if TYPE_CHECKING:
    from scheduler.handlers.api_routes import Answer, Operation, Schema

REF = "#/components/schemas/{model}"


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def _page_of(model: str, key: str) -> dict[str, Any]:
    """A page of a list: its items under `key`, and the cursor of the next page (null on the last)."""
    return {
        "type": "object",
        "properties": {
            key: {"type": "array", "items": {"$ref": REF.format(model=model)}},
            "next_cursor": {"type": ["string", "null"]},
        },
    }


def _flow_limits() -> dict[str, Any]:
    """FlowControl's schema with `key` optional (a PUT names it in its path)."""
    schema = FlowControl.model_json_schema()
    schema["required"] = [name for name in schema.get("required", []) if name != "key"]
    if not schema["required"]:
        del schema["required"]
    schema.pop("title", None)
    return schema


def document(operations: Sequence[Operation]) -> dict[str, Any]:
    """The document of the declared routes (the api handler's are `scheduler.handlers.api_routes.route.operations`
    once `scheduler.handlers.api` has declared them)."""
    schemas: dict[str, Any] = {}
    _component(JobSpec, schemas)
    for view in views.RESPONSE_VIEWS:
        _component(view, schemas)
    # A job is its definition and the view's fields: one object with both sets of properties.
    job = schemas["Job"]
    job["properties"] = {**schemas["JobSpec"]["properties"], **job["properties"]}
    job["required"] = sorted({*job["required"], *schemas["JobSpec"].get("required", ())})
    schemas.update(
        {
            "JobList": _page_of("Job", "jobs"),
            "RunList": _page_of("Run", "runs"),
            "BackfillList": _page_of("Backfill", "backfills"),
        }
    )
    # The request bodies the handlers read field by field (JobSpec and BackfillRequest are models of their own).
    schemas.update(
        {
            "JobPatch": {
                "type": "object",
                "description": "A JSON merge patch (RFC 7386) of JobSpec: present fields replace, null removes.",
            },
            "SigningKeyRotation": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "overlap_seconds": {
                        "type": "integer",
                        "minimum": 0,
                        "maximum": int(MAX_KEY_OVERLAP.total_seconds()),
                        "default": int(DEFAULT_KEY_OVERLAP.total_seconds()),
                        "description": "how long the replaced key keeps signing (a second signature); 0 revokes it now",
                    },
                },
            },
            "FlowControlLimits": {
                **_flow_limits(),
                "description": "A flow-control key's limits: a job's flow_control, its key optional (the path's).",
            },
            "Resolve": {
                "type": "object",
                "required": ["outcome"],
                "additionalProperties": False,
                "properties": {
                    "outcome": {"enum": ["succeeded", "retry"]},
                    "note": {"type": "string", "minLength": 1, "maxLength": MAX_NOTE},
                },
            },
            "BulkRequest": {
                "type": "object",
                "required": ["action", "selector"],
                "additionalProperties": False,
                "properties": {
                    "action": {"enum": [a.value for a in BulkAction]},
                    "selector": {
                        "type": "object",
                        "required": ["labels"],
                        "additionalProperties": False,
                        "properties": {
                            "labels": {
                                "type": "object",
                                "minProperties": 1,
                                "maxProperties": MAX_SELECTORS,
                                "additionalProperties": {"type": "string"},
                                "description": "every label must match (an empty value: the key is present)",
                            }
                        },
                    },
                },
            },
            "JobBatch": {
                "type": "object",
                "required": ["items"],
                "additionalProperties": False,
                "properties": {
                    "items": {
                        "type": "array",
                        "minItems": 1,
                        "maxItems": 25,
                        # Each item is checked on its own (an invalid one gets its own 422 result, the others go on),
                        # so any value is a schema-valid item; a valid one is {"job": JobSpec, "idempotency_key"?}.
                        "items": {
                            "description": (
                                'an object {"job": <JobSpec>, "idempotency_key"?: <1-255 characters>}; anything else '
                                "is refused on its own with a 422 result, and the other items go on"
                            ),
                        },
                    }
                },
            },
        }
    )
    paths = _paths(operations, schemas)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "punctual scheduler API",
            "version": "1.0.0",
            "description": "Schedule work on AWS with exactly-once effects. Errors are RFC 9457 problem+json.",
        },
        "servers": [{"url": "http://127.0.0.1:8080", "description": "scripts/dev"}],
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "sigv4": {
                    "type": "apiKey",
                    "name": "Authorization",
                    "in": "header",
                    "description": "AWS SigV4 (IAM) on AWS",
                },
                "devToken": {"type": "http", "scheme": "bearer", "description": "SCHEDULER_DEV_TOKENS, local only"},
            },
        },
        "security": [{"sigv4": []}, {"devToken": []}],
        "paths": paths,
    }


#: Statuses any operation can answer, besides its own: declared on each, so a client knows every status it gets.
ANY_OPERATION = {
    "500": _problem("unexpected error; nothing was changed unless a 2xx was returned earlier"),
    "503": _problem("busy (the local stack) or throttled: retry after Retry-After"),
}
AUTHENTICATED = {
    "401": _problem("no or unknown credentials"),
    "403": _problem("a principal that cannot be a tenant (a federated user)"),
    # Every authenticated route counts against the caller's request limit (scheduler.core.tenancy.request_limits).
    "429": _problem("over the tenant's request limit (Retry-After: seconds to wait) or its active-job quota"),
}
WITH_INPUT = {
    "400": _problem(
        "malformed request: a missing or unparsable JSON body (or one nested more than 128 levels deep), or a "
        "malformed header (If-Match)"
    ),
    "422": _problem("invalid input: a field, a path or query parameter (a repeated one too), or a cursor"),
}
WITH_BODY = {"413": _problem("request body too large"), "415": _problem("not application/json")}
#: A route under a job answers 404 for a job the caller does not have; one that takes If-Match, 412 for a stale one.
UNDER_A_JOB = {"404": _problem(NO_JOB)}
CONDITIONAL = {"412": _problem("version mismatch")}


def _paths(operations: Sequence[Operation], schemas: dict[str, Any]) -> dict[str, Any]:
    """The document's paths: each documented operation as declared, with the statuses of its kind of route."""
    paths: dict[str, Any] = {}
    for operation in operations:
        if operation.documented:
            paths.setdefault(operation.path, {})[operation.method.lower()] = _operation(operation, schemas)
    return paths


def _operation(operation: Operation, schemas: dict[str, Any]) -> dict[str, Any]:
    where = f"{operation.method} {operation.rule}"
    described: dict[str, Any] = {"summary": operation.summary}
    if operation.description:
        described["description"] = operation.description
    if operation.public:
        described["security"] = []
    if operation.params:
        described["parameters"] = [param.openapi() for param in operation.params]
    if operation.body is not None:
        content = {"application/json": {"schema": _reference(operation.body, schemas, where)}}
        described["requestBody"] = {"required": operation.body_required, "content": content}
    responses = {str(status): _response(answer, schemas, where) for status, answer in operation.responses.items()}
    kinds = [ANY_OPERATION]
    if not operation.public:
        kinds.append(AUTHENTICATED)
    if operation.params or operation.body is not None:
        kinds.append(WITH_INPUT)
    if operation.body is not None:
        kinds.append(WITH_BODY)
    if any(param.name == "job_id" and param.where == "path" for param in operation.params):
        kinds.append(UNDER_A_JOB)
    if any(param.name == "If-Match" for param in operation.params):
        kinds.append(CONDITIONAL)
    for common in kinds:
        for status, response in common.items():
            responses.setdefault(status, response)
    described["responses"] = responses
    return described


def _response(answer: Answer, schemas: dict[str, Any], where: str) -> dict[str, Any]:
    if isinstance(answer, str):
        return _problem(answer)
    description, schema = answer
    if schema is None:
        return {"description": description}
    return {"description": description, "content": {"application/json": {"schema": _reference(schema, schemas, where)}}}


def _reference(schema: Schema, schemas: dict[str, Any], where: str) -> dict[str, str]:
    """A reference to `schema`'s component: a named one must exist; a model or TypedDict is added as one."""
    if isinstance(schema, type):
        name = _component(schema, schemas)
    elif isinstance(schema, str) and schema in schemas:
        name = schema
    else:
        raise ValueError(f"{where} names the schema {schema!r}, which is no component of the document")
    return {"$ref": REF.format(model=name)}


def _component(model: type, schemas: dict[str, Any]) -> str:
    """Add a pydantic model or a TypedDict as a component (its nested definitions beside it); its name."""
    if issubclass(model, BaseModel):
        schema = model.model_json_schema(ref_template=REF)
    else:
        schema = TypeAdapter(model).json_schema(ref_template=REF)
    for name, definition in {**schema.pop("$defs", {}), model.__name__: schema}.items():
        if schemas.setdefault(name, definition) != definition:
            raise ValueError(f"two different schemas are named {name} in the document")
    return model.__name__


def render(operations: Sequence[Operation]) -> str:
    return json.dumps(document(operations), indent=2, sort_keys=True) + "\n"
