"""The real deployment into a running ministack: `cdk synth` of the adjusted app (scheduler_local.emulated_aws.app),
then `cdk bootstrap` and `cdk deploy` of that cloud assembly, all with the project's pinned CDK CLI (scripts/deploy).

Synthesized once: `cdk bootstrap` with an app synthesizes it too, and a synth is most of a deployment's time.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from scheduler_local.emulators import ROOT
from scheduler_local.ministack import ACCOUNT_ID, REGION, Ministack

#: The adjusted app (scripts/deploy passes `--app` on to the CLI).
APP = ".venv/bin/python -m scheduler_local.emulated_aws.app"
#: Apart from cdk.out: the asset hash does not cover the platform, so a host-platform asset in cdk.out would be
#: taken for the Lambda one by the next real `cdk deploy` (and the other way round).
ASSEMBLY_DIR = ROOT / ".local" / "cdk.out-ministack"
STACK_NAME = "punctual-dev"
#: `https://{api-id}.execute-api.{region}.amazonaws.com/{stage}/`, the stack's ApiUrl output.
_EXECUTE_API_URL = re.compile(
    r"^https://(?P<api>[a-z0-9]+)\.execute-api\.[a-z0-9-]+\.amazonaws\.com/(?P<stage>[^/]+)/$"
)
_CLI_FLAGS = ("--no-notices", "--no-version-reporting")


class DeployFailed(RuntimeError):
    """A cdk command failed; the message carries the tail of its output."""


@dataclass(frozen=True)
class CdkApp:
    """A CDK app deployed into the emulator: the command that runs it, its stack, its own cloud assembly folder."""

    command: str
    stack_name: str
    assembly_dir: Path


#: This repository's app, adjusted (scheduler_local.emulated_aws.app).
REPOSITORY_APP = CdkApp(APP, STACK_NAME, ASSEMBLY_DIR)


@dataclass(frozen=True)
class Deployment:
    outputs: dict[str, str]
    #: The API as the emulator serves it (its path-style execute-api address on 127.0.0.1).
    api_url: str
    #: Seconds spent in synth, bootstrap and deploy.
    timings: dict[str, float]
    app: CdkApp = REPOSITORY_APP

    @property
    def template(self) -> dict[str, object]:
        """The deployed template."""
        path = self.app.assembly_dir / f"{self.app.stack_name}.template.json"
        loaded: dict[str, object] = json.loads(path.read_text())
        return loaded


def local_api_url(emulator: Ministack, api_url: str) -> str:
    """The stack's `ApiUrl` (an AWS execute-api host) as the emulator serves it, on 127.0.0.1."""
    match = _EXECUTE_API_URL.match(api_url)
    if not match:
        raise DeployFailed(f"the stack's ApiUrl {api_url!r} is not an execute-api URL")
    return f"{emulator.endpoint}/_aws/execute-api/{match['api']}/{match['stage']}/"


def deploy(
    emulator: Ministack,
    log: Path,
    *,
    timeout: float = 600,
    app: CdkApp = REPOSITORY_APP,
    context: Mapping[str, str] | None = None,
    bootstrap: bool = True,
) -> Deployment:
    """Synthesize `app` (with `context`, `-c key=value`), bootstrap the emulator's account (unless it already is),
    deploy; the outputs as CloudFormation reports them (the stack's `ApiUrl` among them)."""
    outputs_file = log.parent / "outputs.json"
    outputs_file.unlink(missing_ok=True)
    assembly = ["--app", str(app.assembly_dir)]
    given = [part for key, value in (context or {}).items() for part in ("-c", f"{key}={value}")]
    synth = ["synth", "--app", app.command, "--output", str(app.assembly_dir), *given, "--quiet"]
    timings = {"synth": _cdk(emulator, log, synth, timeout)}
    if bootstrap:
        timings["bootstrap"] = _cdk(emulator, log, ["bootstrap", *assembly, f"aws://{ACCOUNT_ID}/{REGION}"], timeout)
    timings["deploy"] = _cdk(
        emulator,
        log,
        ["deploy", *assembly, app.stack_name, "--require-approval", "never", "--outputs-file", str(outputs_file)],
        timeout,
    )
    outputs = json.loads(outputs_file.read_text())[app.stack_name]
    return Deployment(outputs, local_api_url(emulator, outputs["ApiUrl"]), timings, app)


def _cdk(emulator: Ministack, log: Path, arguments: list[str], timeout: float) -> float:
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("AWS_")},
        **emulator.client_env(),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "functions"), os.environ.get("PYTHONPATH")])),
        "JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION": "1",
    }
    log.parent.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    with open(log, "ab") as out:
        out.write(f"\n$ scripts/deploy {' '.join(arguments)}\n".encode())
        out.flush()
        try:
            result = subprocess.run(
                [str(ROOT / "scripts" / "deploy"), *arguments, *_CLI_FLAGS],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise DeployFailed(f"cdk {arguments[0]} did not finish in {timeout:.0f}s; see {log}") from None
        seconds = time.monotonic() - began
        out.write(f"[cdk {arguments[0]}: exit {result.returncode} after {seconds:.1f}s]\n".encode())
    if result.returncode != 0:
        tail = log.read_text(errors="replace")[-4000:]
        raise DeployFailed(f"cdk {arguments[0]} failed (exit {result.returncode}); see {log}:\n{tail}")
    return seconds
