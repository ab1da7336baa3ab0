"""The console's SigV4 signing (aws4fetch, vendored) in a real browser, against botocore's `SigV4Auth`.

On AWS the console signs every API call with the user's own credentials (docs/console.md); the local stack takes a
bearer token, so the browser test of the pages never signs. Here chromium signs in through the console's form with
fixed AWS credentials and a fixed clock, then sends fixed requests through the console's own client (`api.js`).
Each request, as it left the browser, must carry the Authorization header that botocore computes for the same
method, URL, headers and body at the same time, for the service `execute-api` and the region typed in: so a console
that signs for another service or region, hashes another body than it sends, or leaves a header unsigned, fails.

The files come from a small `http.server` on 127.0.0.1 that serves `functions/scheduler/console/` at `/console/`:
signing needs the console's files and nothing of the local stack (no emulator, no API process); the browser
captures the requests to `/v1/` and answers them itself.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from harness import Browser

from scheduler_local.emulators import ROOT
from tests.sdk.http_server import serving

pytestmark = pytest.mark.system

CONSOLE = ROOT / "functions" / "scheduler" / "console"
CREDENTIALS = {
    "accessKeyId": "AKIDEXAMPLE",
    "secretAccessKey": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
    "sessionToken": "IQoJb3JpZ2luX2VjEXAMPLE/session+token==",
    "region": "eu-west-3",
}
#: The browser's clock and botocore's, fixed to the same instant.
SIGNED_AT = datetime(2026, 3, 14, 15, 9, 26)
#: Sent through `api.js`'s `call()` after sign-in: a body with an extra header, a path that needs encoding, and a
#: query with a repeated parameter and characters that need encoding.
REQUESTS: list[dict[str, Any]] = [
    {
        "method": "POST",
        "path": "/v1/jobs/bulk",
        "body": {"action": "pause", "selector": {"labels": {"customer": "42"}}},
        "headers": {"Idempotency-Key": "console-bulk-00112233445566778899aabbccddeeff"},
    },
    {"method": "GET", "path": "/v1/jobs/by-external-id/order%20981%3Ax", "body": None, "headers": {}},
    {"method": "GET", "path": "/v1/jobs?label=tier%3A&label=customer%3A42&limit=50", "body": None, "headers": {}},
    {"method": "DELETE", "path": "/v1/jobs/01J0000000000000000000000X", "body": None, "headers": {}},
]


class ConsoleFiles(SimpleHTTPRequestHandler):
    """The console's folder at /console/ and nothing else, with the module scripts' JavaScript type."""

    extensions_map = {".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css", ".html": "text/html"}

    def translate_path(self, path: str) -> str:
        route = urlsplit(path).path
        if not route.startswith("/console/"):
            return str(CONSOLE / "missing")
        return super().translate_path(route.removeprefix("/console"))

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def console_files() -> Iterator[str]:
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), partial(ConsoleFiles, directory=str(CONSOLE)))) as url:
        yield url


def signed_by_botocore(sent: dict[str, Any], headers: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> str:
    """The Authorization header botocore computes for the request as it was sent, with `headers` besides Host."""
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *args, **kwargs: SIGNED_AT)
    body = (sent["body"] or "").encode()
    request = AWSRequest(method=sent["method"], url=sent["url"], data=body, headers=headers)
    credentials = Credentials(CREDENTIALS["accessKeyId"], CREDENTIALS["secretAccessKey"], CREDENTIALS["sessionToken"])
    SigV4Auth(credentials, "execute-api", CREDENTIALS["region"]).add_auth(request)
    assert request.headers["X-Amz-Date"] == SIGNED_AT.strftime("%Y%m%dT%H%M%SZ")
    return str(request.headers["Authorization"])


def test_the_console_signs_as_botocore_does(
    console_files: str, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the console signed in with AWS credentials at a fixed time
    given = {
        "base": console_files,
        "credentials": CREDENTIALS,
        "time": SIGNED_AT.isoformat() + "Z",
        "requests": REQUESTS,
        "openapi": str(ROOT / "docs" / "openapi.json"),
    }
    # When it sends its own requests (sign-in's) and the fixed ones
    result = browser.run("console_signing_browser.py", given, timeout=120)
    assert result.returncode == 0, result.stderr[-4000:]
    sent = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]

    # Then each carries botocore's signature for what it sent
    expected = [
        {"method": "GET", "path": "/v1/openapi.json", "body": None, "headers": {}},
        {"method": "GET", "path": "/v1/jobs?limit=50", "body": None, "headers": {}},
        *REQUESTS,
    ]
    assert [(s["method"], s["url"]) for s in sent] == [(e["method"], console_files + e["path"]) for e in expected]
    for request, want in zip(sent, expected, strict=True):
        got = request["headers"]
        if want["body"] is not None:
            assert json.loads(request["body"]) == want["body"]
            assert got["content-type"] == "application/json"
        else:
            assert not request["body"]
        # The signed headers: all the console sets but Content-Type, which aws4fetch never signs (SigV4 requires only
        # Host and X-Amz-Date; API Gateway checks the headers the signature names).
        headers = {"Accept": "application/json", **want["headers"], "X-Amz-Security-Token": CREDENTIALS["sessionToken"]}
        signed = {name.lower() for name in headers} | {"host", "x-amz-date"}
        assert got["authorization"] == signed_by_botocore(request, headers, monkeypatch), request["url"]
        assert got["authorization"].split("SignedHeaders=")[1].split(",")[0].split(";") == sorted(signed)
        assert got["x-amz-date"] == "20260314T150926Z"
        assert {name: got[name.lower()] for name in headers} == headers  # what was signed is what was sent
