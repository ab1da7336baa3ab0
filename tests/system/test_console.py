"""The web console in a real browser (headless Debian chromium driven by Playwright) against the local stack: sign in,
find a job, watch it fire, read its runs, pause and resume, see a dead run (and retry it where the API can), the
charts, a flow-control key on the Flows page and on its job's page with the run it held back, and pause every job
of a label at once from the jobs page (through a network that drops answers). A screenshot of each page goes to
$PUNCTUAL_CONSOLE_SCREENSHOTS (docs/console/ regenerates the docs' ones), else to a temporary folder.

The browser and Playwright are installed by `ensure_browser` (scripts/lib/bootstrap.sh) on first use: chromium from
apt, Playwright into .local/browser, never `playwright install`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness import Browser, LocalStack, Receiver, serve

pytestmark = pytest.mark.system

#: The scenario's own tenant, so the pages show only what this test created.
TOKEN = "t-console"


@pytest.fixture(scope="module")
def console_stack(aws_endpoints: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from serve(LocalStack(Path(tmp_path_factory.mktemp("console")), aws_endpoints, f"{TOKEN}=console"))


def _attempts(stack: LocalStack, job_id: str) -> int:
    """The highest fencing token the newest run's attempts were made with (each attempt claims the next)."""
    runs = stack.call("GET", f"/v1/jobs/{job_id}/runs", token=TOKEN)[1]["runs"]
    return max((int(entry["epoch"]) for entry in runs[0]["history"]), default=0) if runs else 0


def newest_run_state(stack: LocalStack, job_id: str) -> str | None:
    runs = stack.call("GET", f"/v1/jobs/{job_id}/runs", token=TOKEN)[1]["runs"]
    return str(runs[0]["state"]) if runs else None


def held_runs(stack: LocalStack, job_id: str) -> list[dict[str, object]]:
    """The job's runs that started, and that their flow-control key held back."""
    runs = stack.call("GET", f"/v1/jobs/{job_id}/runs", token=TOKEN)[1]["runs"]
    return [run for run in runs if run.get("held") and run["state"] == "SUCCEEDED"]


