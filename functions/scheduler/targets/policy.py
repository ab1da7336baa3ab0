"""Which non-http targets a tenant may name (docs/security.md, "Tenant isolation at AWS targets").

Checked at submit time (a refused target is a 422 naming the field) and again before every call (a refused target
fails the occurrence permanently, without calling anything), so a job stored before a rule changed cannot get
around it. Every comparison is of full ARNs (`scheduler.targets.resources`), never of bare names.

- **the scheduler's own resources** are refused for every tenant: its ready queues and DLQ (a message planted there
  would be run or redriven by the scheduler), its completion-event bus, and anything named with the stack's prefix
  (`<stack name>-`: its queues, topics, functions and state machines); an `eventbridge` target may not use a
  `source` in the scheduler's namespace (`punctual`, `punctual.*`) nor AWS's (`aws.*`), so nobody can publish an
  event that looks like one of the scheduler's completion events;
- **per-tenant allow-lists** (`SCHEDULER_TENANT_TARGETS`, from the CDK app's `tenant_targets`): a tenant listed there
  may call only the resources listed for it, per target type (`"*"`: any the deployment grants), and publish events
  only under the sources listed for it; a tenant not listed may call nothing, unless the operator opened the
  deployment's grants to every tenant (`SCHEDULER_DEFAULT_TARGETS_OPEN`). `handler` targets run inside the worker,
  so open grants never include them: a tenant calls one only when its allow-list names it (or `"*"`) - except on
  the local stack, whose open grants include its example handlers;
- **no target role, no AWS target**: outside local mode an AWS target is refused when the worker has no target role
  to call it with, rather than being called with the worker's own credentials.

IAM stays the outer bound: the worker calls AWS targets through the target role, assumed per tenant with the tenant's
session tag, and each grant of that role names the tenant it is for (cdk/punctual_cdk/worker.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase

from scheduler.core.errors import InvalidRequest
from scheduler.core.model.job import (
    EventBridgeTarget,
    HandlerTarget,
    HttpTarget,
    JobSpec,
    LambdaTarget,
    SnsTarget,
    SqsTarget,
    StepFunctionsTarget,
    Target,
)
from scheduler.core.ports import TargetCall, TargetFailure, TargetInvoker
from scheduler.settings import Settings, TenantTargets
from scheduler.targets.resources import (
    Home,
    NotAResource,
    event_bus_arn,
    lambda_function,
    plain_arn,
    resource_name,
    sqs_queue_arn,
)

#: Event sources no target may use: the scheduler's own (its completion events) and AWS's.
RESERVED_SOURCES = ("punctual", "aws")


class TargetRefused(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _home_of(settings: Settings) -> Home:
    account = settings.account_id
    if not account:
        try:
            account = sqs_queue_arn(settings.ready_queue_url, Home.of("000000000000")).split(":")[4]
        except NotAResource:
            account = "000000000000"
    return Home.of(account, settings.region)


def _account_and_name(arn: str) -> tuple[str, str]:
    """The account and the rest of an ARN (`arn:partition:service:region:ACCOUNT:REST`)."""
    parts = arn.split(":", 5)
    return parts[4], parts[5]


@dataclass(frozen=True)
class OwnResources:
    """What belongs to the scheduler itself."""

    #: The ready queues (every lane) and the DLQ, as (account, name): compared whatever region a URL's host implies
    #: (refusing more here costs no tenant anything).
    queues: frozenset[tuple[str, str]]
    #: The completion bus's ARN; None when it is the account's default bus (shared with tenants' own events).
    event_bus: str | None
    #: Resource-name prefixes of the stack (`<stack name>-`).
    prefixes: tuple[str, ...]
    #: Where a bare name resolves.
    home: Home

    @classmethod
    def of(cls, settings: Settings) -> OwnResources:
        home = _home_of(settings)
        urls = (settings.ready_queue_url, settings.ready_queue_high_url, settings.ready_queue_low_url, settings.dlq_url)
        queues = frozenset(_account_and_name(sqs_queue_arn(url, home)) for url in urls if url)
        bus = event_bus_arn(settings.event_bus_name, home)
        prefixes = (f"{settings.stack_name}-",) if settings.stack_name else ()
        return cls(queues, None if bus.endswith("event-bus/default") else bus, prefixes, home)

    def owns_name(self, name: str) -> bool:
        return any(name.startswith(prefix) for prefix in self.prefixes)


class TargetPolicy:
    """Refuses the targets a tenant may not name (see the module docstring)."""

    def __init__(
        self,
        own: OwnResources,
        tenants: Mapping[str, TenantTargets] | None = None,
        default_open: bool = False,
        *,
        aws_targets_callable: bool = True,
        handlers_open: bool = False,
    ) -> None:
        self.own = own
        self.tenants = dict(tenants or {})
        self.default_open = default_open
        #: False outside local mode when the worker has no target role: AWS targets are then refused.
        self.aws_targets_callable = aws_targets_callable
        #: Local stack only: open targets include the registered handlers (its examples).
        self.handlers_open = handlers_open

    @classmethod
    def of(cls, settings: Settings) -> TargetPolicy:
        return cls(
            OwnResources.of(settings),
            settings.tenant_targets,
            settings.default_targets_open,
            aws_targets_callable=settings.local_mode or bool(settings.target_role_arn),
            handlers_open=settings.local_mode and settings.default_targets_open,
        )

    # -- the checks ---------------------------------------------------------------------------------------

    def refusal(self, tenant: str, target: Target) -> TargetRefused | None:
        """Why `tenant` may not call `target`, or None."""
        if isinstance(target, HttpTarget):
            return None  # the SSRF guard decides (scheduler.adapters.http_target)
        field, kind = _FIELDS[type(target)]
        if not isinstance(target, HandlerTarget) and not self.aws_targets_callable:
            return TargetRefused(
                field,
                f"{kind} targets cannot be called: this deployment has no target role (the worker never lends its "
                "own credentials to a target); ask the operator to configure target grants",
            )
        try:
            resource = _resource(target, self.own.home)
        except NotAResource as refused:
            return TargetRefused(field, str(refused))
        return self._own(target, field, resource) or self._allowed(tenant, target, field, kind, resource)

    def check_spec(self, tenant: str, spec: JobSpec) -> None:
        """Submit time: InvalidRequest (HTTP 422) naming the field."""
        refused = self.refusal(tenant, spec.target)
        if refused is not None:
            raise InvalidRequest(str(refused), field=refused.field)

    def check_call(self, call: TargetCall) -> None:
        """Call time: a permanent TargetFailure (the occurrence dies without any call)."""
        refused = self.refusal(call.job.tenant, call.job.spec.target)
        if refused is not None:
            raise TargetFailure("permanent", f"target refused before the call: {refused}")

    def _own(self, target: Target, field: str, resource: str) -> TargetRefused | None:
        mine = "names one of the scheduler's own resources; no job may target them"
        if isinstance(target, HandlerTarget):
            return None
        name = resource_name(resource)
        if _account_and_name(resource) in self.own.queues or resource == self.own.event_bus or self.own.owns_name(name):
            return TargetRefused(field, f"'{_address(target)}' {mine} (its queues, completion bus or stack)")
        if isinstance(target, EventBridgeTarget):
            namespace = target.source.split(".", 1)[0].lower()
            if namespace in RESERVED_SOURCES:
                return TargetRefused(
                    "target.source",
                    f"source '{target.source}' is reserved (the scheduler's completion events use 'punctual.*', AWS "
                    "services 'aws.*'); choose a source of your own, e.g. 'com.example.jobs'",
                )
        return None

    def _allowed(self, tenant: str, target: Target, field: str, kind: str, resource: str) -> TargetRefused | None:
        allow = self.tenants.get(tenant)
        if allow is None:
            if self.default_open and (self.handlers_open or not isinstance(target, HandlerTarget)):
                return None
            why = "handler targets are open to no tenant by default" if self.default_open else "target allow-lists"
            return TargetRefused(
                field, f"tenant '{tenant}' may call no {kind} target: it has no entry in tenant_targets ({why})"
            )
        listed = getattr(allow, "lambda_" if kind == "lambda" else kind)
        if not ("*" in listed or any(_same(target, resource, entry, self.own.home) for entry in listed)):
            return TargetRefused(
                field,
                f"'{_address(target)}' is not in tenant '{tenant}''s allow-list of {kind} targets (tenant_targets)",
            )
        if isinstance(target, EventBridgeTarget) and not any(
            fnmatchcase(target.source, pattern) for pattern in allow.eventbridge_sources
        ):
            return TargetRefused(
                "target.source",
                f"source '{target.source}' is not among tenant '{tenant}''s event sources "
                f"({', '.join(allow.eventbridge_sources) or 'none listed'}; tenant_targets.eventbridge_sources)",
            )
        return None


_FIELDS: dict[type, tuple[str, str]] = {
    SqsTarget: ("target.queue_url", "sqs"),
    SnsTarget: ("target.topic_arn", "sns"),
    EventBridgeTarget: ("target.event_bus_name", "eventbridge"),
    LambdaTarget: ("target.function_name", "lambda"),
    StepFunctionsTarget: ("target.state_machine_arn", "stepfunctions"),
    HandlerTarget: ("target.name", "handler"),
}


def _address(target: Target) -> str:
    field = _FIELDS[type(target)][0].split(".", 1)[1]
    return str(getattr(target, field))


def _resource(target: Target, home: Home) -> str:
    """The canonical ARN of what `target` names (a handler: its registered name)."""
    if isinstance(target, SqsTarget):
        return sqs_queue_arn(target.queue_url, home)
    if isinstance(target, SnsTarget):
        return plain_arn(target.topic_arn, "sns")
    if isinstance(target, StepFunctionsTarget):
        return plain_arn(target.state_machine_arn, "states")
    if isinstance(target, LambdaTarget):
        return lambda_function(target.function_name, home).arn
    if isinstance(target, EventBridgeTarget):
        return event_bus_arn(target.event_bus_name, home)
    assert isinstance(target, HandlerTarget)
    return target.name


def entry_resource(kind: str, entry: str, home: Home) -> str:
    """The canonical ARN an allow-list entry names (entries are full ARNs; a handler entry is its name)."""
    if kind == "handler":
        return entry
    if not entry.startswith("arn:"):
        raise NotAResource(f"allow-list entries are full ARNs; '{entry}' is not one")
    if kind == "sqs":
        return sqs_queue_arn(entry, home)
    if kind == "lambda":
        return lambda_function(entry, home).arn
    if kind == "eventbridge":
        return event_bus_arn(entry, home)
    return plain_arn(entry, {"sns": "sns", "stepfunctions": "states"}[kind])


def _same(target: Target, resource: str, entry: str, home: Home) -> bool:
    """Whether an allow-list entry names the target's resource (a Lambda entry with a qualifier admits only it)."""
    kind = _FIELDS[type(target)][1]
    try:
        if entry_resource(kind, entry, home) != resource:
            return False
        if isinstance(target, LambdaTarget):
            allowed = lambda_function(entry, home).qualifier
            return allowed in (None, lambda_function(target.function_name, home).qualifier)
    except NotAResource:
        return False
    return True


class PolicedInvoker:
    """A target invoker that checks the policy before every call."""

    def __init__(self, policy: TargetPolicy, inner: TargetInvoker) -> None:
        self.policy = policy
        self.inner = inner

    def invoke(self, call: TargetCall) -> str | None:
        self.policy.check_call(call)
        return self.inner.invoke(call)
