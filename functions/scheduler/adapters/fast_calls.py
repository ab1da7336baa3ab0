"""A boto3 client whose frequent calls skip botocore's request pipeline: the sweep's and the worker's hot path.

Most of a sweep's CPU goes to botocore around each request rather than to the request itself: the request built
through a chain of a dozen events, the parameters validated and serialized shape by shape against the service
model, the answer parsed the same way. For the JSON-protocol operations the functions make once per occurrence
(DynamoDB's item writes, reads and queries; SQS's batched sends, deletes and visibility changes) the parameters are
already the wire's JSON, so `FastCalls` makes the same request with less: `json` serializes them, `SigV4` signs them
with the client's credentials (the same signature as botocore's signer, which a test checks), a kept-alive
connection from a pool the threads share sends each in one write, and `json.loads` reads the answer into what
botocore's low-level client returns (binary attributes as bytes, errors as the client's modeled `ClientError`
subclasses with their fields).

What stays botocore's, so that behaviour does not drift: the client's endpoint, region, credentials and timeouts;
the standard retry mode's rules (`botocore.retries.standard`: which answers are retried, the backoff, the total
attempts of the client's config); and the client's events around a call - `provide-client-params` and
`before-parameter-build` (the benchmark's meter), `before-send` (moto's in-process mock, so a test never reaches
AWS) and `after-call` - though not `before-call` (botocore's `Stubber`: stub `FastCalls.wrapped` instead). Every
other operation, and any call the fast path cannot make as botocore would (a client without credentials or with a
proxy, a parameter that is not plain JSON), goes to the wrapped client unchanged. `tests/adapters/test_fast_calls.py`
holds the contract: the same answers as botocore from DynamoDB Local, moto and the SQS emulator.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import logging
import os
import select
import socket
import ssl
import threading
import time
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from botocore import exceptions as boto_errors
from botocore.awsrequest import AWSPreparedRequest, HTTPHeaders
from botocore.hooks import first_non_none_response
from botocore.retries.standard import (
    ExponentialBackoff,
    RetryContext,
    RetryEventAdapter,
    RetryPolicy,
    StandardRetryConditions,
    ThrottlingErrorDetector,
)

log = logging.getLogger(__name__)

#: The operations the functions make per occurrence (or per page of them): the others are rare and go to botocore.
DYNAMODB_OPERATIONS = (
    "GetItem",
    "PutItem",
    "UpdateItem",
    "DeleteItem",
    "Query",
    "BatchGetItem",
    "BatchWriteItem",
    "TransactWriteItems",
    "TransactGetItems",
)
SQS_OPERATIONS = (
    "SendMessage",
    "SendMessageBatch",
    "DeleteMessage",
    "DeleteMessageBatch",
    "ChangeMessageVisibility",
    "ChangeMessageVisibilityBatch",
)
FAST_OPERATIONS = {"dynamodb": DYNAMODB_OPERATIONS, "sqs": SQS_OPERATIONS}


class _NotPlainJson(TypeError):
    """A parameter the fast path does not serialize (not bytes, not JSON): the call goes to botocore."""


def _encode(value: Any) -> str:
    """`json.dumps`' default: bytes go as base64, as botocore serializes blobs; anything else is not ours."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise _NotPlainJson(type(value).__name__)


def _decode_binary(value: Any) -> Any:
    """DynamoDB's binary AttributeValues (`B`, `BS`) decoded to bytes, as botocore's parser returns them, wherever
    they are in an answer. An AttributeValue is the only object whose `B` holds a string."""
    if isinstance(value, dict):
        for name, member in value.items():
            if name == "B" and isinstance(member, str):
                value[name] = base64.b64decode(member)
            elif name == "BS" and isinstance(member, list) and all(isinstance(m, str) for m in member):
                value[name] = [base64.b64decode(m) for m in member]
            else:
                _decode_binary(member)
    elif isinstance(value, list):
        for member in value:
            _decode_binary(member)
    return value


@dataclass(frozen=True)
class _Answer:
    """An HTTP answer, as the retry rules and the `after-call` handlers read one (botocore's AWSResponse's
    attributes)."""

    status_code: int
    headers: Mapping[str, str]
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")


