"""`scripts/dev`: the whole system on this machine, in the foreground.

Starts DynamoDB Local and ministack (SQS, SNS, EventBridge, ...) on 127.0.0.1 (unless AWS_ENDPOINT_URL_* point
elsewhere), creates the tables and queues from the shared schema, then runs the api, the sweeper (or
`SCHEDULER_LOCAL_SWEEPERS` of them, sharing the buckets through their claims as several sweeper invocations do) and
the worker pollers as separate processes, restarting any that dies (so any of them can be killed to see the system
recover). Prints `API: http://127.0.0.1:<port>` once the API answers. Ctrl-C stops everything it started.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from scheduler.provision import provision
from scheduler.schema import METRICS_NAMESPACE, SERVICE_NAME
from scheduler_local import emulators
from scheduler_local.prescale import FILE_NAME, INVOCATIONS_PER_POLLER, forecast_workers
from scheduler_local.scaling import Backlog, ScalingPolicy

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
    retired_at: float = 0.0
    #: Added to the supervisor's environment for this child alone (a sweeper's slot), at every (re)start.
    env: dict[str, str] = field(default_factory=dict)


class Supervisor:
    def __init__(self, state_dir: Path, env: dict[str, str], children: list[Child]) -> None:
        self.state_dir = state_dir
        self.env = env
        self.children = children
        self.retired: list[Child] = []
        self.stopping = False

    def spawn(self, child: Child) -> None:
        log = open(child.log, "ab")  # noqa: SIM115 - the child keeps writing to it
        child.proc = subprocess.Popen(
            [sys.executable, "-m", child.module],
            env={**self.env, **child.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        (self.state_dir / "pids").mkdir(exist_ok=True)
        (self.state_dir / "pids" / f"{child.name}.pid").write_text(str(child.proc.pid))

    def retire(self, child: Child) -> None:
        """Stop a child for good (SIGTERM: a worker finishes its batch first); `watch` no longer restarts it."""
        self.children.remove(child)
        child.retired_at = time.time()
        if child.proc is not None and child.proc.poll() is None:
            child.proc.terminate()
        self.retired.append(child)

    def reap(self) -> None:
        """Forget retired children that have exited (a worker that ignores SIGTERM for 30 s is killed)."""
        for child in list(self.retired):
            if child.proc is None or child.proc.poll() is not None:
                self.retired.remove(child)
            elif time.time() - child.retired_at > 30:
                child.proc.kill()

    def watch(self) -> None:
        self.reap()
        for child in self.children:
            if child.proc is not None and child.proc.poll() is not None and not self.stopping:
                child.restarts += 1
                say(f"{child.name} exited (code {child.proc.returncode}); restarting it (restart #{child.restarts})")
                self.spawn(child)

    def stop(self) -> None:
        self.stopping = True
        everyone = self.children + self.retired
        for child in everyone:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.terminate()
        for child in everyone:
            if child.proc is not None:
                try:
                    child.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    child.proc.kill()


class WorkerPool:
    """The worker pollers: `policy.minimum` at start, more while the ready queues are deep (up to the ceiling),
    fewer after they have been idle (`scheduler_local.scaling`). Each change is logged as a JSON line."""

    def __init__(self, supervisor: Supervisor, logs: Path, policy: ScalingPolicy, queue_urls: list[str]) -> None:
        self.supervisor = supervisor
        self.logs = logs
        self.policy = policy
        self.queue_urls = [url for url in queue_urls if url]
        self.workers: list[Child] = []
        self.serial = 0
        self.sqs: Any = None
        self.peak = 0
        self.wanted: tuple[int, Backlog] | None = None
        #: Pollers the forecast asks for ahead of a peak (scheduler_local.prescale), when pre-scaling is on.
        self.forecast_floor: Callable[[], int] | None = None
        self.floor = 0

    def add(self) -> None:
        self.serial += 1
        child = Child(f"worker-{self.serial}", "scheduler_local.worker_poller", self.logs / f"worker-{self.serial}.log")
        self.workers.append(child)
        self.supervisor.children.append(child)
        self.supervisor.spawn(child)
        self.peak = max(self.peak, len(self.workers))

    def start(self) -> None:
        for _ in range(self.policy.minimum):
            self.add()
        threading.Thread(target=self.observe_forever, name="worker-scaling", daemon=True).start()

    def backlog(self) -> Backlog:
        import boto3

        if self.sqs is None:
            self.sqs = boto3.client("sqs")
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
        names.append("ApproximateNumberOfMessagesDelayed")
        total = [0, 0, 0]
        for url in self.queue_urls:
            attributes = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
            for i, name in enumerate(names):
                total[i] += int(attributes.get(name, 0))
        return Backlog(*total)

    def observe_forever(self, interval: float = 1.0) -> None:
        """In a thread: read the queues' counts every `interval` and set the number of pollers wanted (`apply`,
        on the supervisor's loop, starts or stops them: reading the counts never delays a restart)."""
        while True:
            time.sleep(interval)
            try:
                backlog = self.backlog()
            except Exception as exc:  # the emulator is busy or restarting: keep the pollers as they are
                say(json.dumps({"message": "worker scaling skipped", "error": str(exc)[:200]}))
                continue
            wanted = self.policy.desired(len(self.workers), backlog, time.time())
            if self.forecast_floor is not None:
                self.floor = min(self.policy.maximum, self.forecast_floor())
                wanted = max(wanted, self.floor)
            self.wanted = (wanted, backlog)

    def apply(self) -> None:
        if self.wanted is None:
            return
        wanted, backlog = self.wanted
        self.wanted = None
        current = len(self.workers)
        if wanted == current:
            return
        while len(self.workers) < wanted:
            self.add()
        while len(self.workers) > wanted:
            self.supervisor.retire(self.workers.pop())
        say(
            json.dumps(
                {
                    "message": "worker pollers scaled",
                    "from": current,
                    "to": wanted,
                    "ceiling": self.policy.maximum,
                    "visible": backlog.visible,
                    "in_flight": backlog.in_flight,
                    "delayed": backlog.delayed,
                    "forecast_floor": self.floor,
                }
            )
        )


