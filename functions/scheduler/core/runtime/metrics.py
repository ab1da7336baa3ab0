"""Metrics: the `Metrics` that counts nothing, for callers given none (CloudWatch EMF in production)."""

from __future__ import annotations


class NullMetrics:
    def count(self, name: str, value: float = 1, unit: str = "Count") -> None:
        return None
