"""How results.md writes figures, dollar amounts and tables."""

from __future__ import annotations

from typing import Any


def figure(value: Any, digits: int = 2) -> str:
    """A figure as the tables write it: `-` for none, thousands separated, floats to `digits` places."""
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def dollars(value: float) -> str:
    """Dollars to the cent."""
    return f"${value:,.2f}"


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table."""
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join(" --- " for _ in headers) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return out
