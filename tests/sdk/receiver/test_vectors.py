"""The signature test vectors (`vectors.json`, beside this file), on the SDK's side: the receiver kit builds each
vector's canonical string byte for byte, accepts its header under each of its keys and returns the signed values,
and refuses it once the body changes. The worker's side signs the same vectors (tests/unit/test_signing.py)."""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any

import pytest

from punctual_sdk.receiver import InvalidSignature, verify_v1, verify_v2
from punctual_sdk.receiver import signature as sdk

VECTORS: list[dict[str, Any]] = json.loads((Path(__file__).parent / "vectors.json").read_text())["vectors"]


def _headers(vector: dict[str, Any]) -> dict[str, str]:
    return {**vector["request"]["headers"], sdk.SIGNATURE_HEADER: vector["signature_header"]}


def _verify(vector: dict[str, Any], keys: dict[str, str], body: bytes | None = None) -> sdk.VerifiedCall:
    request = vector["request"]
    given = request["body"].encode() if body is None else body
    return verify_v2(
        keys, request["method"], request["host"], request["path"], _headers(vector), given, now=vector["timestamp"]
    )


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_the_sdk_builds_each_canonical_string_and_its_signature_byte_for_byte(vector: dict[str, Any]) -> None:
    request = vector["request"]
    headers = request["headers"]
    call = sdk.signed_call(request["method"], request["host"], request["path"], headers)
    for kid, key in vector["keys"].items():
        canonical = sdk.canonical_v2(vector["timestamp"], kid, call, request["body"].encode())
        assert canonical.decode() == vector["canonical_v2"][kid]
        mac = hmac.new(key.encode(), canonical, hashlib.sha256).hexdigest()
        assert f"v2={kid}:{mac}" in vector["signature_header"].split(",")


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_the_sdk_accepts_each_vector_under_each_of_its_keys(vector: dict[str, Any]) -> None:
    headers = vector["request"]["headers"]
    for kid, key in vector["keys"].items():
        call = _verify(vector, {kid: key})
        assert call.key_id == kid
        assert (call.occurrence_key, str(call.fencing_token), call.scheduled_for, str(call.attempt)) == (
            headers["Idempotency-Key"],
            headers["X-Scheduler-Fencing-Token"],
            headers["X-Scheduler-Scheduled-For"],
            headers["X-Scheduler-Attempt"],
        )
    if vector["v1_key"] is not None:
        body = vector["request"]["body"].encode()
        assert verify_v1(vector["v1_key"], _headers(vector), body, now=vector["timestamp"]) == vector["timestamp"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["name"] for v in VECTORS])
def test_the_sdk_refuses_a_vector_whose_body_changed(vector: dict[str, Any]) -> None:
    with pytest.raises(InvalidSignature, match="does not match"):
        _verify(vector, vector["keys"], body=vector["request"]["body"].encode() + b" ")
