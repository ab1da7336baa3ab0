"""The console's Operator page in a real browser (headless Debian chromium driven by Playwright, as
test_console.py) against a local stack with one operator tenant and one that is not: the operator sees every lane's
load and the lag and no tenant's job; the other tenant sees why it may not. The page's screenshot goes to
$PUNCTUAL_CONSOLE_SCREENSHOTS (docs/console/ regenerates the docs' one), else to a temporary folder.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import Browser, LocalStack, Receiver, serve

pytestmark = pytest.mark.system

OPERATOR_TOKEN, TENANT_TOKEN = "t-ops", "t-tenant"


@pytest.fixture(scope="module")
def operator_stack(aws_endpoints: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    env = {**aws_endpoints, "SCHEDULER_OPERATORS": json.dumps(["ops"])}
    tokens = f"{OPERATOR_TOKEN}=ops,{TENANT_TOKEN}=tenant"
    yield from serve(LocalStack(Path(tmp_path_factory.mktemp("console-operator")), env, tokens))


def swept_status(stack: LocalStack, timeout: float = 30) -> dict[str, Any]:
    """The operator's view once the sweeper has set the watermark."""
    deadline = time.time() + timeout
    while True:
        status, body, _ = stack.call("GET", "/v1/operator/status", token=OPERATOR_TOKEN)
        assert status == 200, body
        if body["watermark"] is not None:
            return dict(body)
        assert time.time() < deadline, f"no watermark within {timeout} s: {body}"
        time.sleep(0.5)


def test_the_operator_page_shows_the_lanes_to_an_operator_only(
    operator_stack: LocalStack,
    browser: Browser,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    stack = operator_stack
    # Given a tenant's job that fires every minute (its next occurrence waits, delayed, in the normal lane)
    name = f"tenant-minutely-{int(time.time())}"
    job = {"name": name, "schedule": {"type": "cron", "expression": "* * * * *", "timezone": "UTC"},
           "target": {"type": "http", "url": receiver.url}}  # fmt: skip
    created, body, _ = stack.call("POST", "/v1/jobs", job, token=TENANT_TOKEN)
    assert created == 201, body
    # ... the operator's view on the API (and a 403 for the tenant, naming the setting)
    status = swept_status(stack)
    assert [lane["lane"] for lane in status["lanes"]] == ["high", "normal", "low"]
    refused, problem, _ = stack.call("GET", "/v1/operator/status", token=TENANT_TOKEN)
    assert refused == 403 and "operators" in problem["detail"]
    shots = Path(os.environ.get("PUNCTUAL_CONSOLE_SCREENSHOTS") or tmp_path / "shots")

    # When the browser scenario runs
    given = {
        "base": stack.base,
        "operator_token": OPERATOR_TOKEN,
        "tenant_token": TENANT_TOKEN,
        "tenant_job_name": name,
        "normal_queue": status["lanes"][1]["queue"],
        "screenshots": str(shots),
    }
    names = browser.steps("console_operator_browser.py", given, timeout=150)

    # Then the operator saw the lanes and the lag, the tenant the reason, and the page is on file
    assert names[-1] == "done"
    assert {"lanes shown", "lag shown, no job", "a tenant is told it is not an operator"} <= set(names)
    assert (shots / "operator.png").is_file()
