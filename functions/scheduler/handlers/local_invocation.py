"""Calling a handler off Lambda, as the local stack and the test scheduler do: the API Gateway REST proxy event of an
HTTP request (the tenant placed where API Gateway puts the IAM principal), and a stand-in for the Lambda context."""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any
from urllib.parse import parse_qsl, urlsplit


class LocalContext:
    """The Lambda context object a handler reads (its name, request id, remaining time), off Lambda."""

    def __init__(self, function_name: str, timeout_seconds: float) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = 512
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:000000000000:function:{function_name}"
        self.aws_request_id = uuid.uuid4().hex
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = "local"
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def to_event(
    method: str, raw_path: str, headers: dict[str, str], body: bytes, tenant: str | None, ip: str
) -> dict[str, Any]:
    """The REST proxy event API Gateway sends the api function for this request, with `tenant` as the caller's IAM
    principal (`requestContext.identity.userArn`); a body that is not UTF-8 is base64-encoded, as there."""
    parts = urlsplit(raw_path)
    query = parse_qsl(parts.query, keep_blank_values=True)
    multi_query: dict[str, list[str]] = {}
    for key, value in query:
        multi_query.setdefault(key, []).append(value)
    try:
        text: str | None = body.decode() if body else None
        encoded = False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode(), True
    return {
        "resource": "/{proxy+}",
        "path": parts.path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {k: [v] for k, v in headers.items()},
        "queryStringParameters": {k: v[-1] for k, v in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": parts.path.lstrip("/")},
        "stageVariables": None,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": parts.path,
            "stage": "local",
            "requestId": uuid.uuid4().hex,
            "requestTimeEpoch": int(time.time() * 1000),
            "accountId": "000000000000",
            "apiId": "local",
            "protocol": "HTTP/1.1",
            "identity": {"userArn": tenant, "caller": tenant, "sourceIp": ip, "accountId": "000000000000"},
        },
        "body": text,
        "isBase64Encoded": encoded,
    }
