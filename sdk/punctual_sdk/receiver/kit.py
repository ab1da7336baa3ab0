"""`Receiver`: verify a delivery, dedupe on its occurrence key and refuse a stale fencing token, then run the
handler once. The framework adapters (`wsgi`, `asgi`, `lambda_handler`, `powertools_route`) are built on it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from punctual_sdk.receiver.dedupe import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_RECORD_TTL_SECONDS,
    DedupeStore,
    OccurrenceGuard,
    Outcome,
)
from punctual_sdk.receiver.delivery import Delivery
from punctual_sdk.receiver.errors import InvalidSignature, UnknownKey
from punctual_sdk.receiver.http import DEFAULT_MAX_ANSWER_BYTES, DEFAULT_MAX_BODY_BYTES
from punctual_sdk.receiver.keys import KeyCache, KeyFetcher
from punctual_sdk.receiver.signature import (
    DEFAULT_TOLERANCE_SECONDS,
    SIGNATURE_HEADER,
    SignatureHeader,
    VerifiedCall,
    header,
    job_id_of,
    signed_call,
    verify_v1,
    verify_v2,
)


class Receiver:
    """The receiver kit. `keys`: a KeyCache, or a `fetch_keys(job_id)` to build one with the defaults, which reads
    the keys' `expires_at` on `clock` (needed for HTTP deliveries only: the `lambda`, `sqs` and `sns` targets are
    authenticated by IAM, not signed).
    `store`: where the dedupe records live (DynamoDBDedupeStore; InMemoryDedupeStore in tests).
    `v1_key`: the tenant's v1 key, to accept calls signed v1 only during the migration window (v1 does not
    cover the occurrence key, the token or the URL: leave it None once punctual signs v2).
    `max_body_bytes`: the largest request body the HTTP adapters read; a larger one is refused with 413 before
    more than that is read. `max_answer_bytes`: the largest answer body the HTTP middleware records for replay;
    `max_result_bytes`: the largest result (encoded) a record keeps (docs/receiving.md, "The recorded result")."""

    def __init__(
        self,
        store: DedupeStore,
        keys: KeyCache | KeyFetcher | None = None,
        *,
        tolerance_seconds: float = DEFAULT_TOLERANCE_SECONDS,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        record_ttl_seconds: int = DEFAULT_RECORD_TTL_SECONDS,
        v1_key: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if tolerance_seconds <= 0 or max_body_bytes < 1 or max_answer_bytes < 0:
            raise ValueError("tolerance_seconds must be > 0, max_body_bytes >= 1 and max_answer_bytes >= 0")
        self.keys = keys if isinstance(keys, KeyCache) or keys is None else KeyCache(keys, wall_clock=clock)
        self.tolerance_seconds = tolerance_seconds
        self.v1_key = v1_key
        self.max_body_bytes = max_body_bytes
        self.max_answer_bytes = max_answer_bytes
        self.clock = clock
        self.guard = OccurrenceGuard(
            store,
            lease_seconds=lease_seconds,
            record_ttl_seconds=record_ttl_seconds,
            max_result_bytes=max_result_bytes,
            clock=clock,
        )

    # -- verify ---------------------------------------------------------------------------------------------

    def verify(self, method: str, host: str, path: str, headers: Mapping[str, str], body: bytes) -> VerifiedCall:
        """Check the call's signature with its job's keys (fetched again once when the call names a key id the
        cache lacks). `host`: the Host header; `path`: the request target (path and `?query`) as received.
        What costs nothing comes first: a call without a well-formed v2 signature or signed headers, or with a
        timestamp outside the tolerance, is refused before any key is looked up, let alone fetched.
        Raises InvalidSignature, StaleRequest or UnknownKey (all 401), or KeysUnavailable (503: the job's keys
        cannot be fetched now; punctual retries)."""
        now = self.clock()
        parsed = SignatureHeader.parse(header(headers, SIGNATURE_HEADER))
        if self.v1_key is not None and not parsed.v2:
            timestamp = verify_v1(self.v1_key, headers, body, self.tolerance_seconds, now)
            call = signed_call(method, host, path, headers)
            return VerifiedCall(**call.__dict__, timestamp=timestamp, key_id="v1")
        if self.keys is None:
            raise InvalidSignature("this receiver has no key source: give Receiver(keys=...) to verify HTTP calls")
        if not parsed.well_formed_v2():
            raise InvalidSignature(f"no well-formed v2 signature in {SIGNATURE_HEADER} ('v2=<key id>:<64 hex>')")
        parsed.check_time(self.tolerance_seconds, now)
        signed_call(method, host, path, headers)  # every signed header present and readable
        job_id = job_id_of(headers)
        keys, just_fetched = self.keys.lookup(job_id)
        try:
            return verify_v2(keys, method, host, path, headers, body, self.tolerance_seconds, now)
        except UnknownKey:
            if just_fetched:
                raise
            fresh = self.keys.refresh(job_id)
            return verify_v2(fresh, method, host, path, headers, body, self.tolerance_seconds, now)

    def http_delivery(self, method: str, host: str, path: str, headers: Mapping[str, str], body: bytes) -> Delivery:
        """`verify`, then the delivery the call carries (its payload: the JSON body, or the text)."""
        call = self.verify(method, host, path, headers, body)
        try:
            payload: Any = json.loads(body) if body else None
        except ValueError:
            payload = body.decode("utf-8", "replace")
        return Delivery(
            occurrence_key=call.occurrence_key,
            fencing_token=call.fencing_token,
            job_id=job_id_of(headers),
            scheduled_for=call.scheduled_for,
            attempt=call.attempt,
            payload=payload,
            source="http",
            raw=call,
        )

    # -- dedupe and fence -----------------------------------------------------------------------------------

    def run(self, delivery: Delivery, handler: Callable[[Delivery], Any]) -> Outcome:
        """Run `handler(delivery)` once per occurrence key (see `OccurrenceGuard`): a duplicate gets the first
        result; a stale fencing token raises StaleFencingToken; a live in-progress record raises InProgress."""
        return self.guard.run(
            delivery.occurrence_key, delivery.fencing_token, lambda: handler(delivery), delivery.job_id
        )

    # -- adapters -------------------------------------------------------------------------------------------

    def wsgi(self, app: Any, paths: tuple[str, ...] | None = None) -> Any:
        """WSGI middleware around `app` (e.g. `flask_app.wsgi_app`); see `punctual_sdk.receiver.wsgi`."""
        from punctual_sdk.receiver.wsgi import WsgiReceiver

        return WsgiReceiver(app, self, paths)

    def asgi(self, app: Any, paths: tuple[str, ...] | None = None) -> Any:
        """ASGI middleware around `app` (Starlette, FastAPI); see `punctual_sdk.receiver.asgi`."""
        from punctual_sdk.receiver.asgi import AsgiReceiver

        return AsgiReceiver(app, self, paths)

    def lambda_handler(self, handler: Callable[[Delivery], Any]) -> Callable[[Any, Any], Any]:
        """Decorator of a Lambda function's handler; see `punctual_sdk.receiver.aws_lambda`."""
        from punctual_sdk.receiver.aws_lambda import lambda_handler

        return lambda_handler(self, handler)

    def powertools_route(self, app: Any) -> Callable[[Callable[[Delivery], Any]], Callable[..., Any]]:
        """Decorator of a Powertools event handler route; see `punctual_sdk.receiver.aws_lambda`."""
        from punctual_sdk.receiver.aws_lambda import powertools_route

        return powertools_route(self, app)
