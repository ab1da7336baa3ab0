"""punctual's own API, called over HTTPS with SigV4 (`execute-api`) as the function's own IAM role: how a deployed
function (the jobs-as-code provider, scheduler.handlers.scheduled_job) reaches the API like any client, through API
Gateway's authentication, so that its jobs are its role's own tenant's.

Every request ends within its timeout; an answer that is not JSON, or no answer at all, is an `ApiAnswer` whose
problem says so (status 0: the request did not get through), never an exception.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

#: Below the provider function's own timeout, with room for a retry and the answer to CloudFormation.
REQUEST_TIMEOUT_SECONDS = 20.0


@dataclass(frozen=True)
class ApiAnswer:
    """One answer of the API: its status (0: none came), its JSON body, and its headers (lower-case names)."""

    status: int
    body: Mapping[str, Any] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def problem(self) -> str:
        """What went wrong, as the API's problem detail (RFC 9457) tells it: `<status> <title>: <detail>`."""
        title = str(self.body.get("title") or "")
        detail = str(self.body.get("detail") or "")
        said = ": ".join(part for part in (title, detail) if part)
        return f"{self.status} {said}".strip() if self.status else said or "no answer"


class SignedApi:
    """The API at `base_url` (the stage's URL, ending with `/`), each request signed for `region`."""

    def __init__(
        self,
        base_url: str,
        region: str,
        credentials: Credentials,
        *,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("https", "http") or not parts.netloc:
            raise ValueError(f"the API's URL {base_url!r} is not an http(s) URL")
        self.base_url = base_url if base_url.endswith("/") else f"{base_url}/"
        self.region = region
        self.credentials = credentials
        self.timeout = timeout

    def request(self, method: str, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> ApiAnswer:
        """`method` `path` (relative to the stage, e.g. `v1/jobs`) with `body` as JSON, signed."""
        url = self.base_url + path.lstrip("/")
        data = json.dumps(body, separators=(",", ":")).encode() if body is not None else None
        sent = {"Accept": "application/json", **(headers or {})}
        if data is not None:
            sent["Content-Type"] = "application/json"
        signed = AWSRequest(method=method, url=url, data=data, headers=sent)
        SigV4Auth(self.credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(signed)
        request = urllib.request.Request(url, data=data, method=method, headers=dict(signed.headers.items()))
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return _answer(response.status, response.read(), response.headers.items())
        except urllib.error.HTTPError as error:
            return _answer(error.code, error.read(), error.headers.items())
        except (OSError, ValueError) as error:  # unreachable, refused, timed out, a broken connection
            return ApiAnswer(0, {"title": "No answer", "detail": f"{method} {url}: {error}"})


def _answer(status: int, raw: bytes, headers: Any) -> ApiAnswer:
    names = {str(name).lower(): str(value) for name, value in headers}
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        text = raw[:300].decode(errors="replace")
        parsed = {"title": "Not JSON", "detail": f"the API answered {status} with a body that is not JSON: {text}"}
    return ApiAnswer(status, parsed, names)
