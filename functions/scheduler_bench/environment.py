"""Where the benchmark runs: the emulators (or the endpoints AWS_ENDPOINT_URL_* name), the tables and queues
of one run, and what is recorded about the machine, the versions and the commit."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

from scheduler.provision import Resources, create_table, provision
from scheduler.schema import JOBS_TABLE
from scheduler_local import emulators

ROOT = emulators.ROOT


@dataclass
class Endpoints:
    """The AWS endpoints of this run, and the emulators the benchmark started (stopped by `close`)."""

    dynamodb: str
    sqs: str
    started: emulators.Emulators | None

    def close(self) -> None:
        if self.started is not None:
            self.started.stop()

    def describe(self) -> dict[str, Any]:
        return {
            "dynamodb": self.dynamodb or "AWS (default endpoint)",
            "sqs": self.sqs or "AWS (default endpoint)",
            "started_by_the_benchmark": self.started is not None,
        }


def open_endpoints(log_dir: Path) -> Endpoints:
    """Use AWS_ENDPOINT_URL_* when set (another emulator, a recording proxy, a real account); otherwise start
    DynamoDB Local and/or ministack for what is missing, with `scheduler_local.emulators.start`. Sets the
    variables in this process so every boto3 client (and the local stack's processes) uses them."""
    shared = os.environ.get("AWS_ENDPOINT_URL")
    given = bool(os.environ.get("AWS_ENDPOINT_URL_DYNAMODB") or shared) and bool(
        os.environ.get("AWS_ENDPOINT_URL_SQS") or shared
    )
    started = None
    if not given:
        started = emulators.start(log_dir)  # starts only what the variables do not name
        os.environ.update(started.env())
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    shared = os.environ.get("AWS_ENDPOINT_URL", "")
    return Endpoints(
        os.environ.get("AWS_ENDPOINT_URL_DYNAMODB", shared), os.environ.get("AWS_ENDPOINT_URL_SQS", shared), started
    )


def create_resources(prefix: str, dynamodb: Any, sqs: Any, events: Any) -> Resources:
    """Fresh tables, queues and event bus for one scenario (the schema the CDK stack deploys)."""
    return provision(prefix, dynamodb, sqs, events=events)


def create_naive_table(name: str, dynamodb: Any) -> str:
    """A table for the Scan baseline, with the jobs table's schema."""
    create_table(dynamodb, JOBS_TABLE, name)
    return name


def delete_resources(
    resources: Resources, dynamodb: Any, sqs: Any, events: Any, extra_tables: tuple[str, ...] = ()
) -> None:
    """Drop a scenario's tables, queues and bus, so the emulators' memory does not grow from one to the next."""
    tables = (resources.jobs_table, resources.executions_table, resources.example_table, *extra_tables)
    for table in filter(None, tables):
        with contextlib.suppress(ClientError):
            dynamodb.delete_table(TableName=table)
    for url in (resources.ready_queue_url, resources.dlq_url):
        with contextlib.suppress(ClientError):
            sqs.delete_queue(QueueUrl=url)
    if resources.event_bus_name and resources.event_bus_name != "default":
        with contextlib.suppress(ClientError):
            events.delete_event_bus(Name=resources.event_bus_name)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine() -> dict[str, Any]:
    """CPU model, cores and memory of this machine."""
    models = [line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines() if "model name" in line]
    cpu = models[0] if models else platform.processor() or platform.machine()
    mem_kb = next(
        (int(line.split()[1]) for line in _read("/proc/meminfo").splitlines() if line.startswith("MemTotal:")), 0
    )
    return {
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "os": platform.platform(),
        "architecture": platform.machine(),
    }


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, Any]:
    """Python, boto3/botocore, the SQS emulator (ministack, or moto), moto and the DynamoDB Local jar."""
    try:
        jar: str | None = emulators.dynamodb_jar().parent.name
    except SystemExit:
        jar = None
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20).stderr.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        java = None
    return {
        "python": sys.version.split()[0],
        "boto3": _version("boto3"),
        "botocore": _version("botocore"),
        "ministack": emulators.MINISTACK_VERSION if emulators.emulator_kind() == "ministack" else None,
        "moto": _version("moto"),
        "aws_lambda_powertools": _version("aws-lambda-powertools"),
        "dynamodb_local": jar,
        "java": java,
    }


def git() -> dict[str, Any]:
    """The commit the run measured (and whether the work tree differed from it)."""

    def run(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    status = run("status", "--porcelain", "--untracked-files=no")
    return {"commit": run("rev-parse", "HEAD"), "dirty": bool(status) if status is not None else None}
