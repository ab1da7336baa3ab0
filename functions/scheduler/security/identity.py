"""Who a caller is: the tenant of an authenticated IAM principal (docs/security.md, "Tenants").

A tenant owns jobs, runs, budgets and signing keys. It is, by default, the caller's IAM principal *and its unique
id*: `arn:aws:iam::<account>:role/<name>#<AROA...>` for a role (every session of the role is the same tenant) and
`arn:aws:iam::<account>:user/<name>#<AIDA...>` for a user. A role or user deleted and created again under the same
name gets a new unique id, so it does not inherit the old one's jobs or keys.

- `SCHEDULER_TENANT_MAP` (`{"<principal unique id or ARN>": "<tenant>"}`): the operator's mapping, checked first -
  to give several principals one tenant, short tenant names, or to keep a tenant across a re-created principal
  deliberately. A unique id is the safe key (an ARN names any principal created under that name later).
- `SCHEDULER_TENANT_IDENTITY=arn`: the tenant is the principal's ARN alone (how versions before this one keyed
  tenants; keeps existing data visible during a migration - see docs/security.md).
- Federated users (`sts:GetFederationToken`) choose their own name: they are refused unless mapped by ARN.
"""

from __future__ import annotations

import re

from scheduler.settings import Settings

_ASSUMED_ROLE = re.compile(r"^arn:(aws[\w-]*):sts::(\d{12}):assumed-role/([^/]+)/.+$")
_FEDERATED = re.compile(r"^arn:aws[\w-]*:sts::\d{12}:federated-user/")


class UnknownPrincipal(Exception):
    """The caller is authenticated but cannot be a tenant (HTTP 403)."""


def tenant_of(arn: str, principal_id: str | None, settings: Settings) -> str:
    """The tenant of the principal `arn` whose unique id is `principal_id` (API Gateway's identity.user:
    `AIDA...` for a user, `AROA...:<session>` for a role session)."""
    unique_id = (principal_id or "").split(":", 1)[0] or None
    mapped = settings.tenant_map.get(unique_id or "") or settings.tenant_map.get(arn)
    if mapped:
        return mapped
    if _FEDERATED.match(arn):
        raise UnknownPrincipal(
            "federated users (GetFederationToken) name themselves, so they cannot be tenants; call with a role or a "
            "user, or ask the operator to map this principal in SCHEDULER_TENANT_MAP"
        )
    match = _ASSUMED_ROLE.match(arn)
    principal = f"arn:{match[1]}:iam::{match[2]}:role/{match[3]}" if match else arn
    if settings.tenant_identity == "arn":
        return principal
    if unique_id is None:
        if settings.local_mode:
            return principal  # the local stack's bearer tokens carry no unique id
        raise UnknownPrincipal("the request carries no principal id; it did not come through API Gateway's IAM auth")
    return f"{principal}#{unique_id}"
