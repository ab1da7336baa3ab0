"""The sealers of secrets at rest (KMS envelope, local key) and the http target opening a job's sealed headers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws

from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.http_target import HttpTargetInvoker
from scheduler.adapters.sealing import KmsSealer, LocalSealer
from scheduler.core.jobs.secrecy import sealed
from scheduler.core.model.job import Job, JobSpec, JobState
from scheduler.core.ports import SealFailed, TargetCall, TargetFailure
from scheduler.security.signing import KeyRing
from scheduler.settings import LOCAL_SIGNING_KEYS

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
CONTEXT = {"job_id": "j1", "tenant": "acme"}


class CountingKms:
    """A KMS client that counts its Decrypt calls."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.decrypts = 0

    def generate_data_key(self, **kwargs: Any) -> Any:
        return self.client.generate_data_key(**kwargs)

    def decrypt(self, **kwargs: Any) -> Any:
        self.decrypts += 1
        return self.client.decrypt(**kwargs)


@pytest.fixture
def kms(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[CountingKms, str]]:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_KMS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    with mock_aws():
        client = boto3.client("kms", region_name="us-east-1")
        key_id = client.create_key(Description="punctual header sealing")["KeyMetadata"]["KeyId"]
        yield CountingKms(client), key_id


def test_kms_sealer_round_trips_and_asks_kms_once_per_data_key(kms: tuple[CountingKms, str]) -> None:
    client, key_id = kms
    sealer = KmsSealer(key_id, client)

    value = sealer.seal(b'{"Authorization":"Bearer s3cret"}', CONTEXT)

    assert value.startswith("kms1.") and "s3cret" not in value
    assert sealer.open(value, CONTEXT) == b'{"Authorization":"Bearer s3cret"}'
    assert sealer.open(value, CONTEXT) == b'{"Authorization":"Bearer s3cret"}'
    assert client.decrypts == 1
    # another process (no cached key) opens it too
    assert KmsSealer(key_id, client).open(value, CONTEXT) == b'{"Authorization":"Bearer s3cret"}'


def test_kms_sealer_refuses_another_jobs_context(kms: tuple[CountingKms, str]) -> None:
    client, key_id = kms
    value = KmsSealer(key_id, client).seal(b"x", CONTEXT)
    with pytest.raises(SealFailed):
        KmsSealer(key_id, client).open(value, {**CONTEXT, "job_id": "j2"})


@pytest.mark.parametrize("value", ["kms1.AAAA.AAAA.AAAA", "plain text", "local1.!!.??"])
def test_local_sealer_refuses_what_it_did_not_seal(value: str) -> None:
    with pytest.raises(SealFailed):
        LocalSealer("secret").open(value, CONTEXT)


def test_local_sealer_refuses_a_tampered_value() -> None:
    sealer = LocalSealer("secret")
    value = sealer.seal(b"hello", CONTEXT)
    tampered = value[:-2] + ("A" if value[-2] != "A" else "B") + value[-1]
    with pytest.raises(SealFailed):
        sealer.open(tampered, CONTEXT)


def _job(headers: dict[str, str]) -> Job:
    body = {
        "schedule": {"type": "once", "at": "2030-01-01T00:00:00Z"},
        "target": {"type": "http", "url": "http://127.0.0.1/hook", "headers": headers},
    }
    spec = JobSpec.model_validate(body)
    return Job(job_id="j1", tenant="t", spec=spec, version=1, state=JobState.ACTIVE, created_at=T0, updated_at=T0)


class _Sent(Exception):
    pass


def _sent_headers(invoker: HttpTargetInvoker, job: Job, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    seen: dict[str, str] = {}

    def exchange(connection: Any, timeout: float, method: str, path: str, body: bytes, headers: Any, **_: Any) -> Any:
        seen.update(headers)
        raise _Sent

    monkeypatch.setattr(invoker, "_exchange", exchange)
    with pytest.raises(_Sent):
        invoker.invoke(TargetCall(job, "j1:x", T0, 1, 1, lambda: None, T0))
    return seen


def test_the_http_target_sends_the_opened_values(monkeypatch: pytest.MonkeyPatch) -> None:
    sealer = LocalSealer("secret")
    job = sealed(_job({"Authorization": "Bearer s3cret", "X-Signature": "sig"}), sealer, {})
    assert job.sealed_headers is not None
    guard = AddressGuard(True, resolver=lambda h, p: ["127.0.0.1"])

    invoker = HttpTargetInvoker(guard, KeyRing.parse(LOCAL_SIGNING_KEYS), sealer=sealer)

    headers = _sent_headers(invoker, job, monkeypatch)

    assert headers["Authorization"] == "Bearer s3cret" and headers["X-Signature"] == "sig"


def test_the_http_target_sends_nothing_when_sealed_values_do_not_open(monkeypatch: pytest.MonkeyPatch) -> None:
    job = sealed(_job({"Authorization": "Bearer s3cret"}), LocalSealer("secret"), {})
    guard = AddressGuard(True, resolver=lambda h, p: ["127.0.0.1"])
    invoker = HttpTargetInvoker(guard, KeyRing.parse(LOCAL_SIGNING_KEYS), sealer=LocalSealer("another"))

    with pytest.raises(TargetFailure) as refused:
        _sent_headers(invoker, job, monkeypatch)

    assert refused.value.kind == "permanent"
