"""The receiver kit: verify a punctual delivery's signature, dedupe on its occurrence key, refuse a stale fencing
token, and run the handler once (docs/receiving.md).

    from punctual_sdk.receiver import DynamoDBDedupeStore, Receiver, keys_from_client

    receiver = Receiver(DynamoDBDedupeStore("deliveries"), keys_from_client(client))
    app.wsgi_app = receiver.wsgi(app.wsgi_app)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from punctual_sdk.receiver.dedupe import (
    Claim,
    DedupeStore,
    DeliveryRecord,
    InMemoryDedupeStore,
    OccurrenceGuard,
    Outcome,
)
from punctual_sdk.receiver.delivery import Delivery
from punctual_sdk.receiver.errors import (
    InProgress,
    InvalidDelivery,
    InvalidSignature,
    KeysUnavailable,
    LeaseLost,
    ReceiverError,
    RequestTooLarge,
    StaleFencingToken,
    StaleRequest,
    UnknownKey,
)
from punctual_sdk.receiver.keys import JobKey, KeyCache, KeyFetcher, keys_from_api, keys_from_client
from punctual_sdk.receiver.kit import Receiver
from punctual_sdk.receiver.signature import VerifiedCall, verify_v1, verify_v2

if TYPE_CHECKING:
    from punctual_sdk.receiver.dynamodb import DynamoDBDedupeStore


def __getattr__(name: str) -> Any:
    # The DynamoDB store needs boto3 (the `aws` extra): imported only when asked for.
    if name == "DynamoDBDedupeStore":
        from punctual_sdk.receiver.dynamodb import DynamoDBDedupeStore

        return DynamoDBDedupeStore
    raise AttributeError(name)


__all__ = [
    "Claim",
    "DedupeStore",
    "Delivery",
    "DeliveryRecord",
    "DynamoDBDedupeStore",
    "InMemoryDedupeStore",
    "InProgress",
    "InvalidDelivery",
    "InvalidSignature",
    "JobKey",
    "KeyCache",
    "KeyFetcher",
    "KeysUnavailable",
    "LeaseLost",
    "OccurrenceGuard",
    "Outcome",
    "Receiver",
    "ReceiverError",
    "RequestTooLarge",
    "StaleFencingToken",
    "StaleRequest",
    "UnknownKey",
    "VerifiedCall",
    "keys_from_api",
    "keys_from_client",
    "verify_v1",
    "verify_v2",
]
