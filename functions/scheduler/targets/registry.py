"""The `handler` target: Python functions registered by name in the worker package.

A job whose target is `{"type": "handler", "name": "payments.charge"}` runs the function registered as
`payments.charge` in the worker, with a `HandlerContext`:

    from scheduler.targets.registry import HandlerContext, register

    @register("reports.nightly")
    def nightly(context: HandlerContext) -> str:
        ...  # write the effect keyed by context.occurrence_key; call context.heartbeat() in long loops
        return "sent 12 reports"

What the executor makes of what the function does:

- returns: the occurrence SUCCEEDED; the return value (a string, None, or anything JSON can carry) becomes the
  short result in the run history;
- raises `TargetFailure("retryable" | "permanent" | "ambiguous", ...)`: that classification, as for any target;
- raises `LeaseLost` (from `context.heartbeat()`): another worker owns the occurrence now; the run aborts and
  records nothing. A handler must let it propagate (never catch it and carry on writing);
- raises anything else: retried like a transient failure, until the job's retry policy is exhausted.

Every attempt of an occurrence gets the same occurrence key, and a handler may run more than once for it (a
retry after a crash, a worker that paused past its lease). A handler's effect is exactly-once only if the
handler makes it so: write it conditionally, keyed by the occurrence key (see `scheduler.examples.payments`).

Handlers are registered by importing their modules: the worker (and the API, to check a job's handler name)
imports the modules listed in `SCHEDULER_HANDLER_MODULES`. Nothing is registered by default; the local stack lists
the examples (`scheduler.examples`).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from scheduler.core.model.job import HandlerTarget
from scheduler.core.ports import TargetCall, TargetFailure

#: The names a `handler` target may carry (the same pattern as `HandlerTarget.name`).
HANDLER_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,127}")
#: What is kept of a handler's return value as the run's result.
RESULT_MAX = 1000


@dataclass(frozen=True)
class HandlerContext:
    """What a handler receives for one attempt of one occurrence."""

    #: The stable identity of the occurrence (`{job_id}:{scheduled_for}`): the same on every attempt. Key the
    #: effect by it.
    occurrence_key: str
    #: The epoch of this attempt's claim; it increases with every claim of the occurrence. A downstream store
    #: that keeps the highest token it has seen can refuse a stale attempt's writes.
    fencing_token: int
    job_id: str
    tenant: str
    #: The nominal instant of the occurrence (before jitter), aware UTC.
    scheduled_for: datetime
    #: 1 for the first attempt of the occurrence.
    attempt: int
    payload: Any
    #: When the current lease runs out unless the handler heartbeats (aware UTC).
    deadline: datetime
    _heartbeat: Callable[[], None] = field(repr=False, compare=False)

    def heartbeat(self) -> None:
        """Extend the lease on the occurrence (and its message's visibility). Raises LeaseLost when another
        worker took the occurrence over: let it propagate and stop, without writing anything more."""
        self._heartbeat()

    @classmethod
    def of(cls, call: TargetCall) -> HandlerContext:
        return cls(
            occurrence_key=call.occurrence_key,
            fencing_token=call.fencing_token,
            job_id=call.job.job_id,
            tenant=call.job.tenant,
            scheduled_for=call.scheduled_for,
            attempt=call.attempt,
            payload=call.job.spec.payload,
            deadline=call.deadline,
            _heartbeat=call.heartbeat,
        )


Handler = Callable[[HandlerContext], object]
HandlerT = TypeVar("HandlerT", bound=Handler)


class HandlerRegistry:
    """Handler functions by name."""

    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def register(self, name: str) -> Callable[[HandlerT], HandlerT]:
        """Decorator: register the function as the handler called `name`.

        Names are unique: registering a different function under a taken name is a programming error
        (ValueError), caught at import time rather than by a job that runs the wrong code.
        """
        if not HANDLER_NAME.fullmatch(name):
            raise ValueError(
                f"handler name {name!r} is not valid: a letter or '_' then up to 127 of letters, digits, '_.-'"
            )

        def decorate(function: HandlerT) -> HandlerT:
            existing = self._handlers.get(name)
            if existing is not None and _origin(existing) != _origin(function):
                raise ValueError(f"handler {name!r} is already registered to {_qualified(existing)}")
            self._handlers[name] = function
            return function

        return decorate

    def lookup(self, name: str) -> Handler | None:
        return self._handlers.get(name)

    def names(self) -> list[str]:
        return sorted(self._handlers)


def _qualified(function: Handler) -> str:
    module = getattr(function, "__module__", "?")
    return f"{module}.{getattr(function, '__qualname__', repr(function))}"


def _origin(function: Handler) -> tuple[str, str, int]:
    """Where a function was defined: the same for a module that is imported again (the same handler registering
    itself twice), different for two functions competing for one name."""
    code = getattr(function, "__code__", None)
    if code is None:
        return _qualified(function), "", id(function)
    return _qualified(function), code.co_filename, code.co_firstlineno


#: The registry of the worker package; `register` adds to it.
registry = HandlerRegistry()
register = registry.register


def result_summary(value: object) -> str | None:
    """The run's short result from a handler's return value. The effect has happened by now, so a value that
    JSON cannot carry is summarised with repr() rather than failing the run (which would run it again)."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, separators=(",", ":"), default=str)
        except (TypeError, ValueError):
            text = repr(value)
    return text if len(text) <= RESULT_MAX else text[: RESULT_MAX - 3] + "..."


class HandlerTargetInvoker:
    """The `handler` target: runs the registered function named by the job's target."""

    def __init__(self, handlers: HandlerRegistry | None = None) -> None:
        self.handlers = handlers if handlers is not None else registry

    def invoke(self, call: TargetCall) -> str | None:
        target = call.job.spec.target
        if not isinstance(target, HandlerTarget):
            raise TargetFailure("permanent", f"target type '{target.type}' is not a handler target")
        name = target.name
        function = self.handlers.lookup(name)
        if function is None:
            known = ", ".join(self.handlers.names()) or "none"
            raise TargetFailure(
                "permanent",
                f"no handler is registered as '{name}' in this worker (registered: {known}); fix the job's target "
                "or deploy a worker package that registers it",
            )
        # TargetFailure, LeaseLost and any other exception propagate: the executor classifies them.
        return result_summary(function(HandlerContext.of(call)))


def register_handler_modules(modules: list[str]) -> None:
    """Import the modules that register handlers (SCHEDULER_HANDLER_MODULES); importing one twice is a no-op."""
    for module in modules:
        importlib.import_module(module)
