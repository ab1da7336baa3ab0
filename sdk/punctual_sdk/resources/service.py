"""The service itself: the forecast, the operator view, health and the OpenAPI document."""

from __future__ import annotations

from typing import Any

from punctual_sdk.calls import ApiCalls
from punctual_sdk.models import (
    Forecast,
    OperatorStatus,
)


class ServiceApi(ApiCalls):
    """The service itself: the forecast, the operator view, health and the OpenAPI document."""

    def forecast(self, minutes: int = 60) -> Forecast:
        """`GET /v1/forecast`: your occurrences due per minute over the next `minutes` (1-180)."""
        return Forecast.from_json(self._call("GET", "/v1/forecast", query={"minutes": str(minutes)}))

    def operator_status(self) -> OperatorStatus:
        """`GET /v1/operator/status`: every lane's load and the dispatch lag (for the tenants a deployment names as
        operators; any other gets a 403 ApiError whose detail says so)."""
        return OperatorStatus.from_json(self._call("GET", "/v1/operator/status"))

    def health(self) -> dict[str, Any]:
        """`GET /v1/health` (no auth needed)."""
        return self._call("GET", "/v1/health")

    def openapi(self) -> dict[str, Any]:
        """The OpenAPI 3.1 document the server serves."""
        return self._call("GET", "/v1/openapi.json")
