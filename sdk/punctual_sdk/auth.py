"""How the client proves who calls: a bearer token for the local stack, SigV4 for API Gateway with IAM auth.

SigV4 needs botocore (`pip install punctual-sdk[aws]`); it is imported only when a request is signed, so the
client installs and runs locally without it.
"""

from __future__ import annotations

import re
from typing import Any, Protocol
from urllib.parse import urlsplit

from punctual_sdk.errors import AuthError
from punctual_sdk.transport import HttpRequest

#: `https://{api-id}.execute-api.{region}.amazonaws.com/{stage}/`: an API Gateway endpoint (IAM auth).
EXECUTE_API_HOST = re.compile(r"^[a-z0-9]+\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


class Auth(Protocol):
    """Adds credentials to a request that is otherwise ready to send."""

    def sign(self, request: HttpRequest) -> HttpRequest: ...


class BearerAuth:
    """`Authorization: Bearer <token>`: the local stack maps dev tokens to tenants (SCHEDULER_DEV_TOKENS)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise AuthError("a bearer token is a non-empty string (the local stack's dev token, e.g. 'dev-token')")
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

    `session` is a boto3 (or botocore) session; by default a new `boto3.Session()`. Credentials are read at every
    request, so refreshed (assumed-role, SSO) credentials are picked up.
    """

    def __init__(self, region: str | None = None, session: Any = None) -> None:
        if session is None:
            try:
                import boto3
            except ImportError as exc:
                raise AuthError("SigV4 needs boto3 and botocore: pip install 'punctual-sdk[aws]'") from exc
            session = boto3.Session()
        self.session = session
        self.region: str | None = region or getattr(session, "region_name", None)

    @classmethod
    def for_url(cls, url: str, session: Any = None) -> SigV4Auth:
        """Take the region from an `execute-api` URL, else from the session (AWS_REGION, profile)."""
        return cls(region_of(url), session)

    def sign(self, request: HttpRequest) -> HttpRequest:
        try:
            from botocore.auth import SigV4Auth as BotocoreSigV4
            from botocore.awsrequest import AWSRequest
        except ImportError as exc:
            raise AuthError("SigV4 needs botocore: pip install 'punctual-sdk[aws]'") from exc

        credentials = self.session.get_credentials()
        if credentials is None:
            raise AuthError(
                "no AWS credentials found: configure the standard chain (AWS_PROFILE, `aws sso login`, "
                "environment variables or an instance role)"
            )
        if not self.region:
            raise AuthError("no AWS region to sign for: pass region= (or --region) or set AWS_REGION")
        aws_request = AWSRequest(
            method=request.method, url=request.url, data=request.body or b"", headers=dict(request.headers)
        )
        BotocoreSigV4(credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(aws_request)
        return HttpRequest(request.method, request.url, dict(aws_request.headers.items()), request.body)


__all__ = ["EXECUTE_API_HOST", "Auth", "BearerAuth", "SigV4Auth", "is_execute_api", "region_of"]
