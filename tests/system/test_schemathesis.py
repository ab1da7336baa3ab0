"""The API's contract checked by a client nobody here wrote: schemathesis (pinned in
pyproject.toml) against `/v1/openapi.json` of a local stack with a single worker (the local stack's minimum),
every check on, bounded in time, and every URL it generates rewritten to a refused loopback address, so nothing
is ever delivered off this machine (other target types reach only the local emulators).

After the run the API must still answer (it once wedged after ~2,400 such requests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import LocalStack

pytestmark = pytest.mark.system

#: Where every generated URL goes: the discard port on loopback, where nothing listens.
REFUSED = "http://127.0.0.1:9/refused"
#: Seconds the whole run may take (schemathesis stops generating at this budget).
BUDGET_SECONDS = 150

HOOKS = f'''
"""Schemathesis hooks of tests/system/test_schemathesis.py: no generated URL may point anywhere but {REFUSED}."""
import schemathesis


def _rewrite(value):
    if isinstance(value, dict):
        return {{k: (_REFUSED if k == "url" else _rewrite(v)) for k, v in value.items()}}
    if isinstance(value, list):
        return [_rewrite(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return _REFUSED
    return value


_REFUSED = "{REFUSED}"


@schemathesis.hook
def map_body(context, body):
    return _rewrite(body)
'''


#: Schema-valid input the API rightly refuses on meaning no schema can carry: a version that is not the current one
#: (412), a cursor it did not issue, a handler name that is not registered, a range in the future or with no
#: occurrence, a merge patch that makes the job invalid (422) - each a declared, problem+json answer. Every other
#: check keeps its defaults (no 5xx, declared statuses and content types, response schemas, 405 for undeclared
#: methods, schema-invalid input rejected, ...).
CONFIG = """
[checks.positive_data_acceptance]
expected-statuses = ["2xx", "3xx", "401", "403", "404", "409", "412", "422", "429"]
"""


@pytest.fixture(scope="module")
def quiet_stack(aws_endpoints: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack of its own with one worker (the least the local stack runs): little of what the fuzzer creates runs."""
    env = {**aws_endpoints, "SCHEDULER_LOCAL_WORKERS": "1", "SCHEDULER_LOCAL_MAX_WORKERS": "1"}
    local = LocalStack(Path(tmp_path_factory.mktemp("fuzzed")), env, "t-fuzz=fuzz").start()
    try:
        yield local
    finally:
        local.stop()


def test_schemathesis_finds_no_contract_violation_and_the_api_still_answers(
    quiet_stack: LocalStack, tmp_path: Path
) -> None:
    (tmp_path / "punctual_st_hooks.py").write_text(HOOKS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "SCHEMATHESIS_HOOKS": "punctual_st_hooks",
    }
    report = tmp_path / "report.json"
    (tmp_path / "schemathesis.toml").write_text(CONFIG)
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "--config-file",
        str(tmp_path / "schemathesis.toml"),
        "run",
        f"{quiet_stack.base}/v1/openapi.json",
        "--url",
        quiet_stack.base,
        "--header",
        "Authorization: Bearer t-fuzz",
        "--checks",
        "all",
        # The ids' patterns and lengths make some generated values rare: Hypothesis's filtering and speed health
        # checks abort on a loaded machine without any contract check failing. Every check still runs.
        "--suppress-health-check",
        "filter_too_much,too_slow",
        "--workers",
        "1",
        "--phases",
        "examples,coverage,fuzzing",
        "--max-examples",
        "20",
        "--max-time",
        str(BUDGET_SECONDS),
        "--request-timeout",
        "60",
        # A create of a job every second near the sealed horizon sends its look-ahead (~300 messages) before it
        # answers; on the emulators of a loaded machine that can take tens of seconds.
        "--max-response-time",
        "60",
        "--seed",
        "20",
        "--report",
        "ndjson",
        "--report-dir",
        str(tmp_path),
        "--report-ndjson-path",
        str(report),
    ]
    run = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=BUDGET_SECONDS + 120)
    (tmp_path / "schemathesis.out").write_text(run.stdout + run.stderr)
    if os.environ.get("PUNCTUAL_ST_OUT"):
        Path(os.environ["PUNCTUAL_ST_OUT"]).write_text(run.stdout + run.stderr)
    assert run.returncode == 0, run.stdout[:8000] + "\n...\n" + run.stdout[-3000:] + run.stderr[-2000:]

    # And the API still answers, health first
    with urllib.request.urlopen(f"{quiet_stack.base}/v1/health", timeout=5) as response:
        assert json.loads(response.read()) == {"status": "ok"}
    assert quiet_stack.call("GET", "/v1/jobs?limit=1", token="t-fuzz")[0] == 200
