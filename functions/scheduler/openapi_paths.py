"""The paths of the OpenAPI document (scheduler.openapi): every route the API's decorators register, described
with its parameters, bodies and statuses (a test fails when the two name different operations)."""

from __future__ import annotations

from typing import Any

from scheduler.core.forecast import MAX_MINUTES as MAX_FORECAST_MINUTES
from scheduler.core.labels import MAX_NAME_PREFIX, MAX_SELECTORS
from scheduler.core.model import TARGET_TYPES, JobState

REF = "#/components/schemas/{model}"


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


def _json(description: str, schema: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": REF.format(model=schema)}}}}


JOB_ID = {"name": "job_id", "in": "path", "required": True, "schema": {"type": "string"}}
PAGE = [
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 50}},
    {
        "name": "cursor",
        "in": "query",
        "schema": {"type": "string", "pattern": "^([A-Za-z0-9_-]{16,}={0,2})?$"},
        "description": (
            "next_cursor of the previous page, exactly as returned (empty: the first page); any other value is a 422"
        ),
    },
]
COMMON_ERRORS = {
    "401": _problem("no or unknown credentials"),
    "403": _problem("a principal that cannot be a tenant (a federated user)"),
    "404": _problem("no such job for this caller"),
}


def paths() -> dict[str, Any]:
    """Each route's operations (the statuses every operation can answer are added by scheduler.openapi)."""
    job_body = {"required": True, "content": {"application/json": {"schema": {"$ref": REF.format(model="JobSpec")}}}}
    action = {
        "parameters": [JOB_ID],
        "responses": {
            "200": _json("the job after the action", "Job"),
            "409": _problem("not allowed in this state"),
            **COMMON_ERRORS,
        },
    }
    paths: dict[str, Any] = {
        "/v1/health": {"get": {"summary": "liveness", "security": [], "responses": {"200": {"description": "ok"}}}},
        "/v1/openapi.json": {"get": {"summary": "this document", "responses": {"200": {"description": "OpenAPI"}}}},
        "/v1/jobs": {
            "post": {
                "summary": "create a job",
                "parameters": [
                    {
                        "name": "Idempotency-Key",
                        "in": "header",
                        "schema": {"type": "string", "maxLength": 255},
                        "description": "a retry with the same key and body returns the same job (24 h)",
                    },
                ],
                "requestBody": job_body,
                "responses": {
                    "201": _json("created", "Job"),
                    "200": _json("replay of an earlier create with the same Idempotency-Key", "Job"),
                    "400": _problem("malformed JSON, or JSON nested more than 128 levels deep"),
                    "409": _problem(
                        "Idempotency-Key reused with a different body, or external_id already another job's"
                    ),
                    "413": _problem("payload over 64 KiB"),
                    "415": _problem("not JSON"),
                    "422": _problem("invalid field"),
                    "429": _problem("over the tenant's active-job quota"),
                    "401": COMMON_ERRORS["401"],
                },
            },
            "get": {
                "summary": "list the caller's jobs, oldest first",
                "description": (
                    "Oldest first, a page at a time (`next_cursor`). The jobs one `POST /v1/jobs/batch` stored "
                    "together are listed together, in the batch's order, where its first job is. The list may lag a "
                    "write by a moment; `GET /v1/jobs/{job_id}` is always current."
                ),
                "parameters": [
                    {"name": "state", "in": "query", "schema": {"enum": [s.value for s in JobState]}},
                    {
                        "name": "label",
                        "in": "query",
                        "style": "form",
                        "explode": True,
                        "schema": {
                            "type": "array",
                            "maxItems": MAX_SELECTORS,
                            "items": {"type": "string", "pattern": "^[^:]+:[-A-Za-z0-9_.]*$"},
                        },
                        "description": (
                            "key:value (the label has that value) or key: (the job has the label); repeat to AND "
                            "them. With a label, the list is by that label's value, then job id"
                        ),
                    },
                    {"name": "target_type", "in": "query", "schema": {"enum": list(TARGET_TYPES)}},
                    {
                        "name": "name_prefix",
                        "in": "query",
                        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_NAME_PREFIX},
                    },
                    *PAGE,
                ],
                "responses": {
                    "200": _json("a page of jobs", "JobList"),
                    "422": _problem("bad query"),
                    "401": COMMON_ERRORS["401"],
                },
            },
        },
        "/v1/jobs/batch": {
            "post": {
                "summary": "create up to 25 jobs in one request (each created, replayed or refused on its own)",
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": REF.format(model="JobBatch")}}},
                },
                "responses": {
                    "200": _json("one result per item, in the items' order", "JobBatchResults"),
                    "400": _problem("malformed JSON, or JSON nested more than 128 levels deep"),
                    "413": _problem("body over 5 MiB"),
                    "415": _problem("not JSON"),
                    "422": _problem("not a list of 1-25 items"),
                    "401": COMMON_ERRORS["401"],
                },
            },
        },
        "/v1/jobs/by-external-id/{external_id}": {
            "get": {
                "summary": "the caller's job with this external_id",
                "parameters": [{"name": "external_id", "in": "path", "required": True, "schema": {"type": "string"}}],
                "responses": {"200": _json("the job", "Job"), **COMMON_ERRORS},
            },
        },
        "/v1/jobs/{job_id}": {
            "get": {
                "summary": "a job",
                "parameters": [
                    JOB_ID,
                    {"name": "preview", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": 50}},
                ],
                "responses": {"200": _json("the job", "Job"), **COMMON_ERRORS},
            },
            "patch": {
                "summary": "change a job (applies to occurrences not yet dispatched)",
                "parameters": [
                    JOB_ID,
                    {
                        "name": "If-Match",
                        "in": "header",
                        "schema": {"type": "string", "pattern": '^(W/)?"?[0-9]{1,18}"?$'},
                        "description": 'the version you read, e.g. "3"',
                    },
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": REF.format(model="JobPatch")}}},
                },
                "responses": {
                    "200": _json("the changed job", "Job"),
                    "412": _problem("version mismatch"),
                    "409": _problem("cancelled jobs cannot change"),
                    "422": _problem("invalid field"),
                    **COMMON_ERRORS,
                },
            },
            "delete": {
                "summary": "cancel (idempotent)",
                "description": (
                    "A soft delete: the job becomes CANCELLED and stays readable (GET returns it with state "
                    "CANCELLED, its run history too); occurrences already queued are recorded CANCELLED, "
                    "none fires after the 200. It cannot be resumed or changed."
                ),
                **action,
            },
        },
        "/v1/jobs/{job_id}/pause": {"post": {"summary": "pause", **action}},
        "/v1/jobs/{job_id}/resume": {"post": {"summary": "resume (missed runs per the misfire policy)", **action}},
        "/v1/jobs/{job_id}/trigger": {
            "post": {
                "summary": "fire one extra occurrence now",
                "parameters": [JOB_ID],
                "responses": {
                    "202": _json("accepted", "Trigger"),
                    "409": _problem("paused or cancelled"),
                    **COMMON_ERRORS,
                },
            },
        },
        "/v1/jobs/{job_id}/signing-keys": {
            "get": {
                "summary": "the job's webhook signing keys (signature v2), for its receivers",
                "parameters": [JOB_ID],
                "responses": {"200": _json("the keys, current first", "SigningKeys"), **COMMON_ERRORS},
            },
        },
        "/v1/jobs/{job_id}/signing-keys/rotate": {
            "post": {
                "summary": "rotate (or, with overlap_seconds 0, revoke) the job's webhook signing key",
                "description": (
                    "Makes the next version of the job's key current. The replaced version keeps signing every call "
                    "(a second v2 signature) until the overlap ends, so receivers fetch the new key meanwhile; only "
                    "the version just replaced overlaps. A change of the job: its version (ETag) goes up."
                ),
                "parameters": [
                    JOB_ID,
                    {
                        "name": "If-Match",
                        "in": "header",
                        "schema": {"type": "string", "pattern": '^(W/)?"?[0-9]{1,18}"?$'},
                        "description": 'the job version you read, e.g. "3"',
                    },
                ],
                "requestBody": {
                    "required": False,
                    "content": {"application/json": {"schema": {"$ref": REF.format(model="SigningKeyRotation")}}},
                },
                "responses": {
                    "200": _json("the keys after the rotation, current first", "SigningKeys"),
                    "409": _problem("the job is cancelled"),
                    "412": _problem("version mismatch"),
                    "422": _problem("overlap_seconds out of range, or an unknown field"),
                    **COMMON_ERRORS,
                },
            },
        },
        "/v1/jobs/{job_id}/runs": {
            "get": {
                "summary": "run history, newest first",
                "parameters": [JOB_ID, *PAGE],
                "responses": {"200": _json("a page of runs", "RunList"), **COMMON_ERRORS},
            },
        },
        "/v1/jobs/{job_id}/runs/{occurrence_key}/resolve": {
            "post": {
                "summary": "settle a RECONCILING run",
                "parameters": [
                    JOB_ID,
                    {"name": "occurrence_key", "in": "path", "required": True, "schema": {"type": "string"}},
                ],
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": {"$ref": REF.format(model="Resolve")}}},
                },
                "responses": {"200": _json("the run", "Run"), "409": _problem("not RECONCILING"), **COMMON_ERRORS},
            },
        },
    }
    paths["/v1/jobs/{job_id}/runs/{scheduled_for}/retry"] = {
        "post": {
            "summary": "re-run a DEAD or RECONCILING run once (the same occurrence key, a new attempt)",
            "description": (
                "The occurrence becomes claimable again (a DEAD one with a fresh attempt budget) and is sent to the "
                "job's ready queue; the worker's claim makes the new attempt with the next fencing token. A "
                "SUCCEEDED run is never run again. Repeating the retry while the run waits for its attempt sends "
                "it again and answers the same state (safe after a lost answer). No body."
            ),
            "parameters": [
                JOB_ID,
                {
                    "name": "scheduled_for",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string"},
                    "description": "the run's scheduled_for (RFC 3339 with an offset), or its occurrence key",
                },
            ],
            "responses": {
                "202": _json("the run, waiting for its new attempt", "Run"),
                "409": _problem("the run is not DEAD or RECONCILING (e.g. SUCCEEDED), or the job is paused/cancelled"),
                "422": _problem("scheduled_for is not an RFC 3339 instant"),
                **COMMON_ERRORS,
            },
        },
    }
    paths["/v1/forecast"] = {
        "get": {
            "summary": "occurrences due per minute over the next minutes (the caller's own jobs)",
            "parameters": [
                {
                    "name": "minutes",
                    "in": "query",
                    "schema": {"type": "integer", "minimum": 1, "maximum": MAX_FORECAST_MINUTES, "default": 60},
                }
            ],
            "responses": {
                "200": _json("the forecast, minute by minute", "Forecast"),
                "422": _problem("minutes out of range"),
                **COMMON_ERRORS,
            },
        },
    }
    backfill_id = {"name": "backfill_id", "in": "path", "required": True, "schema": {"type": "string"}}
    paths["/v1/jobs/{job_id}/backfill"] = {
        "get": {
            "summary": "the job's backfills, newest first",
            "parameters": [JOB_ID, *PAGE],
            "responses": {
                "200": _json("a page of backfills", "BackfillList"),
                "422": _problem("bad query: limit out of range, or a cursor this API did not return for this job"),
                **COMMON_ERRORS,
            },
        },
        "post": {
            "summary": "materialise the job's occurrences in a past range (in waves; what already ran is not re-run)",
            "parameters": [JOB_ID],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": REF.format(model="BackfillRequest")}}},
            },
            "responses": {
                "202": _json("accepted; Location names the backfill", "Backfill"),
                "409": _problem("the job is cancelled"),
                "422": _problem("bad range: in the future, too many occurrences, none, or a one-shot job"),
                **COMMON_ERRORS,
            },
        },
    }
    paths["/v1/jobs/{job_id}/backfill/{backfill_id}"] = {
        "get": {
            "summary": "a backfill and its progress",
            "parameters": [JOB_ID, backfill_id],
            "responses": {"200": _json("the backfill", "Backfill"), **COMMON_ERRORS},
        },
        "delete": {
            "summary": "cancel: no further waves (idempotent; occurrences already sent still run)",
            "parameters": [JOB_ID, backfill_id],
            "responses": {
                "200": _json("the cancelled backfill", "Backfill"),
                "409": _problem("already completed"),
                **COMMON_ERRORS,
            },
        },
    }
    paths["/v1/jobs/bulk"] = {
        "post": {
            "summary": "pause, resume or cancel every job matching a label selector (at most MAX_BULK_JOBS)",
            "description": (
                "Works until done or about 20 s, then answers 202 with the progress; the same request with the same "
                "Idempotency-Key goes on from there (also after a crash or a timeout) until 200 with the final report."
            ),
            "parameters": [
                {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": True,
                    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                    "description": "names the operation: a retry with the same key goes on with it (7 days)",
                }
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"$ref": REF.format(model="BulkRequest")}}},
            },
            "responses": {
                "200": _json("done: the final report", "BulkOperation"),
                "202": _json("still running: the progress; send the same request again", "BulkOperation"),
                "400": _problem("no Idempotency-Key, or malformed JSON"),
                "409": _problem("Idempotency-Key reused with another action or selector"),
                "415": _problem("not JSON"),
                "422": _problem("bad action or selector: empty, malformed, or matching more jobs than one takes"),
            },
        },
    }
    paths["/v1/operations/{operation_id}"] = {
        "get": {
            "summary": "a bulk operation and its progress (the caller's own)",
            "parameters": [{"name": "operation_id", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": _json("the operation", "BulkOperation"), "404": _problem("no such operation")},
        },
    }
    paths.update(operator_paths())
    return paths


def operator_paths() -> dict[str, Any]:
    """The operator's view (scheduler.handlers.api_operator), its response schema inlined from its model."""
    from scheduler.handlers.api_operator import OperatorStatus

    schema = OperatorStatus.model_json_schema(mode="serialization")
    return {
        "/v1/operator/status": {
            "get": {
                "summary": "every lane's load and the dispatch lag (operators only; no job of any tenant)",
                "description": (
                    "Each priority lane's ready-queue depth and oldest message, the dead-letter queue, the sweep "
                    "watermark's lag behind now and the last hour's metrics: what `punctual status` shows. Only the "
                    "tenants listed in the `operators` setting may read it."
                ),
                "responses": {
                    "200": {
                        "description": "the lanes and the lag",
                        "content": {"application/json": {"schema": _inlined(schema)}},
                    },
                    "403": _problem(
                        "not an operator (the detail names the `operators` setting), or a principal that cannot "
                        "be a tenant"
                    ),
                },
            }
        }
    }


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with its `$defs` references replaced by the definitions themselves (one self-contained schema)."""
    definitions = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            reference = node.get("$ref", "")
            if reference.startswith("#/$defs/"):
                return inline(definitions[reference.removeprefix("#/$defs/")])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(item) for item in node]
        return node

    return dict(inline(schema))
