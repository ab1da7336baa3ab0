"""The local API serves the web console's static files at /console/ without a token, and nothing outside them."""

from __future__ import annotations

import http.client
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.handlers.console_files import CONSOLE_DIR, console_file
from scheduler_local.api_server import BoundedServer, make_handler
from tests.sdk.http_server import serving


def no_handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    raise AssertionError(f"the console's files never reach the API handler: {event['path']}")


@pytest.fixture
def port() -> Iterator[int]:
    server = BoundedServer(("127.0.0.1", 0), make_handler(no_handler, {"t": "tenant"}), workers=2)
    with serving(server):
        yield server.server_address[1]


def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    conn.request(method, path)
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, body


def test_the_console_page_and_its_modules_are_served_without_a_token(port: int) -> None:
    status, headers, body = get(port, "/console/")
    assert status == 200
    assert headers["content-type"].startswith("text/html")
    assert b'src="app.js"' in body
    assert "script-src 'self'" in headers["content-security-policy"]
    status, headers, body = get(port, "/console/vendor/htm-preact-standalone-3.1.1.mjs")
    assert (status, headers["content-type"]) == (200, "text/javascript; charset=utf-8")
    assert body == (CONSOLE_DIR / "vendor" / "htm-preact-standalone-3.1.1.mjs").read_bytes()


def test_the_bare_console_path_redirects_to_the_folder(port: int) -> None:
    status, headers, _ = get(port, "/console")
    assert (status, headers["location"]) == (308, "/console/")


@pytest.mark.parametrize(
    "path",
    [
        "/console/../pyproject.toml",
        "/console/../docs/console/job.png",
        "/console/%2e%2e/pyproject.toml",
        "/console/nope.js",
        "/console/vendor",
    ],
)
def test_nothing_outside_the_console_files_is_served(port: int, path: str) -> None:
    status, headers, _ = get(port, path)
    assert status == 404
    assert headers["content-type"] == "application/problem+json"


def test_a_write_to_the_console_is_refused(port: int) -> None:
    status, headers, _ = get(port, "/console/index.html", "POST")
    assert (status, headers["allow"]) == (405, "GET, HEAD")


def test_a_symlink_out_of_the_console_folder_is_not_followed(tmp_path: Path) -> None:
    # Given a console folder with a link to a file beside it
    (tmp_path / "secret.js").write_text("secret")
    root = tmp_path / "console"
    root.mkdir()
    (root / "app.js").write_text("app")
    (root / "leak.js").symlink_to(tmp_path / "secret.js")
    # Then its own file is served and the link is not
    assert console_file("/console/app.js", root) == (b"app", "text/javascript; charset=utf-8")
    assert console_file("/console/leak.js", root) is None


def test_a_name_too_long_for_a_file_is_no_file() -> None:
    # 200 characters, 400 bytes: past the 255 bytes a file's name may have
    assert console_file("/console/" + "é" * 200 + ".js") is None
    assert console_file("/console/" + "a" * 5000) is None


# -- on AWS: the api function serves the same files at GET /console/... (no credentials) ---------------------


def lambda_get(path: str) -> tuple[int, dict[str, str], str]:
    from scheduler.handlers import api
    from scheduler.handlers.local_invocation import LocalContext, to_event

    answer = api.lambda_handler(to_event("GET", path, {}, b"", None, "127.0.0.1"), LocalContext("punctual-api", 29))
    headers = {k.lower(): v for k, v in (answer.get("headers") or {}).items()}
    for key, values in (answer.get("multiValueHeaders") or {}).items():
        headers[key.lower()] = ", ".join(values)
    return int(answer["statusCode"]), headers, answer.get("body") or ""


def test_the_api_function_serves_the_console_without_credentials() -> None:
    status, headers, body = lambda_get("/console/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert body == (CONSOLE_DIR / "index.html").read_text()
    assert "connect-src 'self'" in headers["content-security-policy"]
    status, _, body = lambda_get("/console/vendor/htm-preact-standalone-3.1.1.mjs")
    assert status == 200 and body == (CONSOLE_DIR / "vendor" / "htm-preact-standalone-3.1.1.mjs").read_text()
    status, headers, _ = lambda_get("/console")
    assert status == 308 and headers["location"] == "console/"


@pytest.mark.parametrize("path", ["/console/nope.js", "/console/%2e%2e%2fsettings.py", "/console/vendor/LICENSE.htm"])
def test_the_api_function_serves_nothing_else_under_console(path: str) -> None:
    status, headers, _ = lambda_get(path)
    assert status == 404 and headers["content-type"] == "application/problem+json"
