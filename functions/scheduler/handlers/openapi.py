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

from scheduler.core.capacity.forecast import VIEW_SCHEMA as FORECAST_SCHEMA
from scheduler.core.jobs.bulk import BulkAction, OperationState
from scheduler.core.jobs.service import DEFAULT_KEY_OVERLAP, MAX_KEY_OVERLAP
from scheduler.core.model.job import MAX_NOTE, BackfillState, JobSpec, JobState, RunState
from scheduler.core.model.labels import MAX_SELECTORS
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


def _job_schema(spec_schema: dict[str, Any]) -> dict[str, Any]:
    properties = dict(spec_schema.get("properties", {}))
    properties.update(
        {
            "job_id": {"type": "string"},
            "state": {"type": "string", "enum": [s.value for s in JobState]},
            "version": {"type": "integer", "minimum": 1},
            "created_at": {"type": "string", "format": "date-time"},
            "updated_at": {"type": "string", "format": "date-time"},
            "next_run_at": {"type": ["string", "null"], "format": "date-time"},
            "next_runs": {"type": "array", "items": {"type": "string", "format": "date-time"}},
            "last_dispatched_for": {"type": ["string", "null"], "format": "date-time"},
            "last_run": {
                "type": "object",
                "description": "a COMPLETED or DISPATCHED job's last occurrence; state QUEUED: dispatched, no run yet",
                "properties": {
                    "occurrence_key": {"type": "string"},
                    "scheduled_for": {"type": "string", "format": "date-time"},
                    "state": {"type": "string", "enum": ["QUEUED", *(s.value for s in RunState)]},
                },
            },
            "misfire_skipped": {"type": "integer"},
            "replayed": {"type": "boolean", "description": "true when an Idempotency-Key replay returned this job"},
        }
    )
    required = ["job_id", "state", "version", "schedule", "target"]
    return {"type": "object", "properties": properties, "required": required}


def document(operations: Sequence[Operation]) -> dict[str, Any]:
    """The document of the declared routes (the api handler's are `scheduler.handlers.api_routes.route.operations`
    once `scheduler.handlers.api` has declared them)."""
    spec: dict[str, Any] = {}
    _component(JobSpec, spec)
    schemas: dict[str, Any] = {
        **spec,
        "Job": _job_schema(spec["JobSpec"]),
        "JobPatch": {
            "type": "object",
            "description": "A JSON merge patch (RFC 7386) of JobSpec: present fields replace, null removes.",
        },
        "JobList": _page_of("Job", "jobs"),
        "Run": {
            "type": "object",
            "properties": {
                "occurrence_key": {"type": "string"},
                "scheduled_for": {"type": "string", "format": "date-time"},
                "state": {"type": "string", "enum": [s.value for s in RunState]},
                "attempts": {"type": "integer"},
                "created_at": {"type": ["string", "null"], "format": "date-time"},
                "updated_at": {"type": ["string", "null"], "format": "date-time"},
                "finished_at": {"type": ["string", "null"], "format": "date-time"},
                "next_attempt_at": {"type": ["string", "null"], "format": "date-time"},
                "last_error": {"type": ["string", "null"]},
                "result": {"type": ["string", "null"]},
                "history": {"type": "array", "items": {"type": "object"}},
            },
        },
        "SigningKeys": {
            "type": "object",
            "description": (
                "The job's signature v2 keys (docs/security.md): verify X-Scheduler-Signature with them. The current "
                "version's keys come first; during a rotation's overlap the replaced version's follow, with the "
                "instant they stop signing."
            ),
            "properties": {
                "job_id": {"type": "string"},
                "signature": {"const": "v2"},
                "algorithm": {"const": "HMAC-SHA256"},
                "current_key_id": {"type": "string"},
                "key_version": {"type": "integer", "minimum": 1, "description": "the current version of the key"},
                "keys": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "key_id": {"type": "string", "description": "`<root>` (version 1) or `<root>.<version>`"},
                            "key": {"type": "string"},
                            "version": {"type": "integer", "minimum": 1},
                            "expires_at": {
                                "type": ["string", "null"],
                                "format": "date-time",
                                "description": "when a replaced version stops signing; null for the current one",
                            },
                        },
                        "required": ["key_id", "key", "version", "expires_at"],
                    },
                },
            },
            "required": ["job_id", "signature", "algorithm", "current_key_id", "key_version", "keys"],
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
        "RunList": _page_of("Run", "runs"),
        "Trigger": {
            "type": "object",
            "properties": {
                "job_id": {"type": "string"},
                "occurrence_key": {"type": "string"},
                "scheduled_for": {"type": "string", "format": "date-time"},
            },
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
        "Backfill": {
            "type": "object",
            "description": "A backfill and its progress: it is sent in waves of at most wave_size per sweep",
            "properties": {
                "backfill_id": {"type": "string"},
                "job_id": {"type": "string"},
                "from": {"type": "string", "format": "date-time"},
                "to": {"type": "string", "format": "date-time"},
                "state": {"type": "string", "enum": [s.value for s in BackfillState]},
                "total": {"type": "integer", "description": "occurrences in [from, to)"},
                "dispatched": {"type": "integer"},
                "remaining": {"type": "integer", "description": "0 once cancelled"},
                "waves": {"type": "integer", "description": "waves sent so far"},
                "wave_size": {"type": "integer", "description": "occurrences per wave (one wave per sweep)"},
                "waves_left": {"type": "integer"},
                "last_dispatched_for": {"type": ["string", "null"], "format": "date-time"},
                "created_at": {"type": "string", "format": "date-time"},
                "updated_at": {"type": "string", "format": "date-time"},
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
        "BulkOperation": {
            "type": "object",
            "description": "A bulk action and its progress; every job ends changed, unchanged or in failed",
            "properties": {
                "operation_id": {"type": "string"},
                "action": {"enum": [a.value for a in BulkAction]},
                "selector": {"type": "object"},
                "state": {"enum": [s.value for s in OperationState]},
                "matched": {"type": "integer", "description": "jobs the selector matched"},
                "processed": {"type": "integer", "description": "changed + unchanged + failed so far"},
                "changed": {"type": "integer"},
                "unchanged": {"type": "integer", "description": "already in the requested state"},
                "failed": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"job_id": {"type": "string"}, "reason": {"type": "string"}},
                    },
                },
            },
        },
        "BackfillList": _page_of("Backfill", "backfills"),
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
                            'an object {"job": <JobSpec>, "idempotency_key"?: <1-255 characters>}; anything else is '
                            "refused on its own with a 422 result, and the other items go on"
                        ),
                    },
                }
            },
        },
        "JobBatchResults": {
            "type": "object",
            "properties": {
                "results": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["index", "status"],
                        "properties": {
                            "index": {"type": "integer", "description": "the item's position in the request"},
                            "status": {
                                "type": "integer",
                                "description": "201 created, 200 replayed, else the problem's status",
                            },
                            "job": {"$ref": REF.format(model="Job")},
                            "problem": {"$ref": "#/components/schemas/Problem"},
                        },
                    },
                }
            },
        },
        "Problem": {
            "type": "object",
            "description": "RFC 9457 problem details",
            "properties": {
                "type": {"type": "string"},
                "title": {"type": "string"},
                "status": {"type": "integer"},
                "detail": {"type": "string"},
                "errors": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
                    },
                },
            },
            "required": ["title", "status", "detail"],
        },
    }
    schemas["Forecast"] = FORECAST_SCHEMA
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
