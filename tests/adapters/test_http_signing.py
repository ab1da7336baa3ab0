"""The http target signs with the job's key version and, during a rotation's overlap, with the version it replaced
too: a receiver holding either key verifies a call sent during the overlap, and only the new one after it
(docs/security.md). Each test runs a real HTTP server on 127.0.0.1 that keeps the headers of the calls it gets."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from punctual_sdk.receiver import InvalidSignature, verify_v2
from scheduler.adapters.address_guard import AddressGuard
from scheduler.adapters.http_target import HttpTargetInvoker
from scheduler.core.model.job import Job, JobSpec, JobState
from scheduler.core.ports import TargetCall
from scheduler.security.signing import SIGNATURE_HEADER, KeyRing
from tests.sdk.http_server import Quiet, serving

T0 = datetime(2026, 3, 1, tzinfo=UTC)
RING = KeyRing.parse('{"current": "k1", "k1": "root-one-0123456789"}')


class Receiver(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, str], bytes]] = []
        super().__init__(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class Handler(Quiet, BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.calls.append((self.path, dict(self.headers.items()), body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    with serving(server):
        yield server


def rotated_job(url: str, previous_until: datetime | None) -> TargetCall:
    spec = JobSpec.model_validate({"schedule": {"type": "once", "at": "2026-03-01T00:00:00Z"},
                                   "target": {"type": "http", "url": url}})  # fmt: skip
    job = Job(job_id="j1", tenant="t", spec=spec, version=2, state=JobState.ACTIVE, created_at=T0, updated_at=T0,
              key_version=2, previous_key_until=previous_until)  # fmt: skip
    return TargetCall(job, "j1:x", T0, 1, 1, lambda: None, T0)


def send_at(receiver: Receiver, when: datetime, previous_until: datetime | None) -> tuple[str, dict[str, str], bytes]:
    invoker = HttpTargetInvoker(AddressGuard(True), RING, now=when.timestamp)
    assert invoker.invoke(rotated_job(receiver.url, previous_until)) == "HTTP 200"
    return receiver.calls[-1]


def verifies(keys: dict[str, str], call: tuple[str, dict[str, str], bytes], when: datetime) -> bool:
    path, headers, body = call
    try:
        verify_v2(keys, "POST", headers["Host"], path, headers, body, now=when.timestamp())
    except InvalidSignature:
        return False
    return True


def test_during_the_overlap_both_versions_sign_and_after_it_only_the_new_one(receiver: Receiver) -> None:
    until = T0 + timedelta(hours=24)
    old, new = RING.job_keys("j1", 1), RING.job_keys("j1", 2)

    # During the overlap: two v2 signatures, the new version first; a receiver holding either key verifies
    during = T0 + timedelta(hours=23)
    call = send_at(receiver, during, until)
    assert [item.split(":")[0] for item in call[1][SIGNATURE_HEADER].split(",")[1:]] == ["v2=k1.2", "v2=k1"]
    assert verifies(old, call, during) and verifies(new, call, during)

    # After it: only the new version signs, and the old key no longer verifies
    after = until
    call = send_at(receiver, after, until)
    assert [item.split(":")[0] for item in call[1][SIGNATURE_HEADER].split(",")[1:]] == ["v2=k1.2"]
    assert verifies(new, call, after) and not verifies(old, call, after)


def test_after_a_revoke_only_the_new_version_signs(receiver: Receiver) -> None:
    call = send_at(receiver, T0, None)
    assert verifies(RING.job_keys("j1", 2), call, T0)
    assert not verifies(RING.job_keys("j1", 1), call, T0)
