"""Who calls the API and what it may ask: the caller's tenant, its request limit, and the job service.

Every route asks `tenant()` first: it resolves the IAM principal (scheduler.security.identity) and counts the request
against the tenant's limit (scheduler.core.tenancy.request_limits), so a tenant over it gets a 429 whatever it asked.
"""

from __future__ import annotations

import math

from aws_lambda_powertools import Metrics

from scheduler.core.jobs.reads import JobReads
from scheduler.core.jobs.resolution import Resolution
from scheduler.core.jobs.service import JobService
from scheduler.core.jobs.signing_keys import KeyRotation
from scheduler.core.tenancy.request_limits import RequestGate
from scheduler.handlers import wiring
from scheduler.handlers.api_problems import Problem
from scheduler.handlers.api_requests import app
from scheduler.security.identity import UnknownPrincipal, tenant_of

logger = wiring.handler_logger()
metrics = Metrics()


def tenant() -> str:
    """The caller's tenant (scheduler.security.identity): its IAM principal and unique id - every session of a role is
    the role's tenant. Locally the dev server puts the tenant of the bearer token in the same place."""
    identity = app.current_event.request_context.identity
    arn = identity.user_arn
    if not arn:
        raise Problem(401, "Unauthorized", "this API needs an authenticated caller")
    container = wiring.container(metrics)
    try:
        who = tenant_of(arn, identity.user, container.core.settings)
    except UnknownPrincipal as exc:
        raise Problem(403, "Forbidden", str(exc)) from None
    _admit(who, container.core.request_gate())
    return who


def _admit(who: str, gate: RequestGate | None) -> None:
    """A tenant over its request limit gets a 429 with Retry-After, whatever it asked (other tenants are served)."""
    wait = gate.admit(who) if gate is not None else None
    if gate is None or wait is None:
        return
    seconds = math.ceil(wait)
    logger.info("tenant over its request limit", extra={"tenant": who, "retry_after": seconds})
    limit, window = gate.config.limit(who), gate.config.window_seconds
    raise Problem(
        429,
        "Too Many Requests",
        f"this tenant's request limit ({limit} requests in {window} s) is used up; retry after {seconds} s",
        headers={"Retry-After": str(seconds)},
    )


def service() -> JobService:
    """The changes of jobs."""
    return wiring.container(metrics).core.job_service()


def reads() -> JobReads:
    """The reads of jobs."""
    return wiring.container(metrics).core.job_reads()


def key_rotation() -> KeyRotation:
    return wiring.container(metrics).core.key_rotation()


def resolution() -> Resolution:
    return wiring.container(metrics).core.resolution()
