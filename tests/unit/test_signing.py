"""What the worker signs (`scheduler.security.signing`), checked by the one verifier, the SDK's receiver kit: signature
v2 covers what receivers rely on; v1 stays verifiable in the migration window; keys rotate; the verifier raises only
InvalidSignature, whatever it is handed (docs/security.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from punctual_sdk.receiver import InvalidSignature, verify_v1, verify_v2
from scheduler.security.signing import (
    SIGNATURE_HEADER,
    KeyRing,
    SignedCall,
    canonical_v2,
    job_key,
    sign,
    sign_v2,
    signing_versions,
    tenant_key,
    versioned_key_id,
)

NOW = 1_800_000_000
CALL = SignedCall("POST", "hooks.example.com", "/jobs?x=1", "j1:2026-03-01T12:00:00Z", 4, "2026-03-01T12:00:00Z", 2)
BODY = b'{"invoice":7}'
RING = KeyRing.parse('{"current": "k1", "k1": "root-one-0123456789", "k2": "root-two-0123456789"}')


def headers_of(call: SignedCall, signature: str) -> dict[str, str]:
    return {
        SIGNATURE_HEADER: signature,
        "Idempotency-Key": call.occurrence_key,
        "X-Scheduler-Fencing-Token": str(call.fencing_token),
        "X-Scheduler-Scheduled-For": call.scheduled_for,
        "X-Scheduler-Attempt": str(call.attempt),
    }


def check(keys: Any, call: SignedCall, headers: dict[str, str], body: bytes = BODY, now: float = NOW) -> Any:
    return verify_v2(keys, call.method, call.host, call.path, headers, body, now=now)


def test_v2_round_trips_with_every_key_of_the_ring_and_returns_the_signed_values() -> None:
    keys = RING.job_keys("j1")
    header = sign_v2(keys, CALL, BODY, NOW)
    for kid, key in keys.items():
        verified = check({kid: key}, CALL, headers_of(CALL, header))
        assert (verified.key_id, verified.occurrence_key, verified.fencing_token) == (kid, CALL.occurrence_key, 4)
    assert list(keys) == ["k1", "k2"]  # the current key first


@pytest.mark.parametrize(
    "change",
    [
        {"method": "PUT"},
        {"host": "other.example.com"},
        {"path": "/jobs?x=2"},
        {"occurrence_key": "j1:2026-03-01T12:01:00Z"},  # a replay under another Idempotency-Key
        {"fencing_token": 5},  # a replay with a higher token (would fence off the real retries)
        {"scheduled_for": "2026-03-01T12:01:00Z"},
        {"attempt": 3},
    ],
)
def test_v2_fails_when_anything_it_covers_changes(change: dict[str, Any]) -> None:
    header = sign_v2(RING.job_keys("j1"), CALL, BODY, NOW)
    received = dataclasses.replace(CALL, **change)
    with pytest.raises(InvalidSignature, match="does not match"):
        check(RING.job_keys("j1"), received, headers_of(received, header))


def test_v2_fails_for_another_body_another_job_or_an_old_timestamp() -> None:
    header = sign_v2(RING.job_keys("j1"), CALL, BODY, NOW)
    with pytest.raises(InvalidSignature):
        check(RING.job_keys("j1"), CALL, headers_of(CALL, header), body=b'{"invoice":8}')
    with pytest.raises(InvalidSignature):
        check(RING.job_keys("j2"), CALL, headers_of(CALL, header))  # a key verifies its own job's calls only
    with pytest.raises(InvalidSignature, match="tolerance"):
        check(RING.job_keys("j1"), CALL, headers_of(CALL, header), now=NOW + 301)


def test_rotation_add_a_key_then_retire_the_old_one() -> None:
    before = KeyRing.parse('{"current": "k1", "k1": "root-one-0123456789"}')
    receiver_keys = before.job_keys("j1")  # what a receiver fetched before the rotation
    # Step 1: a second root is added and made current; every call is signed with both.
    during = RING
    header = sign_v2(during.job_keys("j1"), CALL, BODY, NOW)
    assert check(receiver_keys, CALL, headers_of(CALL, header)).key_id == "k1"  # old receivers keep working
    assert check(during.job_keys("j1"), CALL, headers_of(CALL, header)).key_id == "k1"
    # Step 2: once receivers fetched the new keys, the old root is removed; the old key stops verifying.
    after = KeyRing.parse('{"current": "k2", "k2": "root-two-0123456789"}')
    header = sign_v2(after.job_keys("j1"), CALL, BODY, NOW)
    assert check(during.job_keys("j1"), CALL, headers_of(CALL, header)).key_id == "k2"
    with pytest.raises(InvalidSignature):
        check(receiver_keys, CALL, headers_of(CALL, header))


def test_v1_stays_verifiable_in_the_same_header_during_the_migration_window() -> None:
    v1_key = tenant_key("master", "alice")
    header = sign_v2(RING.job_keys("j1"), CALL, BODY, NOW, v1_key=v1_key)
    assert verify_v1(v1_key, {SIGNATURE_HEADER: header}, BODY, now=NOW) == NOW
    assert verify_v1(v1_key, {SIGNATURE_HEADER: sign(v1_key, BODY, NOW)}, BODY, now=NOW) == NOW
    with pytest.raises(InvalidSignature, match="no v2 signature"):
        check(RING.job_keys("j1"), CALL, headers_of(CALL, sign(v1_key, BODY, NOW)))


@pytest.mark.parametrize("header", ["t=1800000000,v1=é", "t=١٨٠٠٠٠٠٠٠٠,v1=00", "t=x", "", "v1=00", "t=1,t=2,v1=0"])
def test_v1_verify_raises_only_its_own_error(header: str) -> None:
    with pytest.raises(InvalidSignature):
        verify_v1("key", {SIGNATURE_HEADER: header}, BODY, now=NOW)


@given(
    header=st.text(max_size=80),
    names=st.dictionaries(st.sampled_from(["Idempotency-Key", "X-Scheduler-Attempt", "X-Scheduler-Fencing-Token"]),
                          st.text(max_size=20)),
    key=st.one_of(st.text(max_size=10), st.dictionaries(st.text(max_size=4), st.text(max_size=8))),
)  # fmt: skip
def test_verify_v2_raises_only_invalid_signature_on_any_input(header: str, names: dict[str, str], key: Any) -> None:
    with contextlib.suppress(InvalidSignature):
        check(key, CALL, {SIGNATURE_HEADER: header, **names})


def test_key_ring_refuses_a_bad_configuration() -> None:
    for text in ("[]", '{"k1": "root-one-0123456789"}', '{"current": "k2", "k1": "root-one-0123456789"}',
                 '{"current": "k1", "k1": "short"}', "not json"):  # fmt: skip
        with pytest.raises(ValueError):
            KeyRing.parse(text)
    assert job_key("root", "k1", "j1") != job_key("root", "k2", "j1") != job_key("root", "k1", "j2")


# -- per-job key versions ------------------------------------------------------------------------------------

T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_version_1_of_a_job_key_is_the_key_jobs_had_before_keys_had_versions() -> None:
    assert (
        RING.job_keys("j1", 1)
        == RING.job_keys("j1")
        == {
            "k1": job_key("root-one-0123456789", "k1", "j1"),
            "k2": job_key("root-two-0123456789", "k2", "j1"),
        }
    )


def test_each_version_is_another_key_under_its_own_key_id() -> None:
    v1, v2, v3 = (RING.job_keys("j1", version) for version in (1, 2, 3))
    assert list(v2) == ["k1.2", "k2.2"] and list(v3) == ["k1.3", "k2.3"]
    every = [*v1.values(), *v2.values(), *v3.values(), *RING.job_keys("j2", 2).values()]
    assert len(set(every)) == len(every)
    # A later version's key id is never a root's: roots are alphanumeric
    assert versioned_key_id("k1", 2) == "k1.2"
    with pytest.raises(ValueError):
        versioned_key_id("k1", 0)


def test_the_replaced_version_signs_until_its_overlap_ends_and_not_after() -> None:
    until = T + timedelta(hours=24)
    assert signing_versions(2, until, T) == [2, 1]
    assert signing_versions(2, until, until - timedelta(milliseconds=1)) == [2, 1]
    assert signing_versions(2, until, until) == [2]
    assert signing_versions(2, None, T) == [2]  # revoked: no overlap
    assert signing_versions(1, None, T) == [1]


def test_during_an_overlap_a_receiver_holding_either_version_verifies() -> None:
    keys = RING.signing_keys("j1", signing_versions(2, T + timedelta(hours=1), T))
    assert list(keys) == ["k1.2", "k2.2", "k1", "k2"]
    header = sign_v2(keys, CALL, BODY, NOW)
    for held in (RING.job_keys("j1", 1), RING.job_keys("j1", 2)):
        assert verify_v2(held, "POST", CALL.host, CALL.path, headers_of(CALL, header), BODY, now=NOW).key_id in held
    # After it, only the new version signs: a receiver holding only the old one fails closed
    after = sign_v2(RING.signing_keys("j1", signing_versions(2, T, T)), CALL, BODY, NOW)
    with pytest.raises(InvalidSignature):
        verify_v2(RING.job_keys("j1", 1), "POST", CALL.host, CALL.path, headers_of(CALL, after), BODY, now=NOW)


VECTORS = json.loads((Path(__file__).resolve().parents[1] / "sdk" / "receiver" / "vectors.json").read_text())


@pytest.mark.parametrize("vector", VECTORS["vectors"], ids=[v["name"] for v in VECTORS["vectors"]])
def test_the_worker_signs_each_test_vector_byte_for_byte(vector: dict[str, Any]) -> None:
    # The SDK's side of the same vectors: tests/sdk/receiver/test_vectors.py
    request, headers = vector["request"], vector["request"]["headers"]
    call = SignedCall(
        request["method"],
        request["host"],
        request["path"],
        headers["Idempotency-Key"],
        int(headers["X-Scheduler-Fencing-Token"]),
        headers["X-Scheduler-Scheduled-For"],
        int(headers["X-Scheduler-Attempt"]),
    )
    body = request["body"].encode()
    for kid in vector["keys"]:
        assert canonical_v2(vector["timestamp"], kid, call, body).decode() == vector["canonical_v2"][kid]
    header = sign_v2(vector["keys"], call, body, vector["timestamp"], v1_key=vector["v1_key"])
    assert header == vector["signature_header"]
