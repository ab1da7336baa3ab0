"""A delivery of an occurrence as a receiver gets it, read from each target type's shape (docs/targets.md):

- `http`: the signed request; the payload is the JSON body;
- `lambda` (and `eventbridge` detail, `stepfunctions` input): the envelope
  `{occurrence_key, fencing_token, job_id, scheduled_for, attempt, payload}`;
- `sqs`: the message body is the payload, the rest travels in message attributes (an SNS notification delivered
  to the queue without raw delivery carries them in its own `MessageAttributes`);
- `sns`: the message is the payload, the rest travels in message attributes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from punctual_sdk.receiver.errors import InvalidDelivery
from punctual_sdk.receiver.signature import MAX_DIGITS

Source = Literal["http", "lambda", "sqs", "sns", "handler"]
ENVELOPE_FIELDS = ("occurrence_key", "fencing_token", "job_id", "scheduled_for", "attempt")


@dataclass(frozen=True)
class Delivery:
    """One attempt at one occurrence: what a handler gets."""

    occurrence_key: str
    fencing_token: int
    job_id: str
    #: RFC 3339.
    scheduled_for: str
    attempt: int
    payload: Any
    source: Source
    #: The event, record or request this delivery was read from.
    raw: Any = field(default=None, repr=False, compare=False)


def _integer(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise InvalidDelivery(f"{name} must be an integer, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and 0 < len(value) <= MAX_DIGITS and value.isascii() and value.isdigit():
        return int(value)
    raise InvalidDelivery(f"{name} must be an integer, not {value!r}")


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidDelivery(f"{name} must be a non-empty string, not {value!r}")
    return value


def _payload(text: Any) -> Any:
    if not isinstance(text, str | bytes):
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text.decode("utf-8", "replace") if isinstance(text, bytes) else text


def _from_fields(fields: Mapping[str, Any], payload: Any, source: Source, raw: Any) -> Delivery:
    missing = [name for name in ("occurrence_key", "fencing_token") if name not in fields]
    if missing:
        raise InvalidDelivery(f"not a punctual delivery: no {' or '.join(missing)} ({source} shape)")
    return Delivery(
        occurrence_key=_text(fields["occurrence_key"], "occurrence_key"),
        fencing_token=_integer(fields["fencing_token"], "fencing_token"),
        job_id=str(fields.get("job_id", "")),
        scheduled_for=str(fields.get("scheduled_for", "")),
        attempt=_integer(fields.get("attempt", 0), "attempt"),
        payload=payload,
        source=source,
        raw=raw,
    )


def from_envelope(event: Mapping[str, Any]) -> Delivery:
    """The `lambda` target's event (also an EventBridge rule's `detail` and a Step Functions input)."""
    if not isinstance(event, Mapping):
        raise InvalidDelivery(f"a punctual envelope is a JSON object, not {type(event).__name__}")
    return _from_fields(event, event.get("payload"), "lambda", event)


def _attributes(attributes: Any, value_key: str) -> dict[str, Any]:
    if not isinstance(attributes, Mapping):
        return {}
    return {name: a.get(value_key) for name, a in attributes.items() if isinstance(a, Mapping)}


def from_sqs_record(record: Mapping[str, Any]) -> Delivery:
    """One record of an SQS event (`sqs` target; or an `sns` target's topic delivered to a queue)."""
    fields = _attributes(record.get("messageAttributes"), "stringValue")
    body = record.get("body")
    if "occurrence_key" not in fields and isinstance(body, str):
        notification = _payload(body)
        if isinstance(notification, Mapping) and notification.get("Type") == "Notification":
            fields = _attributes(notification.get("MessageAttributes"), "Value")
            return _from_fields(fields, _payload(notification.get("Message")), "sns", record)
    return _from_fields(fields, _payload(body), "sqs", record)


def from_sns_record(record: Mapping[str, Any]) -> Delivery:
    """One record of an SNS event (`sns` target, a Lambda function subscribed to the topic)."""
    sns = record.get("Sns")
    if not isinstance(sns, Mapping):
        raise InvalidDelivery("not an SNS record: no 'Sns' object")
    fields = _attributes(sns.get("MessageAttributes"), "Value")
    return _from_fields(fields, _payload(sns.get("Message")), "sns", record)


def event_kind(event: Any) -> Literal["envelope", "sqs", "sns"]:
    """Which shape a Lambda event has; InvalidDelivery when it is none of punctual's."""
    if isinstance(event, Mapping):
        records = event.get("Records")
        if isinstance(records, list) and records and isinstance(records[0], Mapping):
            source = records[0].get("eventSource") or records[0].get("EventSource")
            if source == "aws:sqs":
                return "sqs"
            if source == "aws:sns":
                return "sns"
        if "occurrence_key" in event:
            return "envelope"
    raise InvalidDelivery(
        "not a punctual delivery: expected the lambda target's envelope, an SQS event or an SNS event"
    )
