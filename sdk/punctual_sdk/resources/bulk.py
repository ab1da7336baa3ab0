"""Bulk actions over the jobs a label selector matches, and their progress."""

from __future__ import annotations

from collections.abc import Mapping

from punctual_sdk.calls import ApiCalls, BulkAction, _new_key, _segment
from punctual_sdk.models import (
    BulkOperation,
)


class BulkApi(ApiCalls):
    """Bulk actions over the jobs a label selector matches, and their progress."""

    def bulk_action(self, action: BulkAction, labels: Mapping[str, str], idempotency_key: str) -> BulkOperation:
        """`POST /v1/jobs/bulk`: one request's work (up to about 20 s) on the operation the key names, for every job
        with all of `labels`. Its progress: RUNNING means send it again with the same key to go on; DONE is the final
        report. A 5xx or a lost connection is retried: the same key is the same operation, never a second one."""
        body = {"action": action, "selector": {"labels": dict(labels)}}
        headers = {"Idempotency-Key": idempotency_key}
        return BulkOperation.from_json(self._call("POST", "/v1/jobs/bulk", body=body, headers=headers, retry=True))

    def bulk(self, action: BulkAction, labels: Mapping[str, str], idempotency_key: str | None = None) -> BulkOperation:
        """Pause, resume or cancel every job with all of `labels`, as one operation, until it is DONE (its report)."""
        key = idempotency_key or _new_key()
        operation = self.bulk_action(action, labels, key)
        while operation.state != "DONE":
            operation = self.bulk_action(action, labels, key)
        return operation

    def operation(self, operation_id: str) -> BulkOperation:
        """`GET /v1/operations/{id}`: a bulk operation's progress."""
        return BulkOperation.from_json(self._call("GET", f"/v1/operations/{_segment(operation_id)}"))
