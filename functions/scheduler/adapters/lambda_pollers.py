"""PollerControl on AWS: the worker event source mappings' `ProvisionedPollerConfig.MinimumPollers`, read with
GetEventSourceMapping and set with UpdateEventSourceMapping (the sweeper's role may call exactly those two, on exactly
these mappings: cdk/punctual_cdk/prescale.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from botocore.exceptions import ClientError

#: Errors that mean "another update is under way" (or its pollers are still being set up): try at the next sweep.
BUSY = {"ResourceConflictException", "ResourceInUseException", "TooManyRequestsException"}


class LambdaPollerControl:
    def __init__(self, client: Any, mappings: Mapping[str, str], maximum_pollers: int) -> None:
        """`mappings`: lane -> event source mapping UUID. `maximum_pollers` is kept as deployed (MaximumPollers)."""
        self.client = client
        self.mappings = dict(mappings)
        self.maximum_pollers = maximum_pollers

    def lanes(self) -> list[str]:
        return sorted(self.mappings)

    def minimum_pollers(self, lane: str) -> int | None:
        mapping = self.client.get_event_source_mapping(UUID=self.mappings[lane])
        config = mapping.get("ProvisionedPollerConfig") or {}
        value = config.get("MinimumPollers")
        return int(value) if value is not None else None

    def set_minimum_pollers(self, lane: str, pollers: int) -> bool:
        try:
            self.client.update_event_source_mapping(
                UUID=self.mappings[lane],
                ProvisionedPollerConfig={"MinimumPollers": pollers, "MaximumPollers": self.maximum_pollers},
            )
        except ClientError as exc:
            if exc.response["Error"]["Code"] in BUSY:
                return False
            raise
        return True
