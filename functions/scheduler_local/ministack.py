"""ministack, a local AWS emulator (MIT, `ministack` on PyPI), as a child process on 127.0.0.1.

It is installed by `ensure_ministack` (scripts/lib/bootstrap.sh) into its own venv, `.local/ministack`, made
with Python 3.12: it runs Lambda functions as subprocesses of its own interpreter, so that interpreter must be
the Lambda runtime's. Those function processes share the emulator's process group, which is how `stop` ends
them all.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from scheduler_local.emulators import ensure_ministack, free_port, ministack_executable

#: The account and region it answers for, and credentials it accepts (it does not check them unless AUTH=true).
ACCOUNT_ID = "000000000000"
REGION = "us-east-1"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test"}
HEALTH_PATH = "/_ministack/health"
#: The Lambda runtime's Python (cdk/punctual_cdk/bundling.py PYTHON_VERSION), which ministack's own interpreter must be.
LAMBDA_PYTHON = "3.12"


class MinistackNotInstalled(RuntimeError):
    """The emulator's executable is missing: run `ensure_ministack` (scripts/test and scripts/deploy do)."""


def executable() -> Path:
    path = ministack_executable()
    if not os.access(path, os.X_OK):
        raise MinistackNotInstalled(
            f"ministack is not installed at {path}: run `bash -c 'source scripts/lib/bootstrap.sh && "
            "ensure_ministack'` (it needs Python 3.12 and PyPI)"
        )
    return path


def ensure_installed() -> Path:
    """`emulators.ensure_ministack` (the one installer), and a check that its venv is the Lambda runtime's Python."""
    try:
        program = ensure_ministack()
    except SystemExit as error:
        raise MinistackNotInstalled(str(error)) from None
    python = program.parent / "python"
    version = subprocess.run(
        [str(python), "-c", "import sys; print(*sys.version_info[:2], sep='.')"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    if version != LAMBDA_PYTHON:
        raise MinistackNotInstalled(
            f"ministack's venv ({program.parent.parent}) runs Python {version or '?'}, but it runs the Lambda "
            f"functions with that interpreter and they need {LAMBDA_PYTHON}: install Python {LAMBDA_PYTHON} "
            "(or set PYTHON312), remove that venv, and run again"
        )
    return program


class Ministack:
    """One emulator on a free port of 127.0.0.1; `env` is added to its environment (e.g. `AUTH=true`)."""

    def __init__(self, log: Path, env: Mapping[str, str] | None = None, *, program: Path | None = None) -> None:
        self.executable = program or executable()
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = log.resolve()
        self.tmp = self.log.parent / f"tmp-{self.port}"
        self.env = {
            # Not the caller's AWS endpoints: the functions it runs inherit its environment, and an
            # AWS_ENDPOINT_URL_* of the test run (scripts/test exports its own emulators') would send the deployed
            # functions to another emulator's tables and queues.
            **{k: v for k, v in os.environ.items() if not k.startswith("AWS_ENDPOINT_URL")},
            **CREDENTIALS,
            "GATEWAY_PORT": str(self.port),
            "BIND_HOST": "127.0.0.1",
            "MINISTACK_ACCOUNT_ID": ACCOUNT_ID,
            "MINISTACK_REGION": REGION,
            # Its pid file and the functions' unpacked code go to TMPDIR: one of its own, removed by `stop`.
            "TMPDIR": str(self.tmp),
            **(env or {}),
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def client_env(self) -> dict[str, str]:
        """What an AWS SDK or CLI (boto3, the CDK CLI) needs to talk to this emulator, and only to it."""
        return {
            **CREDENTIALS,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "CDK_DEFAULT_ACCOUNT": ACCOUNT_ID,
            "CDK_DEFAULT_REGION": REGION,
        }

    def start(self, timeout: float = 60) -> None:
        self.tmp.mkdir(parents=True, exist_ok=True)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [str(self.executable)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.log.parent,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ministack exited during start-up: {self.log_tail()}")
            try:
                with urllib.request.urlopen(self.endpoint + HEALTH_PATH, timeout=2) as response:
                    json.load(response)
                return
            except (OSError, urllib.error.URLError, ValueError):
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"ministack did not answer on {self.endpoint} within {timeout:.0f}s: {self.log_tail()}")

    def stop(self) -> None:
        """End the emulator and the function processes it started (one process group)."""
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            if _group_gone(self.proc, wait):
                break
        self.proc = None
        shutil.rmtree(self.tmp, ignore_errors=True)

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def __enter__(self) -> Ministack:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def _group_gone(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Whether the process group led by `proc` is empty within `timeout` (its leader reaped, no member left)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc.poll()
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False
