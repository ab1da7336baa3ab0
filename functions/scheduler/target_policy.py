"""Which non-http targets a tenant may name (docs/security.md, "Trust model").

Checked at submit time (a refused target is a 422 naming the field) and again before every call (a refused target
fails the occurrence permanently, without calling anything), so a job stored before a rule changed cannot get
around it:

- **the scheduler's own resources** are refused for every tenant: its ready queues and DLQ (a message planted there
  would be run or redriven by the scheduler), its completion-event bus, and anything named with the stack's prefix
  (`<stack name>-`: its queues, topics, functions and state machines); an `eventbridge` target may not use a
  `source` in the scheduler's namespace (`punctual`, `punctual.*`) nor AWS's (`aws.*`), so nobody can publish an
  event that looks like one of the scheduler's completion events;
- **per-tenant allow-lists** (`SCHEDULER_TENANT_TARGETS`, from the CDK app's `tenant_targets`): a tenant listed there
  may call only the resources listed for it, per target type (`"*"`: any that IAM allows); a tenant not listed may
  call what IAM allows when `SCHEDULER_DEFAULT_TARGETS_OPEN` is true (the default), nothing otherwise.

IAM stays the outer bound: the role that calls targets holds only the deployment's target grants.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from scheduler.core.errors import InvalidRequest
from scheduler.core.model import (
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

#: Event sources no target may use: the scheduler's own (its completion events) and AWS's.
RESERVED_SOURCES = ("punctual", "aws")


class TargetRefused(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def sqs_queue_id(address: str) -> tuple[str, str] | None:
    """(account, queue name) of an SQS queue URL (`https://<host>/<account>/<name>`) or ARN; None if it is neither."""
    if address.startswith("arn:"):
        parts = address.split(":")
        return (parts[4], parts[5]) if len(parts) == 6 and parts[2] == "sqs" and parts[5] else None
    split = urlsplit(address)
    segments = split.path.split("/")
    if split.scheme not in ("http", "https") or split.query or split.fragment or len(segments) != 3:
        return None
    _, account, name = segments
    return (account, name) if account.isdigit() and name else None


def lambda_name(function: str) -> tuple[str, str | None]:
    """(function name, qualifier) of a Lambda name, partial ARN (`<account>:function:<name>`) or ARN."""
    parts = function.split(":")
    if function.startswith("arn:") and len(parts) >= 7:
        return parts[6], parts[7] if len(parts) > 7 else None
    if len(parts) >= 3 and parts[1] == "function":
        return parts[2], parts[3] if len(parts) > 3 else None
    return parts[0], parts[1] if len(parts) > 1 else None


def bus_name(bus: str) -> str:
    """The name of an EventBridge bus given by name or ARN."""
    return bus.split("event-bus/", 1)[1] if bus.startswith("arn:") and "event-bus/" in bus else bus


def _arn_name(arn: str) -> str:
    return arn.rsplit(":", 1)[-1]


@dataclass(frozen=True)
class OwnResources:
    """What belongs to the scheduler itself."""

    #: The ready queues (every lane) and the DLQ, as (account, name).
    queues: frozenset[tuple[str, str]]
    #: The completion bus's name; None when it is the account's default bus (shared with tenants' own events).
    event_bus: str | None
    #: Resource-name prefixes of the stack (`<stack name>-`).
    prefixes: tuple[str, ...]

    @classmethod
    def of(cls, settings: Settings) -> OwnResources:
        urls = (settings.ready_queue_url, settings.ready_queue_high_url, settings.ready_queue_low_url, settings.dlq_url)
        queues = frozenset(q for q in (sqs_queue_id(url) for url in urls if url) if q is not None)
        bus = bus_name(settings.event_bus_name)
        prefixes = (f"{settings.stack_name}-",) if settings.stack_name else ()
        return cls(queues, None if bus == "default" else bus, prefixes)

    def owns_name(self, name: str) -> bool:
        return any(name.startswith(prefix) for prefix in self.prefixes)


class TargetPolicy:
    """Refuses the targets a tenant may not name (see the module docstring)."""

    def __init__(
        self, own: OwnResources, tenants: Mapping[str, TenantTargets] | None = None, default_open: bool = True
    ) -> None:
        self.own = own
        self.tenants = dict(tenants or {})
        self.default_open = default_open

    @classmethod
    def of(cls, settings: Settings) -> TargetPolicy:
        return cls(OwnResources.of(settings), settings.tenant_targets, settings.default_targets_open)

    # -- the checks ---------------------------------------------------------------------------------------

    def refusal(self, tenant: str, target: Target) -> TargetRefused | None:
        """Why `tenant` may not call `target`, or None."""
        if isinstance(target, HttpTarget):
            return None  # the SSRF guard decides (scheduler.adapters.http_target)
        own = self._own(target)
        if own is not None:
            return own
        return self._allowed(tenant, target)

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

    def _own(self, target: Target) -> TargetRefused | None:
        mine = "names one of the scheduler's own resources; no job may target them"
        if isinstance(target, SqsTarget):
            queue = sqs_queue_id(target.queue_url)
            if queue is None:
                return TargetRefused(
                    "target.queue_url",
                    f"'{target.queue_url}' is not an SQS queue URL (https://<host>/<account>/<name>)",
                )
            if queue in self.own.queues or self.own.owns_name(queue[1]):
                return TargetRefused("target.queue_url", f"queue '{queue[1]}' {mine} (its ready queues and DLQ)")
        elif isinstance(target, SnsTarget) and self.own.owns_name(_arn_name(target.topic_arn)):
            return TargetRefused("target.topic_arn", f"topic '{target.topic_arn}' {mine}")
        elif isinstance(target, StepFunctionsTarget) and self.own.owns_name(_arn_name(target.state_machine_arn)):
            return TargetRefused("target.state_machine_arn", f"state machine '{target.state_machine_arn}' {mine}")
        elif isinstance(target, LambdaTarget) and self.own.owns_name(lambda_name(target.function_name)[0]):
            return TargetRefused("target.function_name", f"function '{target.function_name}' {mine}")
        elif isinstance(target, EventBridgeTarget):
            bus = bus_name(target.event_bus_name)
            if bus == self.own.event_bus or self.own.owns_name(bus):
                return TargetRefused("target.event_bus_name", f"bus '{bus}' {mine} (its completion events)")
            namespace = target.source.split(".", 1)[0].lower()
            if namespace in RESERVED_SOURCES:
                return TargetRefused(
                    "target.source",
                    f"source '{target.source}' is reserved (the scheduler's completion events use 'punctual.*', AWS "
                    "services 'aws.*'); choose a source of your own, e.g. 'com.example.jobs'",
                )
        return None

    def _allowed(self, tenant: str, target: Target) -> TargetRefused | None:
        field, kind = _FIELDS[type(target)]
        allow = self.tenants.get(tenant)
        if allow is None:
            if self.default_open:
                return None
            return TargetRefused(field, f"tenant '{tenant}' may call no {kind} target (it has no target allow-list)")
        listed = getattr(allow, "lambda_" if kind == "lambda" else kind)
        if "*" in listed or any(_same(target, entry) for entry in listed):
            return None
        return TargetRefused(
            field, f"'{_address(target)}' is not in tenant '{tenant}''s allow-list of {kind} targets (tenant_targets)"
        )


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


def _same(target: Target, entry: str) -> bool:
    """Whether an allow-list entry names the target's resource."""
    if isinstance(target, SqsTarget):
        return sqs_queue_id(entry) is not None and sqs_queue_id(entry) == sqs_queue_id(target.queue_url)
    if isinstance(target, LambdaTarget):
        name, qualifier = lambda_name(target.function_name)
        allowed_name, allowed_qualifier = lambda_name(entry)
        return name == allowed_name and allowed_qualifier in (None, qualifier)
    if isinstance(target, EventBridgeTarget):
        return bus_name(entry) == bus_name(target.event_bus_name)
    return entry == _address(target)


class PolicedInvoker:
    """A target invoker that checks the policy before every call."""

    def __init__(self, policy: TargetPolicy, inner: TargetInvoker) -> None:
        self.policy = policy
        self.inner = inner

    def invoke(self, call: TargetCall) -> str | None:
        self.policy.check_call(call)
        return self.inner.invoke(call)
