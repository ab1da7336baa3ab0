"""`payments.charge`: an example handler whose effect happens once per occurrence, however often it runs.

The job:

    {"target": {"type": "handler", "name": "payments.charge"},
     "payload": {"account": "acct-42", "amount": "12.50", "currency": "EUR"}, ...}

The effect - "charge the account" - is one DynamoDB item, written with a conditional put keyed by the occurrence
key (table from `SCHEDULER_EXAMPLE_TABLE`, string partition key `PK`):

    PutItem PK = "PAYMENT#" + occurrence_key, ... IF attribute_not_exists(PK)

Why this makes the effect exactly-once. The scheduler runs an occurrence at least once: a worker may crash after
the charge but before the ledger records SUCCEEDED, or pause past its lease while another worker takes over;
either way the handler runs again, with the same occurrence key and a higher fencing token. The first put to
land creates the item; every later one - from a retry, a duplicate message, or the stale worker waking up -
fails the condition and the handler answers "already charged" without charging again. One key, one item, one
charge; which attempt got there first does not matter, and its fencing token is kept on the item for audit.

Why not `attribute_not_exists(PK) OR fencing_token < :token`. Fencing tokens order *writers*: they are the right
guard for an effect that overwrites state (keep the newest writer's value, refuse a stale one). A charge is not
an overwrite but an action that must happen once per occurrence: with that condition, a retry after a crash
(higher token) would pass and charge a second time - exactly the double charge the key is there to prevent.

In a real system the item would be the payment provider's idempotency record (or the provider's own
`Idempotency-Key`, set to the occurrence key); the shape of the argument is the same.
"""

from __future__ import annotations

import functools
import os
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

import boto3
from botocore.exceptions import ClientError

from scheduler.core.model.timefmt import rfc3339
from scheduler.core.ports import TargetFailure
from scheduler.targets.registry import HandlerContext, register

TABLE_ENV = "SCHEDULER_EXAMPLE_TABLE"
KEY_PREFIX = "PAYMENT#"


@functools.cache
def dynamodb_client() -> Any:
    """The DynamoDB client, built on first use (a worker that never charges never builds it)."""
    return boto3.client("dynamodb")


def _amount(payload: Any) -> Decimal:
    """The positive amount to charge, from the payload's `amount` (a number or a decimal string)."""
    raw = payload.get("amount") if isinstance(payload, dict) else None
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise TargetFailure("permanent", "payments.charge needs a payload with a numeric 'amount'")
    try:
        amount = Decimal(str(raw))
    except InvalidOperation as exc:
        raise TargetFailure("permanent", f"payments.charge: 'amount' {raw!r} is not a number") from exc
    if not amount.is_finite() or amount <= 0:
        raise TargetFailure("permanent", f"payments.charge: 'amount' must be positive, got {raw!r}")
    return amount


@register("payments.charge")
def charge(context: HandlerContext) -> str:
    """Charge `payload.amount` once for this occurrence (see the module docstring for why it is once)."""
    table = os.environ.get(TABLE_ENV)
    if not table:
        raise TargetFailure("permanent", f"payments.charge needs the worker's {TABLE_ENV} to name its table")
    amount = _amount(context.payload)
    payload = context.payload
    item = {
        "PK": {"S": KEY_PREFIX + context.occurrence_key},
        "occurrence_key": {"S": context.occurrence_key},
        "job_id": {"S": context.job_id},
        "tenant": {"S": context.tenant},
        "account": {"S": str(payload.get("account", ""))},
        "amount": {"N": str(amount)},
        "currency": {"S": str(payload.get("currency", ""))},
        "fencing_token": {"N": str(context.fencing_token)},
        "attempt": {"N": str(context.attempt)},
        "scheduled_for": {"S": rfc3339(context.scheduled_for)},
        "charged_at": {"S": rfc3339(datetime.now(UTC))},
    }
    try:
        dynamodb_client().put_item(
            TableName=table,
            Item=item,
            ConditionExpression="attribute_not_exists(PK)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") != "ConditionalCheckFailedException":
            raise  # the executor retries it: nothing was written
        existing: Any = exc.response.get("Item") or {}
        token = existing.get("fencing_token", {}).get("N")
        return "already charged" + (f" (by the attempt with fencing token {token})" if token else "")
    return f"charged {amount} {item['currency']['S']}".rstrip()
