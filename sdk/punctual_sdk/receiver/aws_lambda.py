"""Lambda adapters: a decorator for functions that punctual's `lambda`, `sqs` and `sns` targets reach, and one for
Powertools event handler routes (API Gateway in front of a function that an `http` target calls).

`@receiver.lambda_handler` reads the event's shape (docs/targets.md) and runs the handler once per occurrence:

- `lambda` target (the envelope; punctual invokes synchronously): a duplicate returns the first result (None when
  it was too large to keep: `max_result_bytes`); a stale fencing token returns `{"punctual": "StaleFencingToken",
  "detail": ...}` without running the handler (the worker records success: nothing is retried); an occurrence in
  progress elsewhere raises InProgress, and a handler's exception propagates: both are function errors, which the
  worker retries;
- `sqs` (event source mapping): each record on its own; the answer is `{"batchItemFailures": [...]}` with the
  records to deliver again (in progress, or the handler raised; on a FIFO queue every later record too, to keep the
  order). Turn on `ReportBatchItemFailures` on the mapping. A stale token's record is dropped; a record that is not
  a punctual delivery is reported failed, so the queue's redrive policy moves it to its DLQ;
- `sns` (a subscribed function; Lambda retries a failed asynchronous invocation): a stale token is dropped;
  in progress, a handler's exception or a record that is not a delivery raise.
"""

from __future__ import annotations

import base64
import functools
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from punctual_sdk.receiver.dedupe import Outcome
from punctual_sdk.receiver.delivery import (
    Delivery,
    event_kind,
    from_envelope,
    from_sns_record,
    from_sqs_record,
)
from punctual_sdk.receiver.errors import ReceiverError, StaleFencingToken
from punctual_sdk.receiver.http import BODY_NOT_KEPT_HEADER, DUPLICATE_HEADER, problem, too_large

if TYPE_CHECKING:
    from punctual_sdk.receiver.kit import Receiver

Handler = Callable[[Delivery], Any]
logger = logging.getLogger("punctual_sdk.receiver")


def lambda_handler(receiver: Receiver, handler: Handler) -> Callable[[Any, Any], Any]:
    """`handler(delivery)` as a Lambda handler `(event, context)` for the lambda, sqs and sns targets."""

    @functools.wraps(handler)
    def entry(event: Any, context: Any = None) -> Any:
        kind = event_kind(event)
        if kind == "envelope":
            try:
                return receiver.run(from_envelope(event), handler).result
            except StaleFencingToken as exc:
                logger.warning("refused: %s", exc.detail)
                return {"punctual": type(exc).__name__, "detail": exc.detail}
        if kind == "sqs":
            return _sqs_batch(receiver, handler, event)
        for record in event["Records"]:
            try:
                receiver.run(from_sns_record(record), handler)
            except StaleFencingToken as exc:
                logger.warning("refused: %s", exc.detail)
        return None

    return entry


def _sqs_batch(receiver: Receiver, handler: Handler, event: Mapping[str, Any]) -> dict[str, Any]:
    failures: list[dict[str, str]] = []
    for record in event["Records"]:
        fifo = str(record.get("eventSourceARN", "")).endswith(".fifo")
        if fifo and failures:
            failures.append({"itemIdentifier": record["messageId"]})
            continue
        try:
            receiver.run(from_sqs_record(record), handler)
        except StaleFencingToken as exc:
            logger.warning("dropped message %s: %s", record.get("messageId"), exc.detail)
        except Exception:
            logger.exception("message %s failed; it will be delivered again", record.get("messageId"))
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}


# -- Powertools event handler routes ---------------------------------------------------------------------------


def _request(event: Any, limit: int) -> tuple[str, str, str, dict[str, str], bytes]:
    """Method, Host, request target, headers and raw body of an API Gateway proxy event (REST API v1 or HTTP
    API v2). The request target is the path the client called (with the stage, as the worker sent it) and the
    query: exact for HTTP APIs (`rawPath`, `rawQueryString`); for REST APIs rebuilt from the parsed query, in
    the order API Gateway gives it (point the job at a URL without a query, or use an HTTP API). A body over
    `limit` bytes raises RequestTooLarge, before a base64 body is decoded."""
    raw: Mapping[str, Any] = event.raw_event if hasattr(event, "raw_event") else event
    headers = {str(k): str(v) for k, v in (raw.get("headers") or {}).items()}
    context = raw.get("requestContext") or {}
    if raw.get("version") == "2.0":
        method = context.get("http", {}).get("method", "")
        query = raw.get("rawQueryString") or ""
        path = str(raw.get("rawPath", "/")) + (f"?{query}" if query else "")
    else:
        from urllib.parse import urlencode

        method = raw.get("httpMethod", "")
        params = raw.get("multiValueQueryStringParameters") or {}
        query = urlencode([(k, v) for k, vs in params.items() for v in vs])
        path = str(context.get("path") or raw.get("path", "/")) + (f"?{query}" if query else "")
    text = str(raw.get("body") or "")
    encoded = bool(raw.get("isBase64Encoded"))
    if len(text) > ((limit + 2) // 3 * 4 if encoded else limit):  # base64 makes 4 characters of every 3 bytes
        raise too_large(None, limit)
    body = base64.b64decode(text) if encoded else text.encode()
    if len(body) > limit:
        raise too_large(len(body), limit)
    host = next((v for k, v in headers.items() if k.lower() == "host"), "")
    return str(method), host, path, headers, body


def powertools_route(receiver: Receiver, app: Any) -> Callable[[Handler], Callable[..., Any]]:
    """Decorator of a Powertools route (APIGatewayRestResolver, APIGatewayHttpResolver) under `@app.post(...)`:
    the route's function takes the Delivery; its return value is the JSON body of a 200 and is replayed to
    duplicates; a refused delivery gets problem+json (401, 409, 413, 429 with Retry-After)."""
    from aws_lambda_powertools.event_handler import Response

    def as_response(status: int, headers: tuple[tuple[str, str], ...], body: bytes) -> Any:
        kept = {k: v for k, v in headers if k.lower() != "content-length"}
        return Response(status_code=status, headers=kept, body=body.decode("utf-8", "replace"))

    def decorate(handler: Handler) -> Callable[..., Any]:
        @functools.wraps(handler)
        def route(*_args: Any, **_kwargs: Any) -> Any:
            try:
                delivery = receiver.http_delivery(*_request(app.current_event, receiver.max_body_bytes))
                outcome: Outcome = receiver.run(delivery, handler)
            except ReceiverError as exc:
                reply = problem(exc)
                return as_response(reply.status, reply.headers, reply.body)
            if not outcome.kept:  # the first answer, a 200, was too large to keep: its status is replayed
                return as_response(200, ((BODY_NOT_KEPT_HEADER, "true"), (DUPLICATE_HEADER, "true")), b"")
            return outcome.result

        return route

    return decorate
