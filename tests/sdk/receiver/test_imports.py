"""The receiver kit installs without punctual's core and, for verification and the in-memory store, without boto3
or Powertools: importing and using it needs none of them (they are imported only by the parts that need them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SDK = Path(__file__).resolve().parents[3] / "sdk"

PROGRAM = f"""
import sys
sys.path.insert(0, {str(SDK)!r})
for name in ("scheduler", "boto3", "botocore", "aws_lambda_powertools"):
    sys.modules[name] = None  # any import of these now raises ImportError
from punctual_sdk.receiver import InMemoryDedupeStore, Receiver
receiver = Receiver(InMemoryDedupeStore(), lambda job_id: {{}})
handler = receiver.lambda_handler(lambda delivery: delivery.payload)
envelope = {{"occurrence_key": "k", "fencing_token": 1, "job_id": "j", "scheduled_for": "", "attempt": 1}}
assert handler({{**envelope, "payload": 5}}, None) == 5
receiver.wsgi(lambda environ, start_response: [])
receiver.asgi(lambda scope, receive, send: None)
print("ok")
"""


def test_the_kit_imports_and_runs_without_the_core_boto3_or_powertools() -> None:
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
