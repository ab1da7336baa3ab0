"""The API's resolver and what it reads from a request: the JSON body, query parameters, headers, a page."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TypeVar

from scheduler.core.model.job import MAX_PAYLOAD_BYTES
from scheduler.handlers.api_problems import Problem
from scheduler.handlers.api_routes import Param
from scheduler.handlers.api_routes import app as app

#: The whole request body may carry the definition around the payload; refuse anything far beyond it early.
MAX_BODY_BYTES = MAX_PAYLOAD_BYTES + 16 * 1024
MAX_PAGE = 100
#: The longest `cursor` a list takes: every one it hands out is far shorter (a few keys of at most 1 KiB, base64).
MAX_CURSOR = 4096
#: The deepest nesting of arrays and objects a request body may have (a job's payload a few levels less): deeper
#: bodies are refused before anything reads them, as pydantic cannot serialise much past 250 levels and Python's
#: parser stops near 1000 - either would be a 500. serde_json's default limit, and generous for any real payload.
MAX_JSON_DEPTH = 128


def json_body(required: bool = True, max_bytes: int = MAX_BODY_BYTES) -> Any:
    event = app.current_event
    try:
        raw = event.decoded_body or ""
    except (UnicodeDecodeError, ValueError):
        raise Problem(400, "Bad Request", "the body is not UTF-8 text; send JSON encoded as UTF-8") from None
    if len(raw.encode()) > max_bytes:
        raise Problem(413, "Payload Too Large", f"the request body is over {max_bytes} bytes")
    content_type = (event.headers or {}).get("content-type") or (event.headers or {}).get("Content-Type") or ""
    if raw and content_type and "json" not in content_type.lower():
        raise Problem(
            415, "Unsupported Media Type", f"send JSON (Content-Type: application/json), not '{content_type}'"
        )
    if not raw.strip():
        if required:
            raise Problem(400, "Bad Request", "the request body is empty; send a JSON object")
        return {}
    too_deep = Problem(
        400,
        "Bad Request",
        f"the body nests JSON arrays and objects more than {MAX_JSON_DEPTH} levels deep; flatten the payload",
    )
    try:
        body = json.loads(raw, parse_constant=_not_json)
    except _NotJson as exc:
        raise Problem(400, "Bad Request", f"the body is not valid JSON: {exc} is not a JSON value") from None
    except json.JSONDecodeError as exc:
        detail = f"the body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        raise Problem(400, "Bad Request", detail) from None
    except RecursionError:  # the parser's own limit (about a thousand levels)
        raise too_deep from None
    if not isinstance(body, dict):
        raise Problem(400, "Bad Request", "the body must be a JSON object")
    if nesting_over(body, MAX_JSON_DEPTH):
        raise too_deep
    return body


def nesting_over(value: Any, limit: int) -> bool:
    """Whether JSON `value` nests arrays and objects more than `limit` levels deep (walked without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class _NotJson(ValueError):
    pass


def _not_json(constant: str) -> Any:
    """Python's json accepts NaN and Infinity; JSON does not (and DynamoDB could not store them)."""
    raise _NotJson(constant)


def is_number(text: str) -> bool:
    """ASCII digits only: str.isdigit() also accepts characters such as '²' that int() refuses."""
    return text.isascii() and text.isdigit()


def int_query(name: str, default: int, low: int, high: int) -> int:
    raw = app.current_event.get_query_string_value(name, None)
    if raw is None:
        return default  # an empty value is not a number either: 422 below, as the OpenAPI schema says
    if not is_number(raw) or not low <= int(raw) <= high:
        raise Problem.unprocessable(
            f"query parameter '{name}' must be a whole number {low}-{high}",
            (name, f"must be {low}-{high}"),
        )
    return int(raw)


T = TypeVar("T")

#: The query parameters of a list endpoint (`page_of`).
PAGE = (
    Param.query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 50}),
    Param.query(
        "cursor",
        {"type": "string", "maxLength": MAX_CURSOR, "pattern": "^([A-Za-z0-9_-]{16,}={0,2})?$"},
        "next_cursor of the previous page, exactly as returned (empty: the first page); any other value is a 422",
    ),
)


def page_of(fetch: Callable[[int, str | None], tuple[list[T], str | None]]) -> tuple[list[T], str | None]:
    """One page of a list endpoint: `?limit=` (1-100, default 50) and the opaque `?cursor=` of the previous page,
    passed to `fetch`; a cursor the store did not hand out is a 422 on the `cursor` field."""
    limit = int_query("limit", 50, 1, MAX_PAGE)
    cursor = app.current_event.get_query_string_value("cursor", None)
    if cursor is not None and len(cursor) > MAX_CURSOR:
        detail = f"cursor is not one this API returned (those are at most {MAX_CURSOR} characters)"
        raise Problem.unprocessable(detail, ("cursor", detail))
    try:
        return fetch(limit, cursor)
    except ValueError as exc:
        raise Problem.unprocessable(str(exc), ("cursor", str(exc))) from None


def header(name: str) -> str | None:
    headers = app.current_event.headers or {}
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


IF_MATCH = Param.header(
    "If-Match", {"type": "string", "pattern": '^(W/)?"?[0-9]{1,18}"?$'}, 'the version you read, e.g. "3"'
)


def if_match() -> int | None:
    """The job version the request's If-Match names (None without one); a malformed one is a 400."""
    raw = header("If-Match")
    if raw is None:
        return None
    cleaned = raw.strip().removeprefix("W/").strip('"')
    if not is_number(cleaned):
        raise Problem(400, "Bad Request", f"If-Match must be a job version (e.g. \"3\"), not '{raw}'")
    return int(cleaned)
