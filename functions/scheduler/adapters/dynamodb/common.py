"""What the DynamoDB stores share: error decoding, cursors, paged queries, the tenant quota counter."""

from __future__ import annotations

import base64
import json
import logging
import random
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError, ParamValidationError

from scheduler.adapters.codec import Item, n, s

log = logging.getLogger(__name__)

PAGE_SIZE = 100
#: TransactWriteItems takes at most 100 items: a page checkpoint and the quota releases of up to 99 tenants, so a
#: page of timers holds at most 99.
MAX_TRANSACTION_ITEMS = 100
TIMER_PAGE_SIZE = MAX_TRANSACTION_ITEMS - 1


def condition_failed(exc: ClientError) -> bool:
    return exc.response["Error"]["Code"] == "ConditionalCheckFailedException"


def conditionally(write: Callable[..., Any], **request: Any) -> bool:
    """Make a conditional write: whether it took effect (its condition held); any other error raises."""
    try:
        write(**request)
    except ClientError as exc:
        if condition_failed(exc):
            return False
        raise
    return True


def first_write_refused(exc: ClientError) -> bool:
    """Whether a transaction was cancelled because the condition of its first item failed."""
    if exc.response["Error"]["Code"] != "TransactionCanceledException":
        return False
    reasons = cancellation_reasons(exc)
    return bool(reasons) and reasons[0].get("Code") == "ConditionalCheckFailed"


def conflicted(exc: ClientError) -> bool:
    """Whether a transaction was cancelled only because another transaction held one of its items: nothing was
    written, and the same transaction may simply be tried again."""
    if exc.response["Error"]["Code"] != "TransactionCanceledException":
        return False
    codes = {reason.get("Code") for reason in cancellation_reasons(exc)}
    return "TransactionConflict" in codes and codes <= {"TransactionConflict", "None", None}


#: Attempts of a transaction cancelled by TransactionConflict, and the most a pause between them takes (seconds).
CONFLICT_ATTEMPTS = 4
CONFLICT_PAUSE = 0.05


def transact(client: Any, items: list[dict[str, Any]], sleep: Callable[[float], None] = time.sleep) -> None:
    """TransactWriteItems, tried again (after a short random pause) while DynamoDB cancels it for a conflict with
    another transaction on one of its items; any other error raises (a refused condition included)."""
    for attempt in range(CONFLICT_ATTEMPTS):
        try:
            client.transact_write_items(TransactItems=items)
            return
        except ClientError as exc:
            if attempt == CONFLICT_ATTEMPTS - 1 or not conflicted(exc):
                raise
        log.warning("transaction cancelled for a conflict: tried again", extra={"attempt": attempt + 1})
        sleep(random.uniform(0, CONFLICT_PAUSE * (attempt + 1)))


def old_item(exc: ClientError) -> Item | None:
    """The item as it stood when a condition failed (ReturnValuesOnConditionCheckFailure=ALL_OLD)."""
    response: dict[str, Any] = dict(exc.response)
    item = response.get("Item")
    return item if isinstance(item, dict) and item else None


def cancellation_reasons(exc: ClientError) -> list[dict[str, Any]]:
    response: dict[str, Any] = dict(exc.response)
    return list(response.get("CancellationReasons") or [])


def epoch_seconds(when: datetime) -> dict[str, str]:
    return n(int(when.timestamp()))


def encode_cursor(key: dict[str, Any] | None) -> str | None:
    if not key:
        return None
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode()


#: The longest string a cursor's key may hold, in UTF-8 bytes: DynamoDB's limit for a sort key (a partition key may
#: take 2,048). Every key this API hands out in a cursor is shorter; a longer one would be refused by the table (a
#: 500 where it is read by key), so it is a cursor this API did not hand out.
MAX_CURSOR_PART = 1024


def decode_cursor(cursor: str | None) -> dict[str, Any] | None:
    """The key a cursor of `encode_cursor` carries: a flat object of key attributes (`{"S": ...}` or `{"N": ...}`,
    each at most MAX_CURSOR_PART bytes) and whole numbers (a position). Anything else is a ValueError (a cursor this
    API did not hand out): the caller sent it, so it may be any bytes - nested a thousand levels deep, too, which
    `json.loads` refuses with a RecursionError."""
    if not cursor:
        return None
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, TypeError, RecursionError) as exc:
        raise ValueError("cursor is not one this API returned") from exc
    if not isinstance(value, dict) or not all(_cursor_part(part) for part in value.values()):
        raise ValueError("cursor is not one this API returned")
    return value


