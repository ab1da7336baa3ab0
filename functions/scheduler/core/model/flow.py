"""A flow-control key (docs/flow-control.md): the limits a destination sets on the calls made to it, shared by every
job of the tenant that names the key."""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

#: A key: 1-128 characters of letters, digits and `._:-`.
FLOW_KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
#: The longest period a rate may be counted over (seconds).
MAX_PERIOD_SECONDS = 3600
#: The fastest rate one key is held to (calls a second): every release of a key is booked in one DynamoDB item,
#: rewritten by each sweep page and each retry that names it; above this one item cannot keep up
#: (docs/flow-control.md, "Limits").
MAX_RATE_PER_SECOND = 500.0
#: The most calls of one key in flight at once: each holds one leased item in the key's partition.
MAX_PARALLELISM = 1000


def flow_key_problem(key: str) -> str | None:
    """Why `key` is not a flow-control key, or None."""
    if not FLOW_KEY.fullmatch(key):
        return "a flow-control key is 1-128 characters of letters, digits, '.', '_', ':' and '-'"
    return None


class FlowControl(BaseModel):
    """A job's `flow_control`, and the body of `PUT /v1/flow-controls/{key}` (without `key`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    key: str = Field(min_length=1, max_length=128, description="1-128 characters of [A-Za-z0-9._:-]")
    rate: int | None = Field(
        default=None, strict=True, ge=1, le=1_000_000, description="calls started per period_seconds at most"
    )
    period_seconds: int = Field(default=1, strict=True, ge=1, le=MAX_PERIOD_SECONDS)
    parallelism: int | None = Field(
        default=None, strict=True, ge=1, le=MAX_PARALLELISM, description="calls in flight at once at most"
    )
    max_backlog: int | None = Field(
        default=None,
        strict=True,
        ge=1,
        le=10_000_000,
        description="occurrences held at most: a create or trigger beyond it is refused (429)",
    )

    @field_validator("key")
    @classmethod
    def _key_is_a_key(cls, value: str) -> str:
        problem = flow_key_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _enforceable(self) -> FlowControl:
        if self.rate is None and self.parallelism is None:
            raise ValueError("give at least one of 'rate' (calls per period_seconds) and 'parallelism'")
        if self.rate is not None and self.rate / self.period_seconds > MAX_RATE_PER_SECOND:
            raise ValueError(
                f"a rate of {self.rate} per {self.period_seconds} s is more than one key can hold to "
                f"({MAX_RATE_PER_SECOND:g} calls a second): split the destination over several keys"
            )
        return self

    @property
    def per_second(self) -> float | None:
        """The rate in calls a second (None: no rate)."""
        return None if self.rate is None else self.rate / self.period_seconds

    def spacing_ms(self, factor: float = 1.0) -> int:
        """The gap between two releases of the key at `factor` of its rate (at least 1 ms)."""
        assert self.rate is not None
        return max(1, math.ceil(self.period_seconds * 1000 / (self.rate * factor)))
