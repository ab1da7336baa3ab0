"""Flow-control keys: set a key's limits, read a key, list them."""

from __future__ import annotations

from typing import Any

from punctual_sdk.calls import ApiCalls, _segment
from punctual_sdk.models import FlowControlKey, FlowControlKeys


def _flow(key: str) -> str:
    return f"/v1/flow-controls/{_segment(key)}"


class FlowControlsApi(ApiCalls):
    """A destination's flow-control keys (docs/flow-control.md)."""

    def set_flow_control(
        self,
        key: str,
        *,
        rate: int | None = None,
        period_seconds: int | None = None,
        parallelism: int | None = None,
        max_backlog: int | None = None,
    ) -> FlowControlKey:
        """`PUT /v1/flow-controls/{key}`: the key's limits become these (give at least one of `rate` and
        `parallelism`). Idempotent: retried after a lost answer."""
        given = {"rate": rate, "period_seconds": period_seconds, "parallelism": parallelism, "max_backlog": max_backlog}
        body: dict[str, Any] = {name: value for name, value in given.items() if value is not None}
        return FlowControlKey.from_json(self._call("PUT", _flow(key), body=body, retry=True))

    def flow_control(self, key: str) -> FlowControlKey:
        """`GET /v1/flow-controls/{key}`: the key's limits, backlog, calls in flight and rate of the last minute."""
        return FlowControlKey.from_json(self._call("GET", _flow(key)))

    def flow_controls(self) -> list[FlowControlKey]:
        """`GET /v1/flow-controls`: your tenant's keys, by key."""
        return FlowControlKeys.from_json(self._call("GET", "/v1/flow-controls")).keys