def test_the_console_finds_watches_and_acts_on_jobs_in_a_browser(
    console_stack: LocalStack, browser: Browser, receiver: Receiver, tmp_path: Path
) -> None:
    stack = console_stack
    status, openapi, _ = stack.call("GET", "/v1/openapi.json", token=TOKEN)
    assert status == 200
    has_labels = "labels" in openapi["components"]["schemas"]["JobSpec"].get("properties", {})
    # Given a target that refuses one job's calls (400: permanent, DEAD at once) and takes the others'
    refused: set[str] = set()
    receiver.respond = lambda n, headers: (400, {}) if headers.get("x-scheduler-job-id") in refused else (200, {})
    stamp = str(int(time.time()))
    report, failing, rate = f"console-report-{stamp}", f"console-failing-{stamp}", f"console-minutely-{stamp}"

    def create(name: str, schedule: dict[str, object], labels: dict[str, str]) -> str:
        job: dict[str, object] = {"name": name, "schedule": schedule, "target": {"type": "http", "url": receiver.url}}
        if has_labels:
            job["labels"] = labels
        status, body, _ = stack.call("POST", "/v1/jobs", job, token=TOKEN)
        assert status == 201, body
        return str(body["job_id"])

    failing_id = create(failing, {"type": "cron", "expression": "@yearly", "timezone": "UTC"}, {"customer": "7"})
    refused.add(failing_id)
    assert stack.call("POST", f"/v1/jobs/{failing_id}/trigger", token=TOKEN)[0] == 202
    report_id = create(report, {"type": "once", "delay_seconds": 8}, {"customer": "42", "kind": "report"})
    rate_id = create(rate, {"type": "cron", "expression": "* * * * *", "timezone": "UTC"}, {"customer": "7"})
    # and jobs for the bulk bar: two with a shared label, a cancelled one with it (a pause cannot take it), and one
    # with another value of that label
    assert "/v1/jobs/bulk" in openapi["paths"]
    fleet, yearly = f"fleet:f{stamp}", {"type": "cron", "expression": "@yearly", "timezone": "UTC"}
    fleet_names = [f"console-fleet-1-{stamp}", f"console-fleet-2-{stamp}"]
    fleet_ids = [create(name, yearly, {"fleet": f"f{stamp}"}) for name in fleet_names]
    cancelled_id = create(f"console-fleet-3-{stamp}", yearly, {"fleet": f"f{stamp}"})
    assert stack.call("DELETE", f"/v1/jobs/{cancelled_id}", token=TOKEN)[0] in (200, 204)
    elsewhere = f"console-elsewhere-{stamp}"
    elsewhere_id = create(elsewhere, yearly, {"fleet": f"g{stamp}"})
    # and a job of a flow-control key (one call per 5 s) triggered twice: its key holds the second run back
    flow = {"key": f"console-api-{stamp}", "rate": 1, "period_seconds": 5, "parallelism": 2, "max_backlog": 50}
    keyed_name = f"console-keyed-{stamp}"
    keyed = {"name": keyed_name, "schedule": yearly, "target": {"type": "http", "url": receiver.url}}
    status, body, _ = stack.call("POST", "/v1/jobs", {**keyed, "flow_control": flow}, token=TOKEN)
    assert status == 201, body
    keyed_id = str(body["job_id"])
    for _ in range(2):
        assert stack.call("POST", f"/v1/jobs/{keyed_id}/trigger", token=TOKEN)[0] == 202
    deadline = time.time() + 30
    while newest_run_state(stack, failing_id) != "DEAD":
        assert time.time() < deadline, "the refused job's run did not end DEAD within 30 s"
        time.sleep(0.3)
    deadline = time.time() + 45
    while len(held_runs(stack, keyed_id)) < 1:
        assert time.time() < deadline, "no run of the keyed job shows its key's hold within 45 s"
        time.sleep(0.5)
    shots = Path(os.environ.get("PUNCTUAL_CONSOLE_SCREENSHOTS") or tmp_path / "shots")

    # When the browser scenario runs
    given = {
        "base": stack.base,
        "token": TOKEN,
        "report_name": report,
        "report_id": report_id,
        "failing_name": failing,
        "rate_name": rate,
        "rate_id": rate_id,
        "label": "customer:42 kind:report" if has_labels else None,
        "screenshots": str(shots),
        "bulk": {"label": fleet, "names": fleet_names, "cancelled_id": cancelled_id, "other_name": elsewhere},
        "flow": {
            "key": flow["key"],
            "job_id": keyed_id,
            "job_name": keyed_name,
            "limits": "1 per 5 s, 2 at once, backlog ≤ 50",
        },
    }
    names = browser.steps("console_browser.py", given, timeout=150)

    # Then what the browser did is what the API holds
    assert "watched it fire" in names and "charts" in names and names[-1] == "done"
    assert "bulk-paused by label" in names and "bulk refused with the API's detail" in names
    assert "flows" in names and "a held run says which key held it" in names
    _, job, _ = stack.call("GET", f"/v1/jobs/{rate_id}", token=TOKEN)
    assert job["state"] == "PAUSED"
    # the bulk pause took exactly the labelled jobs
    states = {job_id: stack.call("GET", f"/v1/jobs/{job_id}", token=TOKEN)[1]["state"] for job_id in fleet_ids}
    assert states == dict.fromkeys(fleet_ids, "PAUSED")
    assert stack.call("GET", f"/v1/jobs/{cancelled_id}", token=TOKEN)[1]["state"] == "CANCELLED"
    assert stack.call("GET", f"/v1/jobs/{elsewhere_id}", token=TOKEN)[1]["state"] == "ACTIVE"
    if "retried the dead run" in names:  # the retry ran the same occurrence again: a new attempt, a new token
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not _attempts(stack, failing_id) >= 2:
            time.sleep(1)
        assert _attempts(stack, failing_id) >= 2
    assert {f"{page}.png" for page in ("sign-in", "jobs", "job", "dead-letters", "forecast", "bulk", "flows")} <= {
        p.name for p in shots.iterdir()
    }
