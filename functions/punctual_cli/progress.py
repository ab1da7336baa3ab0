"""Progress of long operations (bulk submit, redrive) on stderr, so stdout stays clean for results.

On a terminal one line updates in place; otherwise (a CI log, a file) a line every few seconds and one at the
end, so logs show progress without thousands of lines.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import TextIO


@dataclass(eq=False)
class Progress:
    """Counts items done, by outcome (`advance("failed")`), against an optional (approximate) total."""

    label: str
    stream: TextIO
    total: int | None = None
    _: KW_ONLY
    approximate: bool = False
    interval: float = 2.0
    clock: Callable[[], float] = time.monotonic
    done: int = field(default=0, init=False)
    outcomes: Counter[str] = field(default_factory=Counter, init=False)

    def __post_init__(self) -> None:
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last_shown = self._started = self.clock()

    def line(self) -> str:
        of = ""
        if self.total is not None:
            shown_total = max(self.total, self.done)
            of = f"/{'~' if self.approximate else ''}{shown_total}"
            if shown_total:
                of += f" ({100 * self.done // shown_total}%)"
        counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(self.outcomes.items()))
        elapsed = self.clock() - self._started
        return f"{self.label}: {self.done}{of}" + (f" - {counts}" if counts else "") + f" [{elapsed:.0f}s]"

    def advance(self, outcome: str = "done", count: int = 1) -> None:
        self.done += count
        self.outcomes[outcome] += count
        now = self.clock()
        # A terminal is redrawn at most ten times a second; a log gets a line per interval.
        if now - self._last_shown >= (0.1 if self.tty else self.interval):
            self._show()
            self._last_shown = now

    def finish(self) -> None:
        """The final line (a terminal keeps it, ending the in-place line)."""
        self._show()
        if self.tty:
            self.stream.write("\n")
        self.stream.flush()

    def _show(self) -> None:
        if self.tty:
            self.stream.write(f"\r\x1b[K{self.line()}")
        else:
            self.stream.write(self.line() + "\n")
        self.stream.flush()
