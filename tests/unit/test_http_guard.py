"""The http target's SSRF guard and header rules, tested with a fake resolver and a socket that must never be
opened: no test sends anything to the addresses named here (docs/security.md)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from scheduler.adapters.address_guard import AddressGuard, classify, literal_address
from scheduler.adapters.http_target import HttpTargetInvoker
from scheduler.core.errors import InvalidRequest
from scheduler.core.model.job import Job, JobSpec, JobState, header_problem, redact_headers
from scheduler.core.ports import TargetCall, TargetFailure
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS

T0 = datetime(2026, 3, 1, tzinfo=UTC)

FORBIDDEN = [
    "169.254.169.254", "169.254.0.1", "fe80::1", "fe80::1%eth0", "fd00:ec2::254", "100.100.100.200", "0.0.0.0",
    "0.1.2.3", "::", "224.0.0.1", "ff02::1", "255.255.255.255", "240.0.0.1",
    "::ffff:169.254.169.254", "::ffff:a9fe:a9fe", "::169.254.169.254",
    "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
    "64:ff9b::a9fe:a9fe", "64:ff9b::169.254.169.254", "64:ff9b:1::a9fe:a9fe",  # NAT64 of it
]  # fmt: skip
PRIVATE = ["127.0.0.1", "10.1.2.3", "192.168.1.1", "172.16.0.1", "100.64.0.1", "::1", "fd12::1", "::ffff:10.0.0.1",
           "2002:0a00:0001::1", "64:ff9b::a00:1"]  # fmt: skip
PUBLIC = ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "2002:5db8:d822::1", "64:ff9b::5db8:d822",
          "::ffff:93.184.216.34"]  # fmt: skip


@pytest.mark.parametrize("address", FORBIDDEN)
def test_link_local_metadata_and_reserved_addresses_are_forbidden_in_every_mode(address: str) -> None:
    assert classify(address) == "forbidden"
    for allow_private in (False, True):
        assert AddressGuard(allow_private).refusal(address) is not None


@pytest.mark.parametrize("address", PRIVATE)
def test_private_addresses_are_allowed_only_in_local_mode(address: str) -> None:
    assert classify(address) == "private"
    assert AddressGuard(False).refusal(address) is not None
    assert AddressGuard(True).refusal(address) is None


@pytest.mark.parametrize("address", PUBLIC)
def test_public_addresses_pass(address: str) -> None:
    assert classify(address) == "public"


@pytest.mark.parametrize(
    "host", ["2852039166", "0251.0376.0251.0376", "0xa9fea9fe", "0xA9.0xFE.0xA9.0xFE", "169.254.43518", "169.16689662"]
)
def test_numeric_spellings_are_the_ipv4_address_they_spell(host: str) -> None:
    assert str(literal_address(host)) == "169.254.169.254"


def spec(url: str, **target: Any) -> JobSpec:
    return JobSpec.model_validate(
        {"schedule": {"type": "once", "at": "2030-01-01T00:00:00Z"}, "target": {"type": "http", "url": url, **target}}
    )


def never_resolve(host: str, port: int) -> list[str]:
    raise AssertionError(f"a literal address was resolved: {host}")


@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/", "http://2852039166/",
     "http://0251.0376.0251.0376/", "http://[::ffff:169.254.169.254]/", "http://[2002:a9fe:a9fe::1]/",
     "http://[64:ff9b::a9fe:a9fe]/", "http://0x7f000001.example/"],
)  # fmt: skip
def test_submit_refuses_forbidden_literals_even_in_local_mode(url: str) -> None:
    guard = AddressGuard(True, resolver=lambda host, port: ["169.254.169.254"])
    with pytest.raises(InvalidRequest) as refused:
        guard.check_spec(spec(url))
    assert refused.value.field == "target.url"


def test_submit_refuses_a_name_that_resolves_to_metadata_or_6to4_of_it() -> None:
    for answer in (["169.254.169.254"], ["2002:a9fe:a9fe::1"], ["93.184.216.34", "64:ff9b::a9fe:a9fe"]):
        guard = AddressGuard(True, resolver=lambda host, port, answer=answer: answer)
        with pytest.raises(InvalidRequest, match="link-local, cloud-metadata"):
            guard.check_spec(spec("https://metadata.example.com/"))


def test_local_mode_still_allows_loopback_and_private_ranges() -> None:
    guard = AddressGuard(True, resolver=lambda host, port: ["10.0.0.5"])
    guard.check_spec(spec("http://127.0.0.1:8080/hook"))
    guard.check_spec(spec("http://localhost:8080/hook"))
    guard.check_spec(spec("http://receiver.example/hook"))
    with pytest.raises(InvalidRequest):
        AddressGuard(False, resolver=lambda host, port: ["10.0.0.5"]).check_spec(spec("http://receiver.example/"))


def call_of(job_spec: JobSpec) -> TargetCall:
    job = Job(job_id="j1", tenant="t", spec=job_spec, version=1, state=JobState.ACTIVE, created_at=T0, updated_at=T0)
    return TargetCall(job, "j1:x", T0, 1, 1, lambda: None, T0)


@pytest.mark.parametrize("answer", [["169.254.169.254"], ["2002:a9fe:a9fe::1"], ["::ffff:169.254.169.254"]])
def test_call_time_refusal_comes_before_any_connection(no_connections: list[Any], answer: list[str]) -> None:
    # DNS rebinding: the name resolved to a public address at submit, to the metadata address now
    guard = AddressGuard(True, resolver=lambda host, port: answer)
    invoker = HttpTargetInvoker(guard, KeyRing.parse(LOCAL_SIGNING_KEYS))
    with pytest.raises(TargetFailure) as refused:
        invoker.invoke(call_of(spec("https://rebind.example.com/hook")))
    assert refused.value.kind == "permanent"
    assert no_connections == []


@pytest.mark.parametrize(
    "headers, bad",
    [
        ({"Transfer-Encoding": "chunked"}, "Transfer-Encoding"),
        ({"connection": "close"}, "connection"),
        ({"Expect": "100-continue"}, "Expect"),
        ({"Upgrade": "h2c"}, "Upgrade"),
        ({"TE": "trailers"}, "TE"),
        ({"Bad Name": "x"}, "Bad Name"),
        ({"X-A": "a\r\nX-Injected: 1"}, "X-A"),
        ({"X-A": "a\x00"}, "X-A"),
        ({"X-A": "1", "x-a": "2"}, "x-a"),
    ],
)
def test_header_rules_name_the_offending_header(headers: dict[str, str], bad: str) -> None:
    problem = header_problem(headers)
    assert problem is not None and problem[0] == bad


def test_a_stored_job_with_a_refused_header_is_not_sent(no_connections: list[Any]) -> None:
    invoker = HttpTargetInvoker(
        AddressGuard(True, resolver=lambda h, p: ["127.0.0.1"]), KeyRing.parse(LOCAL_SIGNING_KEYS)
    )
    with pytest.raises(TargetFailure, match="hop-by-hop"):
        invoker.invoke(call_of(spec("http://127.0.0.1/", headers={"Transfer-Encoding": "chunked"})))
    assert no_connections == []


def test_every_header_value_is_redacted_unless_public() -> None:
    headers = {
        "Authorization": "Bearer s3cret",
        "X-Signature": "sig",
        "X-Hub-Signature-256": "sha256=ab",
        "X-Tenant": "acme",
        "Accept": "application/json",
    }
    shown = redact_headers(headers, public=["x-tenant"])
    assert shown == {
        "Authorization": "<redacted>",
        "X-Signature": "<redacted>",
        "X-Hub-Signature-256": "<redacted>",
        "X-Tenant": "acme",
        "Accept": "application/json",
    }
