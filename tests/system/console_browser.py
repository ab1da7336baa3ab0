"""The console's browser scenario, run by tests/system/test_console.py with the Playwright of .local/browser (its
own venv: `ensure_browser` in scripts/lib/bootstrap.sh) driving Debian's chromium. Not a pytest module: it takes
one JSON argument (what the test created on the stack), prints one JSON line per step it checked, and exits non-zero
with the reason (and a failure.png) when a step fails.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, Route, expect, sync_playwright  # only in .local/browser's venv

#: Milliseconds a step waits for the page (the job page refreshes every 3 s; a run fires within seconds).
STEP_TIMEOUT = 30_000


def step(name: str, **facts: Any) -> None:
    print(json.dumps({"step": name, **facts}), flush=True)


def shoot(page: Page, shots: Path, name: str) -> None:
    page.wait_for_timeout(300)  # let the last render settle (charts, the live region)
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    step("screenshot", file=f"{name}.png")


def scenario(page: Page, given: dict[str, Any], shots: Path) -> None:
    base = given["base"]
    page.set_default_timeout(STEP_TIMEOUT)
    expect.set_options(timeout=STEP_TIMEOUT)

    # Sign in with the dev token; the jobs list is the first page.
    page.goto(f"{base}/console/")
    page.get_by_role("textbox", name="Token").fill(given["token"])
    shoot(page, shots, "sign-in")
    # The first list load is held until a label has been typed: its answer must not wipe what was typed.
    held: list[Route] = []
    listing = re.compile(r"/v1/jobs\?")

    def hold(route: Route) -> None:  # the first list request waits; any later one goes on at once
        if held:
            route.continue_()
        else:
            held.append(route)

    page.route(listing, hold)
    page.get_by_role("button", name="Sign in").click()
    typed = "customer:1 kind:typed-while-loading"
    if given["label"]:
        page.get_by_label("Label (key:value)").fill(typed)
    while not held:
        page.wait_for_timeout(50)
    held[0].continue_()
    page.unroute(listing)
    jobs = page.get_by_role("table", name="jobs")
    expect(jobs.get_by_role("link", name=given["report_name"])).to_be_visible()
    if given["label"]:
        expect(page.get_by_label("Label (key:value)")).to_have_value(typed)
    step("signed in; what was typed outlived the list's load")

    # Find the job: by its label where the API filters by label, else by name.
    if given["label"]:
        page.get_by_label("Label (key:value)").fill(given["label"])
        page.get_by_role("button", name="Apply").click()
        expect(jobs.get_by_role("link", name=given["report_name"])).to_be_visible()
        expect(jobs.get_by_role("link", name=given["rate_name"])).to_have_count(0)
        step("found by label", label=given["label"])
    else:
        page.get_by_label("Name contains (jobs loaded so far)").fill(given["report_name"])
        expect(jobs.get_by_role("link", name=given["rate_name"])).to_have_count(0)
        step("found by name (this API has no label filter)")
    shoot(page, shots, "jobs")

    # Open it and watch it fire: the page refreshes itself until its run shows SUCCEEDED.
    jobs.get_by_role("link", name=given["report_name"]).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(given["report_name"])
    runs = page.get_by_role("table", name="runs")
    expect(runs.locator("tr[data-state=SUCCEEDED]")).to_have_count(1, timeout=45_000)
    row = runs.locator("tr[data-state=SUCCEEDED]")
    expect(row.locator("td").nth(2)).to_have_text("1")  # attempts
    expect(row.locator("td").nth(3)).to_have_text("1")  # fencing token
    expect(page.locator("#lateness-chart")).to_be_visible()
    step("watched it fire")

    shoot(page, shots, "job")

    # Pause and resume a recurring job from its page, with the keyboard: the skip link comes first, then the actions.
    page.goto(f"{base}/console/#/jobs/{given['rate_id']}")
    page.reload()  # a fresh document: a change of the hash alone keeps the focus where it was
    expect(page.locator("#next-runs li")).to_have_count(5)
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    page.get_by_role("button", name="Pause").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", level=1)).to_contain_text("PAUSED")
    step("paused from the job page")
    page.get_by_role("button", name="Resume").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("ACTIVE")
    page.get_by_role("button", name="Pause").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("PAUSED")
    step("resumed and paused again")

    # Dead letters: the failing job's DEAD run, with its error; retried where the API has the route.
    page.get_by_role("link", name="Dead letters").click()
    waiting = page.get_by_role("table", name="runs waiting")
    dead = waiting.locator("tr[data-state=DEAD]")
    expect(dead).to_have_count(1)
    expect(dead).to_contain_text(given["failing_name"])
    expect(dead).to_contain_text("400")
    shoot(page, shots, "dead-letters")
    retry = dead.get_by_role("button", name="Retry", exact=False)
    if retry.count():
        # The retried run goes back to its target, which still refuses it, so it is DEAD again within seconds:
        # what shows the retry took is the run's attempts (checked through the API after the browser is done).
        with page.expect_response(lambda r: r.url.endswith("/retry") and r.request.method == "POST") as answer:
            retry.click()
        assert answer.value.status == 202, answer.value.status
        step("retried the dead run")
    else:
        step("no retry route in this API: the Retry button is hidden")

    # Forecast and lateness.
    page.get_by_role("link", name="Forecast").click()
    expect(page.locator("#forecast-chart")).to_be_visible()
    expect(page.locator("#tenant-lateness-chart")).to_be_visible()
    shoot(page, shots, "forecast")
    step("charts")

    flows(page, given["flow"], shots)
    bulk_pause(page, given["bulk"], shots)


def flows(page: Page, flow: dict[str, Any], shots: Path) -> None:
    """The Flows page lists the key with its limits and live state, its link opens the key's view; the keyed job's
    page names the key (linking to it) and its limits, and its run the key held back says so."""
    page.get_by_role("navigation", name="main").get_by_role("link", name="Flows").click()
    keys = page.get_by_role("table", name="flow-control keys")
    row = keys.locator(f"tr[data-key='{flow['key']}']")
    expect(row).to_contain_text(flow["limits"])
    expect(row.locator("td").nth(1)).to_have_text(re.compile(r"^\d+$"))  # the backlog, a count
    shoot(page, shots, "flows")
    row.get_by_role("link", name=flow["key"]).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(flow["key"])
    expect(page.locator("#flow-key")).to_contain_text(flow["limits"])
    expect(page.locator("#flow-paused")).to_have_text("no")
    step("flows", key=flow["key"])

    page.goto(f"{page.url.split('#')[0]}#/jobs/{flow['job_id']}")
    expect(page.get_by_role("heading", level=1)).to_contain_text(flow["job_name"])
    facts = page.locator("#job-flow-control")
    expect(facts).to_contain_text(flow["limits"])
    held = page.get_by_role("table", name="runs").locator("tr[data-state=SUCCEEDED] .held")
    expect(held.first).to_contain_text(f"held by flow-control key {flow['key']} for ")
    expect(held.first).to_contain_text("its rate")
    shoot(page, shots, "job-held")
    facts.get_by_role("link", name=flow["key"]).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(flow["key"])
    step("a held run says which key held it")


def bulk_pause(page: Page, bulk: dict[str, Any], shots: Path) -> None:
    """Pause every job with the shared label from the jobs page's bulk bar, through a flaky network: the first
    request gets no answer, the second one's answer is lost after the API did the work (a 503), the third one's is
    a 202 (as when a request's time is up); each is sent again with the same Idempotency-Key, so it is one
    operation, and its report counts the jobs as changed by it (and the cancelled one as not changed, with why)."""
    started = time.monotonic()
    page.get_by_role("navigation", name="main").get_by_role("link", name="Jobs").click()
    jobs = page.get_by_role("table", name="jobs")
    expect(jobs.get_by_role("link", name=bulk["other_name"])).to_be_visible()  # loaded: no render resets the filter
    page.get_by_label("Label (key:value)").fill(bulk["label"])
    page.get_by_role("button", name="Apply").click()
    for name in bulk["names"]:
        expect(jobs.get_by_role("link", name=name)).to_be_visible()
    expect(jobs.get_by_role("link", name=bulk["other_name"])).to_have_count(0)
    bar = page.get_by_role("group", name=f"bulk actions on the jobs matching {bulk['label']}")
    progress = page.locator("#bulk-progress")

    keys: list[str] = []
    faults = iter(["no answer", "answer lost", "time up"])

    def flaky(route: Route) -> None:
        keys.append(route.request.all_headers().get("idempotency-key", ""))
        fault = next(faults, None)
        if fault == "no answer":
            route.abort("connectionreset")
            return
        if fault is None:
            route.continue_()
            return
        response = route.fetch()  # the API does the work
        if fault == "answer lost":
            problem = {"title": "Service Unavailable", "status": 503, "detail": "the answer was lost"}
            route.fulfill(status=503, content_type="application/problem+json", body=json.dumps(problem))
        else:
            route.fulfill(response=response, status=202, json={**response.json(), "state": "RUNNING"})

    page.route("**/v1/jobs/bulk", flaky)

    # Cancel asks first, naming the selector; dismissed, nothing is sent.
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    bar.get_by_role("button", name="Cancel all matching").click()
    expect(bar.get_by_role("button", name="Pause all matching")).to_be_enabled()
    assert asked and bulk["label"] in asked[0], asked
    assert keys == [], keys

    bar.get_by_role("button", name="Pause all matching").focus()
    page.keyboard.press("Enter")
    expect(bar.get_by_role("button", name="Resume all matching")).to_be_disabled()  # while it runs
    expect(progress).to_contain_text("sending it again as the same operation")
    expect(progress).to_contain_text("finished")
    changed = len(bulk["names"])
    expect(progress).to_contain_text(f"{changed + 1} matched, {changed} changed, 0 already so, 1 could not be changed")
    expect(progress.get_by_role("listitem")).to_contain_text(bulk["cancelled_id"])  # and why
    expect(bar.get_by_role("button", name="Resume all matching")).to_be_enabled()
    assert len(keys) == 4 and len(set(keys)) == 1 and keys[0], keys
    for name in bulk["names"]:  # the list is read again when the operation is done
        expect(jobs.locator("tr", has=page.get_by_role("link", name=name))).to_contain_text("PAUSED")
    shoot(page, shots, "bulk")
    step("bulk-paused by label", label=bulk["label"], requests=len(keys), seconds=round(time.monotonic() - started, 1))
    page.unroute("**/v1/jobs/bulk")

    # A selector the API refuses: its problem's detail shows, and a 4xx is not sent again.
    sent = len(keys)
    page.route("**/v1/jobs/bulk", lambda route: (keys.append("refused"), route.continue_()))
    page.get_by_label("Label (key:value)").fill(bulk["label"] + "-")  # a value may not end with "-"
    page.get_by_role("button", name="Apply").click()
    page.get_by_role("button", name="Pause all matching").click()
    expect(page.locator("section.bulk .error")).to_contain_text("the value must be")
    assert len(keys) == sent + 1, keys
    step("bulk refused with the API's detail")


def run(scenario: Callable[[Page, dict[str, Any], Path], None]) -> None:
    """Run a browser scenario on the JSON argument it was given: one chromium page, a failure.png when a step
    fails, and a failure when the page threw."""
    given = json.loads(sys.argv[1])
    shots = Path(given["screenshots"])
    shots.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=os.environ["CHROMIUM"], headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 860})
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        try:
            scenario(page, given, shots)
        except Exception:
            page.screenshot(path=str(shots / "failure.png"), full_page=True)
            raise
        finally:
            browser.close()
        if errors:
            raise SystemExit(f"the page threw: {errors}")
    step("done", seconds=round(time.monotonic() - started, 1))


if __name__ == "__main__":
    run(scenario)
