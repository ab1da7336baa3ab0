"""The SDK's own copy of signature v2 accepts what punctual's `scheduler.security.signing` produces, and refuses a
change to any field the signature covers; v1 likewise; every refusal is an InvalidSignature (a 401), never a crash."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

import pytest

from punctual_sdk.receiver import InvalidSignature, StaleRequest, UnknownKey, verify_v1, verify_v2
from punctual_sdk.receiver import signature as sdk
from scheduler.security import signing
from tests.sdk.receiver.signed import KEYS, NOW, Request, signed_request


def verify(request: Request, keys: Mapping[str, str] = KEYS, now: float = NOW) -> sdk.VerifiedCall:
    return verify_v2(keys, request.method, request.host, request.path, request.headers, request.body, now=now)


def test_the_sdk_accepts_a_call_signed_by_the_scheduler_and_returns_the_signed_values() -> None:
    request = signed_request(token=9, attempt=3)

    call = verify(request)

    assert (call.occurrence_key, call.fencing_token, call.attempt, call.key_id) == (
        "job-1:2026-12-01T08:00:00Z",
        9,
        3,
        "k1",
    )
    assert call.scheduled_for == "2026-12-01T08:00:00Z"
    assert call.timestamp == NOW


def test_the_canonical_string_is_the_schedulers_byte_for_byte() -> None:
    call = sdk.SignedCall("post", "Host.Example", "/a?b=1", "key", 3, "2026-12-01T08:00:00Z", 2)
    theirs = signing.SignedCall(**call.__dict__)

    assert sdk.canonical_v2(NOW, "k9", call, b"{}") == signing.canonical_v2(NOW, "k9", theirs, b"{}")


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda r: replace(r, method="PUT"), id="method"),
        pytest.param(lambda r: replace(r, host="evil.example:8080"), id="host"),
        pytest.param(lambda r: replace(r, path="/hooks/refund?x=1"), id="path"),
        pytest.param(lambda r: replace(r, path="/hooks/pay?x=2"), id="query"),
        pytest.param(lambda r: replace(r, body=r.body + b" "), id="body"),
        pytest.param(lambda r: r.headers.update({"Idempotency-Key": "job-1:other"}), id="occurrence key"),
        pytest.param(lambda r: r.headers.update({"X-Scheduler-Fencing-Token": "8"}), id="fencing token"),
        pytest.param(lambda r: r.headers.update({"X-Scheduler-Attempt": "2"}), id="attempt"),
        pytest.param(
            lambda r: r.headers.update({"X-Scheduler-Scheduled-For": "2026-12-02T08:00:00Z"}), id="scheduled for"
        ),
        pytest.param(
            lambda r: r.headers.update(
                {"X-Scheduler-Signature": r.headers["X-Scheduler-Signature"].replace(f"t={NOW}", f"t={NOW + 1}")}
            ),
            id="timestamp",
        ),
    ],
)
def test_a_change_to_any_signed_field_is_refused(tamper: Callable[[Request], Request | None]) -> None:
    # Given a call the scheduler signed, which verifies as sent
    request = signed_request()
    verify(request)

    # When one signed field is changed in transit
    changed = tamper(request) or request

    # Then the SDK refuses it
    with pytest.raises(InvalidSignature, match="does not match"):
        verify(changed)


def test_another_jobs_key_under_the_same_key_id_does_not_verify() -> None:
    request = signed_request()
    other = signing.KeyRing.parse('{"current": "k1", "k1": "root-secret-number-one"}').job_keys("job-2")

    with pytest.raises(InvalidSignature, match="does not match"):
        verify(request, keys=other)


def test_a_call_outside_the_tolerance_is_a_stale_request() -> None:
    request = signed_request()

    with pytest.raises(StaleRequest, match="tolerance"):
        verify(request, now=NOW + 301)
    with pytest.raises(StaleRequest):
        verify(request, now=NOW - 301)
    assert verify(request, now=NOW + 300).timestamp == NOW


def test_a_call_under_key_ids_the_receiver_lacks_is_an_unknown_key() -> None:
    request = signed_request(keys={"k2": "a-key-the-receiver-has-not-fetched"})

    with pytest.raises(UnknownKey, match="k2"):
        verify(request)


def test_during_a_rotation_either_key_verifies() -> None:
    ring = signing.KeyRing.parse('{"current": "k2", "k1": "root-secret-number-one", "k2": "root-secret-number-two"}')
    request = signed_request(keys=ring.job_keys("job-1"))

    assert verify(request, keys={"k1": KEYS["k1"]}).key_id == "k1"
    assert verify(request, keys=ring.job_keys("job-1")).key_id == "k2"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"X-Scheduler-Signature": "garbage"},
        {"X-Scheduler-Signature": "t=abc,v2=k1:00"},
        {"X-Scheduler-Signature": f"t={NOW},v1=00"},
        {"X-Scheduler-Signature": f"t={NOW},t={NOW},v2=k1:00"},
        {"X-Scheduler-Signature": f"t={NOW},v2=k1:é"},
    ],
)
def test_malformed_headers_are_refused_as_invalid_signatures(headers: dict[str, str]) -> None:
    request = signed_request()
    request.headers = {k: v for k, v in request.headers.items() if k != "X-Scheduler-Signature"} | headers

    with pytest.raises(InvalidSignature):
        verify(request)


@pytest.mark.parametrize("name", ["Idempotency-Key", "X-Scheduler-Fencing-Token", "X-Scheduler-Attempt"])
def test_a_missing_or_repeated_signed_header_is_refused(name: str) -> None:
    request = signed_request()
    value = request.headers.pop(name)
    with pytest.raises(InvalidSignature, match=name):
        verify(request)

    request.headers[name] = value
    request.headers[name.lower()] = value
    with pytest.raises(InvalidSignature, match=name):
        verify(request)


def test_unreadable_input_is_an_invalid_signature_not_a_crash() -> None:
    request = signed_request()

    with pytest.raises(InvalidSignature, match="unreadable"):
        verify_v2(KEYS, "POST", request.host, request.path, request.headers, None, now=NOW)  # type: ignore[arg-type]


def test_v1_accepts_the_schedulers_v1_signature_and_refuses_a_changed_body() -> None:
    key = signing.tenant_key("master", "dev")
    body = b'{"a":1}'
    headers = {"X-Scheduler-Signature": signing.sign(key, body, timestamp=NOW)}

    assert verify_v1(key, headers, body, now=NOW) == NOW
    with pytest.raises(InvalidSignature, match="does not match"):
        verify_v1(key, headers, body + b" ", now=NOW)
    with pytest.raises(StaleRequest):
        verify_v1(key, headers, body, now=NOW + 301)


def test_a_receiver_with_a_v1_key_accepts_a_v1_only_call_but_never_lets_v1_stand_in_for_a_failed_v2() -> None:
    from punctual_sdk.receiver import InMemoryDedupeStore, Receiver

    v1_key = signing.tenant_key("master", "dev")
    receiver = Receiver(InMemoryDedupeStore(), lambda job_id: KEYS, v1_key=v1_key, clock=lambda: NOW)
    request = signed_request()
    v1_only = signing.sign(v1_key, request.body, timestamp=NOW)

    request.headers["X-Scheduler-Signature"] = v1_only
    call = receiver.verify(request.method, request.host, request.path, request.headers, request.body)
    assert (call.key_id, call.fencing_token) == ("v1", 7)

    # a call that carries v2 is judged by v2: a valid v1 next to a forged v2 is refused
    request.headers["X-Scheduler-Signature"] = f"{v1_only},v2=k1:{'0' * 64}"
    with pytest.raises(InvalidSignature, match="does not match"):
        receiver.verify(request.method, request.host, request.path, request.headers, request.body)


def test_a_versioned_key_id_of_a_rotated_job_key_verifies() -> None:
    # a job's rotated key is signed under `<root id>.<version>` next to the one it replaces, during the overlap
    keys = {"local1.2": "the-new-version-of-the-job-key", "local1": "the-old-version-of-the-job-key"}
    request = signed_request(keys=keys)

    assert verify(request, keys={"local1.2": keys["local1.2"]}).key_id == "local1.2"
    assert verify(request, keys={"local1": keys["local1"]}).key_id == "local1"


@pytest.mark.parametrize("digits", [400, 5000], ids=["past a float", "past int() itself"])
def test_an_overlong_timestamp_is_an_invalid_signature_on_every_path(digits: int) -> None:
    from punctual_sdk.receiver import InMemoryDedupeStore, Receiver

    request = signed_request()
    request.headers["X-Scheduler-Signature"] = f"t={'9' * digits},v1={'0' * 64},v2=k1:{'0' * 64}"
    v1_only = {**request.headers, "X-Scheduler-Signature": f"t={'9' * digits},v1={'0' * 64}"}
    receivers = [
        Receiver(InMemoryDedupeStore(), lambda job_id: KEYS, v1_key="tenant-key"),
        Receiver(InMemoryDedupeStore(), lambda job_id: KEYS),
    ]

    for receiver in receivers:
        for headers in (request.headers, v1_only):
            with pytest.raises(InvalidSignature, match="t=<unix seconds>"):
                receiver.verify(request.method, request.host, request.path, headers, request.body)
    # the receiver's real clock (a float) as well as a given one
    for now in (None, NOW):
        with pytest.raises(InvalidSignature, match="t=<unix seconds>"):
            verify_v2(KEYS, request.method, request.host, request.path, request.headers, request.body, now=now)
        with pytest.raises(InvalidSignature, match="t=<unix seconds>"):
            verify_v1("tenant-key", request.headers, request.body, now=now)


@pytest.mark.parametrize("name", ["X-Scheduler-Fencing-Token", "X-Scheduler-Attempt"])
def test_an_overlong_number_in_a_signed_header_is_an_invalid_signature(name: str) -> None:
    from punctual_sdk.receiver import InMemoryDedupeStore, Receiver

    v1_key = signing.tenant_key("master", "dev")
    receiver = Receiver(InMemoryDedupeStore(), lambda job_id: KEYS, v1_key=v1_key, clock=lambda: NOW)
    request = signed_request()
    request.headers[name] = "9" * 5000
    request.headers["X-Scheduler-Signature"] = signing.sign(v1_key, request.body, timestamp=NOW)

    with pytest.raises(InvalidSignature, match=f"{name} is not a number"):
        receiver.verify(request.method, request.host, request.path, request.headers, request.body)
    with pytest.raises(InvalidSignature, match=f"{name} is not a number"):
        verify(request)