class SigV4:
    """AWS Signature Version 4 of a POST to `/` with a body (the JSON protocol's only request), for one service in
    one region: every header signed but `User-Agent` (as botocore leaves it out), the day's signing key kept."""

    def __init__(self, service: str, region: str) -> None:
        self.service, self.region = service, region
        self._key: tuple[str, str, bytes] | None = None  # (secret key, day, signing key)

    def headers(
        self, host: str, headers: Mapping[str, str], body: bytes, credentials: Any, now: datetime
    ) -> dict[str, str]:
        """`headers` with `Host`, `X-Amz-Date`, the session token if any and `Authorization` added."""
        stamp = now.strftime("%Y%m%dT%H%M%SZ")
        day = stamp[:8]
        signed = {name.lower(): " ".join(str(value).split()) for name, value in headers.items()}
        signed.pop("user-agent", None)
        signed["host"] = host
        signed["x-amz-date"] = stamp
        out = {**headers, "Host": host, "X-Amz-Date": stamp}
        if credentials.token:
            signed["x-amz-security-token"] = credentials.token
            out["X-Amz-Security-Token"] = credentials.token
        names = sorted(signed)
        signed_headers = ";".join(names)
        canonical = "\n".join(
            (
                "POST",
                "/",
                "",
                "".join(f"{name}:{signed[name]}\n" for name in names),
                signed_headers,
                hashlib.sha256(body).hexdigest(),
            )
        )
        scope = f"{day}/{self.region}/{self.service}/aws4_request"
        to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
        signature = hmac.new(self._signing_key(credentials.secret_key, day), to_sign.encode(), hashlib.sha256)
        out["Authorization"] = (
            f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed_headers}, Signature={signature.hexdigest()}"
        )
        return out

    def _signing_key(self, secret: str, day: str) -> bytes:
        kept = self._key
        if kept is not None and kept[0] == secret and kept[1] == day:
            return kept[2]
        key = ("AWS4" + secret).encode()
        for part in (day, self.region, self.service, "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        self._key = (secret, day, key)
        return key


class _Connection:
    """One kept-alive HTTP/1.1 connection: a request in one write, its answer read by Content-Length or chunks."""

    def __init__(
        self,
        scheme: str,
        host: str,
        port: int,
        connect_timeout: float,
        read_timeout: float,
        context: ssl.SSLContext | None,
    ) -> None:
        sock = socket.create_connection((host, port), timeout=connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if scheme == "https":
            assert context is not None
            sock = context.wrap_socket(sock, server_hostname=host)
        sock.settimeout(read_timeout)
        self.sock = sock
        self._reader = sock.makefile("rb")

    def exchange(self, request: bytes) -> tuple[_Answer, bool]:
        """Send `request`, read its answer; and whether the connection may be kept."""
        self.sock.sendall(request)
        status_line = self._reader.readline(65537)
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ConnectionError(f"not an HTTP answer: {status_line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = self._reader.readline(65537)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        chunked = headers.get("transfer-encoding", "").lower() == "chunked"
        length = headers.get("content-length")
        if chunked:
            content = self._chunks()
        elif length is not None:
            content = self._exactly(int(length))
        else:
            content = self._reader.read()  # the body ends with the connection
        delimited = chunked or length is not None
        keep = delimited and headers.get("connection", "").lower() != "close" and parts[0] != b"HTTP/1.0"
        return _Answer(status, headers, content), keep

    def _exactly(self, size: int) -> bytes:
        content = self._reader.read(size)
        if len(content) != size:
            raise ConnectionError("the connection closed in the middle of an answer")
        return content

    def _chunks(self) -> bytes:
        out = bytearray()
        while True:
            size = int(self._reader.readline(65537).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while self._reader.readline(65537) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return bytes(out)
            out += self._exactly(size)
            self._reader.readline(65537)

    def dropped(self) -> bool:
        """Whether the other side closed it while idle (readable with no request out: its EOF)."""
        try:
            readable, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def close(self) -> None:
        try:
            self._reader.close()
            self.sock.close()
        except OSError:
            pass


class _Pool:
    """Idle kept-alive connections, shared by every thread: the sweep's bucket threads and the worker's record
    threads are made anew for each minute and each batch, and a connection of its own per thread would pay a TLS
    handshake each time. At most `size` idle ones are kept (the client's `max_pool_connections`); the most recently
    used is taken first, so a quiet client keeps few warm."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def take(self) -> _Connection | None:
        """An idle connection the other side has not closed, or None."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                connection = self._idle.pop()
            if not connection.dropped():
                return connection
            connection.close()

    def give_back(self, connection: _Connection) -> None:
        with self._lock:
            if len(self._idle) < self.size:
                self._idle.append(connection)
                return
        connection.close()


class FastCalls:
    """`client`, with its FAST_OPERATIONS made without botocore's request pipeline (see the module's docstring).
    Anything else is the client's own: `FastCalls(client).meta is client.meta`."""

    def __init__(self, client: Any, operations: Iterable[str] | None = None) -> None:
        self._client = client
        meta = client.meta
        model = meta.service_model
        self._service = model.service_id.hyphenize()
        self._model = model
        names = {api: name for name, api in meta.method_to_api_mapping.items()}
        wanted = FAST_OPERATIONS.get(model.service_name, ()) if operations is None else tuple(operations)
        self.fast_operations = frozenset(op for op in wanted if op in names and model.metadata["protocol"] == "json")
        self._headers = {
            "Content-Type": f"application/x-amz-json-{model.metadata.get('jsonVersion', '1.0')}",
            "User-Agent": f"punctual-fast-calls {meta.config.user_agent or ''}".strip(),
        }
        if "awsQueryCompatible" in model.metadata:
            self._headers["x-amzn-query-mode"] = "true"  # errors then carry their query-protocol codes
        self._target = model.metadata.get("targetPrefix", "")
        signing_name = model.metadata.get("signingName") or model.metadata.get("endpointPrefix")
        self._signer = SigV4(signing_name, meta.region_name)
        self._url = meta.endpoint_url.rstrip("/") + "/"
        parts = urlsplit(self._url)
        self._scheme, self._host = parts.scheme, parts.hostname or ""
        self._port = parts.port or (443 if self._scheme == "https" else 80)
        # The Host header as botocore signs it: lowercase, the port only when it is not the scheme's.
        default = (self._scheme, self._port) in (("https", 443), ("http", 80))
        self._host_header = self._host if default else f"{self._host}:{self._port}"
        config = meta.config
        self._connect_timeout = float(config.connect_timeout)
        self._read_timeout = float(config.read_timeout)
        retries = config.retries or {}
        attempts = int(retries.get("total_max_attempts") or retries.get("max_attempts", 2) + 1)
        detector = ThrottlingErrorDetector(RetryEventAdapter())
        self._policy = RetryPolicy(
            retry_checker=StandardRetryConditions(max_attempts=attempts),
            retry_backoff=ExponentialBackoff(service_name=self._service, throttling_detector=detector),
        )
        self._pool = _Pool(int(getattr(config, "max_pool_connections", 10) or 10))
        #: A proxy is botocore's job: decided once, as the environment a function starts with does not change.
        self._proxied = self._behind_proxy()
        self._ssl: ssl.SSLContext | None = None
        for op in self.fast_operations:
            setattr(self, names[op], functools.partial(self._call, op, names[op]))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    @property
    def wrapped(self) -> Any:
        """The botocore client underneath."""
        return self._client

    # -- a call ------------------------------------------------------------------------------------------------

    def _call(self, operation: str, method: str, **params: Any) -> Any:
        credentials = self._credentials()
        if credentials is None or self._proxied:
            return getattr(self._client, method)(**params)
        model = self._model.operation_model(operation)
        context: dict[str, Any] = {}
        events = self._client.meta.events
        given = events.emit(
            f"provide-client-params.{self._service}.{operation}", params=params, model=model, context=context
        )
        params = first_non_none_response(given, default=params)
        events.emit(f"before-parameter-build.{self._service}.{operation}", params=params, model=model, context=context)
        try:
            body = json.dumps(params, separators=(",", ":"), default=_encode).encode()
        except _NotPlainJson:
            return getattr(self._client, method)(**params)
        headers = {**self._headers, "X-Amz-Target": f"{self._target}.{operation}", "Content-Length": str(len(body))}
        attempt = 0
        while True:
            attempt += 1
            answer, failure = self._attempt(operation, body, headers, credentials)
            parsed = self._parse(answer, attempt) if answer is not None else None
            retry = RetryContext(
                attempt_number=attempt,
                operation_model=model,
                parsed_response=parsed,
                http_response=answer,
                caught_exception=failure,
                request_context=context,
            )
            if not self._policy.should_retry(retry):
                break
            time.sleep(self._policy.compute_retry_delay(retry))
        if failure is not None:
            raise failure
        assert answer is not None and parsed is not None
        self._client.meta.events.emit(
            f"after-call.{self._service}.{operation}",
            http_response=answer,
            parsed=parsed,
            model=model,
            context=context,
        )
        if answer.status_code >= 300:
            error = parsed["Error"]
            code = error.get("QueryErrorCode") or error["Code"]  # as botocore picks the exception class
            raise self._client.exceptions.from_code(code)(parsed, operation)
        return parsed

    def _credentials(self) -> Any:
        """The client's own credentials, frozen for this call (refreshed as botocore refreshes them)."""
        signer = getattr(self._client, "_request_signer", None)
        credentials = getattr(signer, "_credentials", None)
        return credentials.get_frozen_credentials() if credentials is not None else None

    def _behind_proxy(self) -> bool:
        """Whether requests to this endpoint would go through a proxy (botocore's job, not ours)."""
        proxies = getattr(self._client.meta.config, "proxies", None)
        https = self._scheme == "https"
        env = os.environ.get("HTTPS_PROXY" if https else "HTTP_PROXY") or os.environ.get(
            "https_proxy" if https else "http_proxy"
        )
        if not proxies and not env:
            return False
        bypass = os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or ""
        return not any(self._host.endswith(entry.strip().lstrip(".")) for entry in bypass.split(",") if entry.strip())

    def _attempt(
        self, operation: str, body: bytes, headers: dict[str, str], credentials: Any
    ) -> tuple[_Answer | None, Exception | None]:
        """One signed request: its answer, or the botocore exception a failed connection raises there."""
        signed = self._signer.headers(self._host_header, headers, body, credentials, datetime.now(UTC))
        prepared = AWSPreparedRequest("POST", self._url, HTTPHeaders.from_dict(signed), body, stream_output=False)
        _, mocked = self._client.meta.events.emit_until_response(
            f"before-send.{self._service}.{operation}", request=prepared
        )
        if mocked is not None:
            return _Answer(int(mocked.status_code), _lower(mocked.headers), bytes(mocked.content or b"")), None
        head = "".join(f"{name}: {value}\r\n" for name, value in signed.items())
        request = f"POST / HTTP/1.1\r\n{head}\r\n".encode("latin-1") + body
        connection: _Connection | None = None
        try:
            connection = self._connection()
            answer, keep = connection.exchange(request)
        except TimeoutError as exc:
            if connection is not None:
                connection.close()
            return None, boto_errors.ReadTimeoutError(endpoint_url=self._url, error=exc)
        except (OSError, ValueError) as exc:
            if connection is not None:
                connection.close()
            return None, boto_errors.ConnectionClosedError(endpoint_url=self._url, error=exc)
        if keep:
            self._pool.give_back(connection)
        else:
            connection.close()
        return answer, None

    def _parse(self, answer: _Answer, attempt: int) -> dict[str, Any]:
        """The answer as botocore's low-level client returns it."""
        metadata = {
            "RequestId": answer.headers.get("x-amzn-requestid", ""),
            "HTTPStatusCode": answer.status_code,
            "HTTPHeaders": dict(answer.headers),
            "RetryAttempts": attempt - 1,
        }
        try:
            body = json.loads(answer.content) if answer.content else {}
        except ValueError:
            body = {}
        if answer.status_code < 300:
            if self._service == "dynamodb":
                expected = answer.headers.get("x-amz-crc32")
                if expected is not None and int(expected) != zlib.crc32(answer.content) & 0xFFFFFFFF:
                    # A damaged answer: retried by the standard rules (RetryDDBChecksumError), as botocore does.
                    return {"Error": {"Code": "", "Message": "crc32 mismatch"}, "ResponseMetadata": metadata}
                if b'"B' in answer.content:
                    _decode_binary(body)
            return {**body, "ResponseMetadata": metadata}
        code = str(body.get("__type") or answer.status_code)
        code = code.split(":", 1)[0].rsplit("#", 1)[-1]
        error: dict[str, Any] = {"Message": body.get("message", body.get("Message", "")), "Code": code}
        query_error = answer.headers.get("x-amzn-query-error")
        if query_error:
            parts = query_error.split(";")
            if len(parts) == 2 and parts[0]:
                error.update(QueryErrorCode=code, Type=parts[1], Code=parts[0])
        fields = {k: v for k, v in body.items() if k not in ("__type", "message", "Message")}
        if self._service == "dynamodb" and b'"B' in answer.content:
            _decode_binary(fields)
        return {**fields, "Error": error, "ResponseMetadata": metadata}

    # -- connections -------------------------------------------------------------------------------------------

    def _connection(self) -> _Connection:
        """An idle connection of the pool, or a new one."""
        connection = self._pool.take()
        if connection is not None:
            return connection
        if self._scheme == "https" and self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=_ca_bundle())
        return _Connection(self._scheme, self._host, self._port, self._connect_timeout, self._read_timeout, self._ssl)


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in headers.items()}


def _ca_bundle() -> str | None:
    """The CA bundle botocore verifies with: AWS_CA_BUNDLE, else its own (certifi's)."""
    configured = os.environ.get("AWS_CA_BUNDLE")
    if configured:
        return configured
    from botocore.httpsession import get_cert_path

    path = get_cert_path(True)
    return path if isinstance(path, str) else None


def fast_calls(client: Any) -> Any:
    """`client` with its hot operations on the fast path (FastCalls), unless it already is one."""
    return client if isinstance(client, FastCalls) else FastCalls(client)
