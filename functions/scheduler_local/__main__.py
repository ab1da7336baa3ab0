"""`scripts/dev`: the whole system on this machine, in the foreground.

Starts DynamoDB Local and ministack (SQS, SNS, EventBridge, ...) on 127.0.0.1 (unless AWS_ENDPOINT_URL_* point
elsewhere), creates the tables and queues from the shared schema, then runs the api, the sweeper and the worker
pollers as separate processes, restarting any that dies (so any of them can be killed to see the system recover). Prints
`API: http://127.0.0.1:<port>` once the API answers. Ctrl-C stops everything it started.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from scheduler_local import emulators
from scheduler_local.provision import provision

ROOT = emulators.ROOT


def say(message: str) -> None:
    print(message, flush=True)


@dataclass
class Child:
    name: str
    module: str
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    restarts: int = 0


class Supervisor:
    def __init__(self, state_dir: Path, env: dict[str, str], children: list[Child]) -> None:
        self.state_dir = state_dir
        self.env = env
        self.children = children
        self.stopping = False

    def spawn(self, child: Child) -> None:
        log = open(child.log, "ab")  # noqa: SIM115 - the child keeps writing to it
        child.proc = subprocess.Popen(
            [sys.executable, "-m", child.module],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        (self.state_dir / "pids").mkdir(exist_ok=True)
        (self.state_dir / "pids" / f"{child.name}.pid").write_text(str(child.proc.pid))

    def watch(self) -> None:
        for child in self.children:
            if child.proc is not None and child.proc.poll() is not None and not self.stopping:
                child.restarts += 1
                say(f"{child.name} exited (code {child.proc.returncode}); restarting it (restart #{child.restarts})")
                self.spawn(child)

    def stop(self) -> None:
        self.stopping = True
        for child in self.children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.terminate()
        for child in self.children:
            if child.proc is not None:
                try:
                    child.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.proc.kill()


def acquire_lock(state_dir: Path, port: int) -> IO[str]:
    """One `scripts/dev` per state folder: a second one says who holds it instead of failing obscurely."""
    lock_path = state_dir / "dev.lock"
    handle = open(lock_path, "a+")  # noqa: SIM115 - held for the life of the process
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        say(
            f"scripts/dev is already running here ({holder}). Stop it first (Ctrl-C in its terminal), or run a "
            f"second stack with its own SCHEDULER_STATE_DIR and SCHEDULER_API_PORT."
        )
        raise SystemExit(1) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()}, API http://127.0.0.1:{port}")
    handle.flush()
    return handle


def write_stack_env(state_dir: Path, values: dict[str, str]) -> None:
    """`stack.env` (shell exports) and `stack.json`: how tools (redrive, the CLI, benchmarks) find this stack."""
    import json
    import shlex

    (state_dir / "stack.env").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in values.items()))
    (state_dir / "stack.json").write_text(json.dumps(values, indent=2))


def wait_healthy(url: str, children: list[Child], timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        for child in children:
            if child.proc is not None and child.proc.poll() is not None:
                say(f"{child.name} exited during start-up; see {child.log}")
                return False
        time.sleep(0.2)
    return False


def main() -> int:
    port = int(os.environ.get("SCHEDULER_API_PORT", "8080"))
    state_dir = Path(os.environ.get("SCHEDULER_STATE_DIR") or ROOT / ".local").resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = acquire_lock(state_dir, port)
    if emulators.port_in_use(port):
        say(f"port {port} is already in use by another program; choose another with SCHEDULER_API_PORT")
        return 1
    logs = state_dir / "logs"
    logs.mkdir(exist_ok=True)
    prefix = os.environ.get("SCHEDULER_LOCAL_PREFIX", "punctual-local")

    say(f"starting DynamoDB Local and the {emulators.emulator_kind()} server ...")
    emu = emulators.start(logs)
    supervisor: Supervisor | None = None

    def shutdown(*_: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, shutdown)
    try:
        os.environ.update(emu.env())
        visibility = os.environ.get("SCHEDULER_LOCAL_VISIBILITY_TIMEOUT")  # crash tests only
        resources = provision(prefix, visibility_timeout=int(visibility) if visibility else None)
        env = {
            **os.environ,
            **emu.env(),
            **resources.env(),
            "SCHEDULER_API_PORT": str(port),
            "SCHEDULER_DEV_TOKENS": os.environ.get("SCHEDULER_DEV_TOKENS") or "dev-token=dev",
            # Local development calls receivers on this machine; on AWS private targets are refused by default.
            "SCHEDULER_ALLOW_PRIVATE_TARGETS": os.environ.get("SCHEDULER_ALLOW_PRIVATE_TARGETS", "true"),
            "POWERTOOLS_SERVICE_NAME": "punctual",
            "POWERTOOLS_METRICS_NAMESPACE": "Punctual",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "functions"), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
        }
        workers = int(os.environ.get("SCHEDULER_LOCAL_WORKERS", "2"))
        children = [
            Child("api", "scheduler_local.api_server", logs / "api.log"),
            Child("sweeper", "scheduler_local.sweeper_loop", logs / "sweeper.log"),
            *[
                Child(f"worker-{i + 1}", "scheduler_local.worker_poller", logs / f"worker-{i + 1}.log")
                for i in range(workers)
            ],
        ]
        aws = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if k in os.environ}
        aws["AWS_DEFAULT_REGION"] = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
        stack_values = {**aws, **emu.env(), **resources.env(), "SCHEDULER_API_URL": f"http://127.0.0.1:{port}"}
        write_stack_env(state_dir, stack_values)
        supervisor = Supervisor(state_dir, env, children)
        for child in children:
            supervisor.spawn(child)
        base = f"http://127.0.0.1:{port}"
        if not wait_healthy(base + "/v1/health", children, 60):
            say(f"the API did not become healthy; see the logs in {logs}")
            return 1
        say(f"API: {base}")
        say(f"tables {resources.jobs_table}, {resources.executions_table}; queue {resources.ready_queue_url}")
        say(f"logs in {logs}; tenants by token: {env['SCHEDULER_DEV_TOKENS']}; Ctrl-C to stop")
        while True:
            time.sleep(0.5)
            supervisor.watch()
    except KeyboardInterrupt:
        say("stopping ...")
        return 0
    finally:
        if supervisor is not None:
            supervisor.stop()
        emu.stop()
        lock.close()


if __name__ == "__main__":
    sys.exit(main())
