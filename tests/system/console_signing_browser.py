"""The console's SigV4 signing in a real browser, run by tests/system/test_console_signing.py with the Playwright of
.local/browser driving Debian's chromium. Not a pytest module: it takes one JSON argument (where the console is
served, the AWS credentials to sign in with, the fixed time, the requests to send), and prints one JSON line per
request the console sent to the API: its method, URL, headers and body, as they left the browser.

The browser's clock is fixed, so the signatures are reproducible. The API is never reached: every request to
`/v1/` is captured and answered here (the OpenAPI document and an empty job list, so the console gets past sign-in).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from playwright.sync_api import Route, expect, sync_playwright  # only in .local/browser's venv

STEP_TIMEOUT = 30_000


def main() -> None:
    given = json.loads(sys.argv[1])
    base, credentials = given["base"], given["credentials"]
    openapi = Path(given["openapi"]).read_text()
    sent: list[dict[str, Any]] = []

    def capture(route: Route) -> None:
        request = route.request
        sent.append(
            {
                "method": request.method,
                "url": request.url,
                "headers": request.all_headers(),
                "body": request.post_data,
            }
        )
        if request.url.endswith("/v1/openapi.json"):
            route.fulfill(status=200, content_type="application/json", body=openapi)
        elif request.method == "GET" and "/v1/jobs?" in request.url:
            route.fulfill(status=200, json={"jobs": [], "next_cursor": None})
        else:
            route.fulfill(status=200, json={})

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=os.environ["CHROMIUM"], headless=True)
        try:
            page = browser.new_page()
            page.set_default_timeout(STEP_TIMEOUT)
            expect.set_options(timeout=STEP_TIMEOUT)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.clock.set_fixed_time(datetime.fromisoformat(given["time"]))
            page.route(f"{base}/v1/**", capture)

            # Sign in through the form, as a user does: the console reads the OpenAPI document, then lists jobs.
            page.goto(f"{base}/console/")
            page.get_by_role("radio", name="AWS credentials", exact=False).check()
            page.get_by_label("Access key id").fill(credentials["accessKeyId"])
            page.get_by_label("Secret access key").fill(credentials["secretAccessKey"])
            page.get_by_label("Session token").fill(credentials["sessionToken"])
            page.get_by_label("Region").fill(credentials["region"])
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_role("heading", name="Jobs")).to_be_visible()
            expect(page.get_by_text("0 job(s) shown")).to_be_visible()

            # Then the fixed requests through the console's own client (the module app.js imported).
            for request in given["requests"]:
                page.evaluate(
                    """async ([module, r]) => {
                        const api = await import(module);
                        await api.call(r.method, r.path, r.body ?? undefined, { headers: r.headers });
                    }""",
                    [f"{base}/console/api.js", request],
                )
            if errors:
                raise SystemExit(f"the page threw: {errors}")
        finally:
            browser.close()
    for request in sent:
        print(json.dumps(request), flush=True)


if __name__ == "__main__":
    main()