def _cursor_part(value: Any) -> bool:
    if isinstance(value, dict):
        if len(value) != 1 or next(iter(value)) not in ("S", "N"):
            return False
        text = next(iter(value.values()))
        return isinstance(text, str) and len(text.encode("utf-8", "surrogatepass")) <= MAX_CURSOR_PART
    return isinstance(value, int) and not isinstance(value, bool)


def query_pages(client: Any, request: dict[str, Any]) -> Iterator[list[Item]]:
    """The items of a query, a page at a time, following LastEvaluatedKey; the caller stops when it has enough."""
    while True:
        response = client.query(**request)
        yield response.get("Items", [])
        if not response.get("LastEvaluatedKey"):
            return
        request["ExclusiveStartKey"] = response["LastEvaluatedKey"]


def query_from(client: Any, request: dict[str, Any], start: dict[str, Any] | None) -> dict[str, Any]:
    """One query from `start` (a key decoded from a caller's cursor); a start key the table refuses is a
    ValueError (a forged cursor)."""
    if start:
        request["ExclusiveStartKey"] = start
    try:
        response: dict[str, Any] = client.query(**request)
    except ParamValidationError as exc:  # a start key of the wrong shape, refused before it is sent
        if start:
            raise ValueError("cursor is not one this API returned") from exc
        raise
    except ClientError as exc:
        if exc.response["Error"]["Code"] == "ValidationException" and start:
            raise ValueError("cursor is not one this API returned") from exc
        raise
    return response


def query_page(
    client: Any,
    request: dict[str, Any],
    start: dict[str, Any] | None,
    limit: int,
    cursor_fields: Sequence[str],
    per_query: Callable[[int], int] | None = None,
) -> tuple[list[Item], str | None]:
    """One page of a list: query on from `start` until one item more than `limit` is found (so a page that ends
    at the last item carries no cursor) or the results end. `per_query(found)` sets each query's Limit. Returns
    the page and the cursor of its last item; a start key the table refuses is a ValueError (a forged cursor)."""
    found: list[Item] = []
    while len(found) <= limit:
        if per_query is not None:
            request["Limit"] = per_query(len(found))
        response = query_from(client, request, start)
        found += response.get("Items", [])
        start = response.get("LastEvaluatedKey")
        if not start:
            break
    page = found[:limit]
    key = {k: page[-1][k] for k in cursor_fields} if len(found) > limit and page else None
    return page, encode_cursor(key)


def get_many(client: Any, table: str, keys: Sequence[dict[str, Any]], *, consistent: bool) -> dict[str, Item]:
    """Items by key (BatchGetItem, 100 at a time, unprocessed keys retried), by PK; a key with no item is absent.
    `consistent=False` reads at half the read units (what an index query reads is eventually consistent too)."""
    out: dict[str, Item] = {}
    for begin in range(0, len(keys), 100):
        pending: dict[str, Any] = {table: {"Keys": list(keys[begin : begin + 100]), "ConsistentRead": consistent}}
        for attempt in range(10):
            response = client.batch_get_item(RequestItems=pending)
            for item in response.get("Responses", {}).get(table, []):
                out[item["PK"]["S"]] = item
            pending = response.get("UnprocessedKeys") or {}
            if not pending:
                break
            time.sleep(min(1.0, 0.05 * 2**attempt))
        else:
            raise RuntimeError("BatchGetItem left keys unprocessed after 10 attempts")
    return out


def quota_key(tenant: str) -> dict[str, dict[str, str]]:
    return {"PK": s(f"TENANT#{tenant}"), "SK": s("QUOTA")}


def quota_update(table: str, tenant: str, delta: int, limit: int | None = None) -> dict[str, Any]:
    update: dict[str, Any] = {
        "TableName": table,
        "Key": quota_key(tenant),
        "UpdateExpression": "ADD #active :d",
        "ExpressionAttributeNames": {"#active": "active"},
        "ExpressionAttributeValues": {":d": n(delta)},
    }
    if limit is not None:
        update["ConditionExpression"] = "attribute_not_exists(#active) OR #active < :limit"
        update["ExpressionAttributeValues"][":limit"] = n(limit)
    return {"Update": update}
