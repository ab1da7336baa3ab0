"""Starting a fan-out sweep (`scheduler.core.ports.SweepLauncher`): on AWS an asynchronous invoke of the sweeper
function itself; locally a process running the same handler."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

from scheduler.core.ports import HelperSweep

#: The event a fan-out sweep is invoked with (`scheduler.handlers.sweeper`): a tick's is EventBridge's.
HELPER_EVENT = "punctual.sweep.fan-out"


def helper_event(helper: HelperSweep) -> dict[str, Any]:
    return {"source": HELPER_EVENT, "tick": helper.tick, "index": helper.index, "sweeps": helper.sweeps}


def helper_of(event: Any) -> HelperSweep | None:
    """The fan-out sweep an event starts, or None for a tick (any other event)."""
    if not isinstance(event, dict) or event.get("source") != HELPER_EVENT:
        return None
    return HelperSweep(str(event.get("tick", "")), int(event.get("index", 0)), int(event.get("sweeps", 1)))


class LambdaSweepLauncher:
    """`Invoke` with `InvocationType=Event`: Lambda queues the event and answers 202 at once; the sweeper's
    asynchronous configuration (no retries, 60 s maximum age) drops what it cannot start in time, which the stack's
    alarm on `AsyncEventsDropped` reports."""

    def __init__(self, client: Any, function_name: str) -> None:
        #: The Lambda client, or a callable that makes it on the first launch (most ticks launch nothing).
        self._client = client
        self.function_name = function_name

    @property
    def client(self) -> Any:
        if callable(self._client) and not hasattr(self._client, "invoke"):
            self._client = self._client()
        return self._client

    def launch(self, helper: HelperSweep) -> None:
        self.client.invoke(
            FunctionName=self.function_name,
            InvocationType="Event",
            Payload=json.dumps(helper_event(helper)).encode(),
        )


class ProcessSweepLauncher:
    """Runs `command` with the event as its last argument, without waiting for it (a thread reaps it)."""

    def __init__(self, command: Sequence[str] = (sys.executable, "-m", "scheduler_local.sweep_helper")) -> None:
        self.command = list(command)

    def launch(self, helper: HelperSweep) -> None:
        process = subprocess.Popen([*self.command, json.dumps(helper_event(helper))])
        threading.Thread(target=process.wait, name="sweep-helper-reaper", daemon=True).start()
