"""`punctual forecast`: occurrences due per minute over the next hour, as a terminal bar chart (or `--json`)."""

from __future__ import annotations

from typing import Any

BAR_WIDTH = 50


def chart(body: dict[str, Any], width: int = BAR_WIDTH) -> str:
    """One line per minute: its time (UTC), a bar scaled to the busiest minute, the count and its peak second."""
    minutes = body.get("minutes", [])
    top = max((m["due"] for m in minutes), default=0)
    lines = [f"{'MINUTE (UTC)':<17} {'':<{width}} {'DUE':>7}  PEAK/S"]
    for m in minutes:
        due = int(m["due"])
        length = 0 if top == 0 else max(1 if due else 0, round(width * due / top))
        when = str(m["minute"]).replace("T", " ").removesuffix("Z")[:16]
        lines.append(f"{when:<17} {'#' * length:<{width}} {due:>7,}  {int(m.get('peak_second', 0)):>6,}")
    peak = body.get("peak_minute")
    summary = f"{int(body.get('total', 0)):,} due in {len(minutes)} minutes"
    if peak:
        summary += f"; busiest minute {str(peak).replace('T', ' ')[:16]} with {int(body['peak_due']):,}"
    lines += ["", summary]
    return "\n".join(lines)
