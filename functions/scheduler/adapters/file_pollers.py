"""PollerControl for the local stack: each lane's MinimumPollers in a JSON file of the stack's state folder, which the
local worker pool reads (`scheduler_local.prescale.forecast_workers`). Writes are atomic (a temporary file renamed
over the old one) under an exclusive lock, so several local sweepers never interleave."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Sequence
from pathlib import Path

#: What a lane has before any write: provisioned mode's floor.
BASELINE = 2


def read_pollers(path: Path) -> dict[str, int]:
    try:
        data = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {str(lane): int(value) for lane, value in data.items()} if isinstance(data, dict) else {}


class FilePollerControl:
    def __init__(self, path: Path, lanes: Sequence[str] = ("high", "normal", "low")) -> None:
        self.path = path
        self._lanes = list(lanes)

    def lanes(self) -> list[str]:
        return sorted(self._lanes)

    def minimum_pollers(self, lane: str) -> int | None:
        return read_pollers(self.path).get(lane, BASELINE)

    def set_minimum_pollers(self, lane: str, pollers: int) -> bool:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            current = read_pollers(self.path)
            current[lane] = pollers
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(current, sort_keys=True))
            os.replace(temporary, self.path)
        return True
