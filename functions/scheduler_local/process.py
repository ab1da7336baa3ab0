"""The local stack as a child process: `python -m scheduler_local` (what scripts/dev runs) in its own state folder,
on its own API port, sweeping every second. The system tests and the burst benchmark start it this way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from scheduler_local.emulators import ROOT, free_port


class StackProcess:
    """`env` is added to this process's environment (endpoints, tables prefix, tokens, ...)."""

    def __init__(self, state_dir: Path, env: Mapping[str, str]) -> None:
        self.state_dir = state_dir
        self.port = free_port()
        self.env = {
            **os.environ,
            "SCHEDULER_SWEEP_INTERVAL_SECONDS": "1",
            **env,
            "SCHEDULER_API_PORT": str(self.port),
            "SCHEDULER_STATE_DIR": str(state_dir),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "functions"), os.environ.get("PYTHONPATH")])),
        }
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = state_dir / "stack.out"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> None:
        """Start it and wait for its `API:` line (the api answers; sweeper and workers are running)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "scheduler_local"],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the local stack exited: {self.log.read_text()[-2000:]}")
            if any(line.startswith("API: ") for line in self.log.read_text().splitlines()):
                return
            time.sleep(0.2)
        raise RuntimeError(f"the local stack printed no API line within {timeout:.0f}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM (the stack stops its api, sweeper and workers, then its emulators); SIGINT would be ignored
        when the caller itself was started in the background by a non-interactive shell."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def pid(self, name: str) -> int:
        """The pid of one of its processes (`api`, `sweeper`, `worker-0`, ...)."""
        return int((self.state_dir / "pids" / f"{name}.pid").read_text())
