"""How the client sends a request: the transport (urllib) and the auth that signs it (a bearer token locally,
SigV4 for API Gateway)."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

if TYPE_CHECKING:
    import boto3
from punctual_cli.api_errors import AuthError, TransportError

#: `https://{api-id}.execute-api.{region}.amazonaws.com/{stage}/`: an API Gateway endpoint (IAM auth).
EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


@dataclass(frozen=True)
class HttpRequest:
    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: dict[str, str]
    body: bytes


Transport = Callable[[HttpRequest, float], HttpResponse]


def urllib_transport(request: HttpRequest, timeout: float) -> HttpResponse:
    """Send with urllib; every HTTP status comes back as a response, only a failure to talk raises."""
    prepared = urllib.request.Request(request.url, data=request.body, method=request.method, headers=request.headers)
    try:
        with urllib.request.urlopen(prepared, timeout=timeout) as response:
            return HttpResponse(response.status, dict(response.headers.items()), response.read())
    except urllib.error.HTTPError as exc:
        return HttpResponse(exc.code, dict(exc.headers.items()) if exc.headers else {}, exc.read())
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TransportError(f"cannot reach {request.url}: {reason}") from exc


class Auth(Protocol):
    """Adds credentials to a request that is otherwise ready to send."""

    def sign(self, request: HttpRequest) -> HttpRequest: ...


class BearerAuth:
    """`Authorization: Bearer <token>`: the local stack maps dev tokens to tenants (SCHEDULER_DEV_TOKENS)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def sign(self, request: HttpRequest) -> HttpRequest:
        return HttpRequest(
            request.method, request.url, {**request.headers, "Authorization": f"Bearer {self.token}"}, request.body
        )


def region_of(url: str) -> str | None:
    """The region of an `execute-api` URL, or None for any other host."""
    match = EXECUTE_API_HOST.match(urlsplit(url).hostname or "")
    return match[1] if match else None


def is_execute_api(url: str) -> bool:
    return region_of(url) is not None


class SigV4Auth:
    """Signs requests for API Gateway (`execute-api`) with SigV4 and the standard AWS credential chain.

    Credentials are read at every request, so refreshed (assumed-role, SSO) credentials are picked up.
    """

    def __init__(self, region: str | None = None, session: boto3.Session | None = None) -> None:
        if session is None:
            import boto3

            session = boto3.Session()
        self.session = session
        self.region = region or session.region_name

    @classmethod
    def for_url(cls, url: str, session: boto3.Session | None = None) -> SigV4Auth:
        """Take the region from an `execute-api` URL, else from the session (AWS_REGION, profile)."""
        return cls(region_of(url), session)

    def sign(self, request: HttpRequest) -> HttpRequest:
        from botocore.auth import SigV4Auth as BotocoreSigV4
        from botocore.awsrequest import AWSRequest

        credentials = self.session.get_credentials()
        if credentials is None:
            raise AuthError(
                "no AWS credentials found: configure the standard chain (AWS_PROFILE, `aws sso login`, "
                "environment variables or an instance role)"
            )
        if not self.region:
            raise AuthError("no AWS region to sign for: pass --region or set AWS_REGION")
        aws_request = AWSRequest(
            method=request.method, url=request.url, data=request.body or b"", headers=dict(request.headers)
        )
        BotocoreSigV4(credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(aws_request)
        return HttpRequest(request.method, request.url, dict(aws_request.headers.items()), request.body)


# -- the client -------------------------------------------------------------------------------------------
