"""How the API declares a route: once, with what its OpenAPI operation says about it.

`@route.get(rule, summary=..., params=(...), body=..., responses={...})` registers the handler with the Powertools
resolver and records its `Operation`; `scheduler.handlers.openapi` renders the document's paths from these records and
the 405s read the same table. The resolver refuses a route registered any other way: a bare `@app.get(...)` raises
`UndocumentedRoute` when its module is imported, so no route exists without its description. For example:

    @route.get(
        "/v1/jobs/<job_id>",
        summary="a job",
        params=(Param.query("preview", {"type": "integer", "minimum": 0, "maximum": 50}),),
        responses={200: ("the job", "Job")},
    )
    def get_job(job_id: str) -> Response[str]: ...

The path parameters come from the rule (declare one with `Param.path` only to describe it). Each is an id that reaches
a store's key, checked against its rule (`PATH_IDS`, by name; `scheduler.core.model.ids`) before the handler runs: one
that breaks it is a 422 naming the parameter, and the document declares the rule (maxLength, pattern). A path
parameter without a rule cannot be declared (give it one with `Param.path(name, rule=...)`). `responses` maps a
status to a problem's description (a str, answered as problem+json) or to `(description, schema)`, the schema being
a component's name in `scheduler.handlers.openapi`, a pydantic model or a TypedDict view (`api_models.py`), or None for
a response without a body. The statuses every route of its kind answers (401, 403 and 429 when authenticated, 400 and
422 with input, 413 and 415 with a body, 404 under a `<job_id>`, 412 with If-Match, 500 and 503 always) are added by
`scheduler.handlers.openapi`: declare one of them only to say more about it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Required, TypedDict, TypeVar, Unpack
from urllib.parse import unquote

from aws_lambda_powertools.event_handler import APIGatewayRestResolver

from scheduler.core.model.ids import EXTERNAL_ID_RULE, FLOW_KEY_ID, JOB_ID, OCCURRENCE, TOKEN_ID, IdRule
from scheduler.handlers.api_problems import Problem

#: What a response or a request body carries: a component's name, a pydantic model or a TypedDict (None: no body).
Schema = str | type | None
#: A declared response: a problem's description, or (description, schema) of a JSON answer.
Answer = str | tuple[str, Schema]

Handler = TypeVar("Handler", bound=Callable[..., Any])
_PATH_PARAMETER = re.compile(r"<(\w+)>")

#: The 404 of a route under a job: another tenant's job is not found either.
NO_JOB = "no such job for this caller"
#: The rule of each path parameter, by its name: every one is an id that reaches a store's key.
PATH_IDS: Mapping[str, IdRule] = {
    "job_id": JOB_ID,
    "external_id": EXTERNAL_ID_RULE,
    "occurrence_key": OCCURRENCE,
    "scheduled_for": OCCURRENCE,
    "backfill_id": TOKEN_ID,
    "operation_id": TOKEN_ID,
    "flow_key": FLOW_KEY_ID,
}


class UndocumentedRoute(Exception):
    """A route registered on the resolver without its declaration (`route.get(...)` and the like)."""


@dataclass(frozen=True)
class Param:
    """A parameter of an operation besides its body, as OpenAPI describes it."""

    name: str
    where: Literal["path", "query", "header"]
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "string"})
    description: str | None = None
    required: bool = False
    style: str | None = None
    explode: bool | None = None
    #: A path parameter's rule, checked before the handler runs.
    rule: IdRule | None = None

    @classmethod
    def path(cls, name: str, description: str | None = None, rule: IdRule | None = None) -> Param:
        """A path parameter, checked by `rule` (by default the rule `PATH_IDS` has for its name)."""
        rule = rule or PATH_IDS.get(name)
        if rule is None:
            raise ValueError(
                f"path parameter '{name}' has no id rule: add it to PATH_IDS, or declare Param.path({name!r}, "
                "rule=...) - whatever a path names may reach a store's key"
            )
        return cls(name, "path", rule.schema(), description, required=True, rule=rule)

    @classmethod
    def query(cls, name: str, schema: Mapping[str, Any], description: str | None = None, **more: Any) -> Param:
        return cls(name, "query", schema, description, **more)

    @classmethod
    def header(
        cls, name: str, schema: Mapping[str, Any], description: str | None = None, required: bool = False
    ) -> Param:
        return cls(name, "header", schema, description, required)

    def openapi(self) -> dict[str, Any]:
        described: dict[str, Any] = {"name": self.name, "in": self.where, "schema": dict(self.schema)}
        optional = {"description": self.description, "style": self.style, "explode": self.explode}
        described.update({key: value for key, value in optional.items() if value is not None})
        if self.required:
            described["required"] = True
        return described


@dataclass(frozen=True)
class Operation:
    """One route and method as declared: what the resolver dispatches and what the OpenAPI document says."""

    method: str
    rule: str
    summary: str
    description: str | None
    params: tuple[Param, ...]
    body: Schema
    body_required: bool
    responses: Mapping[int, Answer]
    public: bool
    documented: bool
    pattern: re.Pattern[str]

    @property
    def path(self) -> str:
        """The rule as an OpenAPI path template (`<job_id>` becomes `{job_id}`)."""
        return _PATH_PARAMETER.sub(r"{\1}", self.rule)


class Declaration(TypedDict, total=False):
    """What a route declares besides its method and rule (`Routes.declare`)."""

    summary: Required[str]
    responses: Required[Mapping[int, Answer]]
    description: str | None
    params: tuple[Param, ...]
    body: Schema
    body_required: bool
    public: bool
    documented: bool


class DeclaredResolver(APIGatewayRestResolver):
    """The API's resolver: it takes a route from its `Routes` declarations only."""

    def route(self, rule: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        methods = ", ".join(m.upper() for m in ([method] if isinstance(method, str) else method))
        raise UndocumentedRoute(
            f"{methods} {rule} is registered without its declaration: use @route.{methods.split(',')[0].lower()}"
            f"({rule!r}, summary=..., responses=...) from scheduler.handlers.api_routes, which documents it in the "
            "OpenAPI document and the route table"
        )


def _checking_ids(handler: Handler, params: tuple[Param, ...]) -> Callable[..., Any]:
    """`handler`, called only when each path parameter (percent-decoded, as the handlers read them) keeps its rule;
    else the 422 that names it."""
    rules = {param.name: param.rule for param in params if param.rule is not None}

    @functools.wraps(handler)
    def checked(**values: Any) -> Any:
        for name, value in values.items():
            rule = rules.get(name)
            problem = rule.problem(unquote(value)) if rule is not None and isinstance(value, str) else None
            if problem is not None:
                raise Problem.unprocessable(f"path parameter '{name}' {problem}", (name, problem))
        return handler(**values)

    return checked


class Routes:
    """The route table: each declaration registers its handler with the resolver and records its operation."""

    def __init__(self, resolver: DeclaredResolver) -> None:
        self.resolver = resolver
        self.operations: list[Operation] = []

    def get(self, rule: str, **declaration: Unpack[Declaration]) -> Callable[[Handler], Handler]:
        return self.declare("GET", rule, **declaration)

    def post(self, rule: str, **declaration: Unpack[Declaration]) -> Callable[[Handler], Handler]:
        return self.declare("POST", rule, **declaration)

    def put(self, rule: str, **declaration: Unpack[Declaration]) -> Callable[[Handler], Handler]:
        return self.declare("PUT", rule, **declaration)

    def patch(self, rule: str, **declaration: Unpack[Declaration]) -> Callable[[Handler], Handler]:
        return self.declare("PATCH", rule, **declaration)

    def delete(self, rule: str, **declaration: Unpack[Declaration]) -> Callable[[Handler], Handler]:
        return self.declare("DELETE", rule, **declaration)

    def declare(
        self,
        method: str,
        rule: str,
        *,
        summary: str,
        responses: Mapping[int, Answer],
        description: str | None = None,
        params: tuple[Param, ...] = (),
        body: Schema = None,
        body_required: bool = True,
        public: bool = False,
        documented: bool = True,
    ) -> Callable[[Handler], Handler]:
        """Declare `method rule`: the decorated function answers it, and the document describes it as given."""
        rule = rule.rstrip("/") or "/"
        in_rule = _PATH_PARAMETER.findall(rule)
        described = {p.name: p for p in params if p.where == "path"}
        if set(described) - set(in_rule):
            raise ValueError(f"{method} {rule}: path parameter(s) {sorted(set(described) - set(in_rule))} not in it")
        if any(op.method == method and op.rule == rule for op in self.operations):
            raise ValueError(f"{method} {rule} is declared twice")
        if not any(200 <= status < 400 for status in responses):
            raise ValueError(f"{method} {rule} declares no successful response")
        path_params = tuple(described[name] if name in described else Param.path(name) for name in in_rule)

        def register(handler: Handler) -> Handler:
            APIGatewayRestResolver.route(self.resolver, rule, method)(_checking_ids(handler, path_params))
            operation = Operation(
                method=method,
                rule=rule,
                summary=summary,
                description=description,
                params=path_params + tuple(p for p in params if p.where != "path"),
                body=body,
                body_required=body_required,
                responses=dict(responses),
                public=public,
                documented=documented,
                pattern=APIGatewayRestResolver._compile_regex(rule),
            )
            self.operations.append(operation)
            return handler

        return register

    def methods(self) -> dict[re.Pattern[str], set[str]]:
        """The methods of each declared route (the 405s answer with them, in `Allow`)."""
        table: dict[re.Pattern[str], set[str]] = {}
        for operation in self.operations:
            table.setdefault(operation.pattern, set()).add(operation.method)
        return table


app = DeclaredResolver()
route = Routes(app)
