"""The forecast on the local stack: `punctual forecast` over real HTTP, and the sweeper's ForecastDueOccurrences."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from harness import LocalStack

from tests.cli.fakes import Result, run

pytestmark = pytest.mark.system


def cli(stack: LocalStack, *argv: str, token: str = "t-alice") -> Result:
    return run("--api", stack.base, "--token", token, "--state-dir", str(stack.state_dir), *argv)


def forecast_metric_values(logs: Path) -> list[float]:
    """ForecastDueOccurrences from the sweeper's EMF lines."""
    values: list[float] = []
    for path in logs.glob("sweeper*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if '"ForecastDueOccurrences"' in line:
                try:
                    document = json.loads(line[line.index("{") :])
                except ValueError:
                    continue
                value = document.get("ForecastDueOccurrences")
                values += value if isinstance(value, list) else [value]
    return [float(v) for v in values if v is not None]


def test_a_tenant_forecasts_its_herd_and_the_sweeper_publishes_the_metric(stack: LocalStack) -> None:
    # Given three of alice's jobs and one of bob's due in ten minutes, at the same instant
    at = time.strftime("%Y-%m-%dT%H:%M:30Z", time.gmtime(time.time() + 600))
    for token, count in (("t-alice", 3), ("t-bob", 1)):
        for _ in range(count):
            made = cli(stack, "submit", "--at", at, "--url", "http://127.0.0.1:9/never", token=token)
            assert made.code == 0, made.err
    minute = at[:16] + ":00Z"

    # When alice asks for the next 15 minutes, as JSON and as a chart
    document = cli(stack, "--json", "forecast", "--minutes", "15")
    chart = cli(stack, "forecast", "--minutes", "15")

    # Then she sees her three in that minute, not bob's
    assert document.code == 0, document.err
    row = next(m for m in document.json()["minutes"] if m["minute"] == minute)
    assert row["due"] == 3 and row["peak_second"] == 3 and list(row["by_tenant"]) == ["alice"]
    # (the chart's total counts every job of alice's in the window: the stack is shared with other tests)
    assert chart.code == 0 and "due in 15 minutes" in chart.out and "#" * 50 in chart.out
    [line] = [line for line in chart.out.splitlines() if line.startswith(f"{minute[:10]} {minute[11:16]}")]
    assert line.split()[-2:] == ["3", "3"]  # due, peak per second

    # And the sweeper's forecast (every tenant) reaches its metric within a minute or so
    deadline = time.time() + 150
    while time.time() < deadline and max(forecast_metric_values(stack.state_dir / "logs"), default=0) < 4:
        time.sleep(2)
    assert max(forecast_metric_values(stack.state_dir / "logs"), default=0) >= 4