def local_sweepers(env: Mapping[str, str]) -> int:
    """SCHEDULER_LOCAL_SWEEPERS: how many sweeper processes to run (1 unless set); a bad value stops the start."""
    raw = env.get("SCHEDULER_LOCAL_SWEEPERS", "").strip() or "1"
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"SCHEDULER_LOCAL_SWEEPERS must be a whole number of at least 1, not {raw!r}")
    return int(raw)


def sweeper_children(count: int, logs: Path) -> list[Child]:
    """`count` sweeper processes: `sweeper`, `sweeper-2`, ... (named as the api processes are), each told its slot,
    so that their ticks are spread over the sweep interval (`scheduler_local.sweeper_loop`)."""
    children = []
    for slot in range(count):
        name = "sweeper" if slot == 0 else f"sweeper-{slot + 1}"
        env = {"SCHEDULER_LOCAL_SWEEPERS": str(count), "SCHEDULER_LOCAL_SWEEPER_SLOT": str(slot)}
        children.append(Child(name, "scheduler_local.sweeper_loop", logs / f"{name}.log", env=env))
    return children


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
    import shlex

    (state_dir / "stack.env").write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in values.items()))
    (state_dir / "stack.json").write_text(json.dumps(values, indent=2))


def wait_healthy(url: str, supervisor: Supervisor, timeout: float) -> bool:
    """Wait for the API to answer. A child that exits by itself meanwhile stops the start (it would most likely exit
    again: a bad setting, a port taken); one killed by a signal is restarted, as it is once the stack is up."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        for child in supervisor.children:
            code = child.proc.poll() if child.proc is not None else None
            if code is not None and code >= 0:
                say(f"{child.name} exited during start-up (code {code}); see {child.log}")
                return False
        supervisor.watch()
        time.sleep(0.2)
    return False


def main() -> int:
    port = int(os.environ.get("SCHEDULER_API_PORT", "8080"))
    try:
        sweepers = local_sweepers(os.environ)
    except ValueError as exc:
        say(str(exc))
        return 1
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
            # The developer's own tenant sees the operator's view of the lanes (on AWS nobody does until configured),
            # whose metrics come from the processes' EMF lines here, as there is no CloudWatch.
            "SCHEDULER_OPERATORS": os.environ.get("SCHEDULER_OPERATORS") or '["dev"]',
            "SCHEDULER_METRICS_LOG_DIR": str(logs),
            # Local development calls receivers on this machine; on AWS private targets are refused by default.
            "SCHEDULER_ALLOW_PRIVATE_TARGETS": os.environ.get("SCHEDULER_ALLOW_PRIVATE_TARGETS", "true"),
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "functions"), os.environ.get("PYTHONPATH")])),
            "PYTHONUNBUFFERED": "1",
        }
        policy = ScalingPolicy.from_env()
        # Pre-scaling on the local stack (docs/capacity.md): the forecast grows the worker pool ahead of a peak.
        prescaling = os.environ.get("SCHEDULER_LOCAL_PRESCALE", "").lower() in {"1", "true", "yes"}
        if prescaling:
            (state_dir / FILE_NAME).unlink(missing_ok=True)
            env["SCHEDULER_PRESCALE_ENABLED"] = "true"
            env["SCHEDULER_PRESCALE_STATE_FILE"] = str(state_dir / FILE_NAME)
        api_processes = max(1, int(os.environ.get("SCHEDULER_LOCAL_API_PROCESSES", "2")))
        children = [
            Child("api", "scheduler_local.api_server", logs / "api.log"),
            *[
                Child(f"api-{i}", "scheduler_local.api_server", logs / f"api-{i}.log")
                for i in range(2, api_processes + 1)
            ],
            *sweeper_children(sweepers, logs),
        ]
        aws = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if k in os.environ}
        aws["AWS_DEFAULT_REGION"] = os.environ.get("AWS_DEFAULT_REGION", "us-east-1")
        stack_values = {**aws, **emu.env(), **resources.env(), "SCHEDULER_API_URL": f"http://127.0.0.1:{port}"}
        write_stack_env(state_dir, stack_values)
        supervisor = Supervisor(state_dir, env, children)
        for child in children:
            supervisor.spawn(child)
        lanes = [resources.ready_queue_high_url, resources.ready_queue_url, resources.ready_queue_low_url]
        pool = WorkerPool(supervisor, logs, policy, lanes)
        if prescaling:
            # The sweeper's pre-scaler writes each lane's pollers there; one local poller per provisioned one above
            # the floor (both run about ten invocations / records at once).
            pool.forecast_floor = lambda: policy.minimum + forecast_workers(state_dir, INVOCATIONS_PER_POLLER)
        pool.start()
        base = f"http://127.0.0.1:{port}"
        if not wait_healthy(base + "/v1/health", supervisor, 60):
            say(f"the API did not become healthy; see the logs in {logs}")
            return 1
        say(f"API: {base}")
        say(f"tables {resources.jobs_table}, {resources.executions_table}; queue {resources.ready_queue_url}")
        if sweepers > 1:
            say(f"sweepers: {sweepers} processes, their ticks spread over the sweep interval")
        say(
            f"worker pollers: {policy.minimum} (up to {policy.maximum} while the ready queues are deep), "
            f"{os.environ.get('SCHEDULER_LOCAL_WORKER_THREADS', '10')} threads each"
        )
        say(f"logs in {logs}; tenants by token: {env['SCHEDULER_DEV_TOKENS']}; Ctrl-C to stop")
        while True:
            time.sleep(0.5)
            supervisor.watch()
            pool.apply()
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
