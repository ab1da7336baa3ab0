"""`scripts/deploy --local`: the real deployment (`cdk bootstrap` + `cdk deploy`) into ministack on 127.0.0.1, kept
running until Ctrl-C, for trying the AWS stack without an AWS account.

    python -m scheduler_local.emulated_aws [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from scheduler_local.emulated_aws.adjustments import ADJUSTMENTS, EMULATOR_ENV
from scheduler_local.emulated_aws.deploy import DeployFailed, deploy
from scheduler_local.emulators import ROOT
from scheduler_local.ministack import CREDENTIALS, REGION, Ministack, MinistackNotInstalled


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/deploy --local", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--state-dir", type=Path, default=ROOT / ".local" / "deploy-local", help="logs (default: .local/deploy-local)"
    )
    args = parser.parse_args(argv)
    state: Path = args.state_dir.resolve()
    try:
        emulator = Ministack(state / "ministack.log", env=EMULATOR_ENV)
    except MinistackNotInstalled as error:
        print(f"deploy --local: {error}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"deploy --local: starting ministack on {emulator.endpoint} (log: {emulator.log})", file=sys.stderr)
    try:
        emulator.start()
        print("deploy --local: cdk synth, bootstrap, deploy (about a minute or two) ...", file=sys.stderr)
        deployment = deploy(emulator, state / "cdk.log")
    except (DeployFailed, RuntimeError) as error:
        emulator.stop()
        print(f"deploy --local: {error}", file=sys.stderr)
        return 1
    keys = " ".join(f"{name}={value}" for name, value in CREDENTIALS.items())
    print(
        f"""
punctual is deployed into ministack ({emulator.endpoint}), with these emulator adjustments:
{chr(10).join(f"  - {adjustment.name}: {adjustment.why}" for adjustment in ADJUSTMENTS)}

API: {deployment.api_url}
Use it (any credentials work; the emulator does not check them):

  export {keys} AWS_DEFAULT_REGION={REGION}
  .venv/bin/punctual --api {deployment.api_url} --aws --region {REGION} health

AWS SDKs and the AWS CLI reach the emulator with AWS_ENDPOINT_URL={emulator.endpoint}.
Stack outputs: {state / "outputs.json"}. Ctrl-C stops the emulator (nothing is kept).""",
        flush=True,
    )
    try:
        while not stop.wait(1):
            if emulator.proc is None or emulator.proc.poll() is not None:
                print(f"deploy --local: ministack exited: {emulator.log_tail()}", file=sys.stderr)
                return 1
    finally:
        emulator.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
