"""The console's Operator page in a browser, run by tests/system/test_console_operator.py with the Playwright of
.local/browser (as console_browser.py, whose step and screenshot helpers it uses). Not a pytest module: it takes one
JSON argument, prints one JSON line per step it checked, and exits non-zero with the reason (and a failure.png) when a
step fails.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from console_browser import STEP_TIMEOUT, run, shoot, step  # the same folder: the script's own path comes first
from playwright.sync_api import Page, expect  # only in .local/browser's venv


def sign_in(page: Page, base: str, token: str) -> None:
    page.goto(f"{base}/console/")
    page.get_by_role("textbox", name="Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()


def scenario(page: Page, given: dict[str, Any], shots: Path) -> None:
    base = given["base"]
    page.set_default_timeout(STEP_TIMEOUT)
    expect.set_options(timeout=STEP_TIMEOUT)

    # The operator signs in; the Operator link is in the navigation (the API's document has the route).
    sign_in(page, base, given["operator_token"])
    nav = page.get_by_role("navigation", name="main")
    link = nav.get_by_role("link", name="Operator")
    expect(link).to_be_visible()
    step("signed in as the operator")

    # Open the page with the keyboard: every lane's ready queue and the dead-letter queue, in a captioned table.
    link.focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_have_text("Operator: lanes and lag")
    expect(link).to_have_attribute("aria-current", "page")
    lanes = page.get_by_role("table", name=re.compile("^Ready queues by lane"))
    for lane in ("high", "normal", "low", "dead letters", "all lanes"):
        expect(lanes.get_by_role("rowheader", name=lane, exact=True)).to_be_visible()
    for column in ("Lane", "Queue", "Visible", "In flight", "Delayed", "Oldest message"):
        expect(lanes.get_by_role("columnheader", name=column, exact=True)).to_be_visible()
    normal = lanes.locator("tr[data-lane=normal]")
    expect(normal).to_contain_text(given["normal_queue"])
    step("lanes shown")

    # The lag: the watermark's (the sweeper has run) and the largest of the last hour, from the metrics.
    expect(page.locator("#dispatch-lag")).to_contain_text(re.compile(r"^\d+ s"))
    expect(page.locator("#largest-lag")).to_be_visible()
    expect(page.get_by_role("table", name=re.compile("^Last 60 minutes"))).to_be_visible()
    # No job of any tenant is on the page.
    expect(page.locator("main")).not_to_contain_text(given["tenant_job_name"])
    page.get_by_role("button", name="Refresh").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_text(re.compile("^Read at "))).to_be_visible()
    step("lag shown, no job")
    shoot(page, shots, "operator")

    # A tenant that is not an operator sees why, and no table.
    page.get_by_role("button", name="Sign out").click()
    sign_in(page, base, given["tenant_token"])
    page.goto(f"{base}/console/#/operator")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("this principal is not an operator: tenant")
    expect(alert).to_contain_text("operators")
    expect(page.get_by_role("table")).to_have_count(0)
    step("a tenant is told it is not an operator")


if __name__ == "__main__":
    run(scenario)
