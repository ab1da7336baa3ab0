"""Response views the API declares by type (`api_routes`): each becomes a component of the OpenAPI document under
its class name. The views the document already describes by hand (`Job`, `Run`, ...) are named as components."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict


class Health(TypedDict):
    """The liveness answer: the function runs and its routes are loaded."""

    status: Literal["ok"]
