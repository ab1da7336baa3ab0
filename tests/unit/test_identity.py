"""Tenants: a principal and its unique id, so a re-created role does not inherit data; every session of a role is
the role; federated users are refused; the operator's map comes first (docs/security.md, "Tenants")."""

from __future__ import annotations

import pytest

from scheduler.security.identity import UnknownPrincipal, tenant_of
from scheduler.settings import Settings

AWS = Settings(local_mode=False)
ROLE = "arn:aws:iam::111111111111:role/app"


def test_role_sessions_are_the_role_keyed_by_its_unique_id() -> None:
    one = tenant_of("arn:aws:sts::111111111111:assumed-role/app/session-1", "AROAEXAMPLE1:session-1", AWS)
    two = tenant_of("arn:aws:sts::111111111111:assumed-role/app/other", "AROAEXAMPLE1:other", AWS)
    assert one == two == f"{ROLE}#AROAEXAMPLE1"


def test_a_recreated_role_is_a_new_tenant() -> None:
    before = tenant_of("arn:aws:sts::111111111111:assumed-role/app/s", "AROAOLD:s", AWS)
    after = tenant_of("arn:aws:sts::111111111111:assumed-role/app/s", "AROANEW:s", AWS)
    assert before != after


def test_users_are_keyed_by_their_unique_id() -> None:
    assert tenant_of("arn:aws:iam::111111111111:user/alice", "AIDAALICE", AWS) == (
        "arn:aws:iam::111111111111:user/alice#AIDAALICE"
    )


def test_federated_users_are_refused_and_a_missing_principal_id_outside_local_mode() -> None:
    with pytest.raises(UnknownPrincipal, match="federated"):
        tenant_of("arn:aws:sts::111111111111:federated-user/anyname", "111111111111:anyname", AWS)
    with pytest.raises(UnknownPrincipal, match="no principal id"):
        tenant_of("arn:aws:iam::111111111111:user/alice", None, AWS)
    assert tenant_of("alice", None, Settings(local_mode=True)) == "alice"


def test_the_operator_map_comes_first_and_the_arn_mode_keeps_old_tenants() -> None:
    mapped = Settings(local_mode=False, tenant_map={"AROAEXAMPLE1": "payments"})
    assert tenant_of("arn:aws:sts::111111111111:assumed-role/app/s", "AROAEXAMPLE1:s", mapped) == "payments"
    legacy = Settings(local_mode=False, tenant_identity="arn")
    assert tenant_of("arn:aws:sts::111111111111:assumed-role/app/s", "AROAEXAMPLE1:s", legacy) == ROLE
