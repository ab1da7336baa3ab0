"""The web console on AWS: its static files from the `scheduler` package, at `GET /console/...` on the same API (an
unauthorised API Gateway resource: the files hold no data, and each API call the console makes is signed by the
user's own credentials; docs/console.md)."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response

from scheduler.core.model.ids import IdRule
from scheduler.handlers.api_problems import problem_response
from scheduler.handlers.api_requests import app
from scheduler.handlers.api_routes import Answer, Param, route
from scheduler.handlers.console_files import CONSOLE_PREFIX, console_file, console_headers

#: The answers of a console file. The files are no API operation: the route table has them (the 405s read it), the
#: OpenAPI document does not.
FILE: dict[int, Answer] = {200: ("the file", None), 404: "no such file"}
#: A console file's name: it names a file of the package (`console_file` refuses any other), never a key; at most
#: the longest name a file may have.
FILE_NAME = (Param.path("name", rule=IdRule(r".+", 255, "a console file's name (at most 255 characters)")),)


def _serve(path: str) -> Response[str]:
    found = console_file(path)
    if found is None or not found[1].startswith("text/"):
        return problem_response(404, "Not Found", f"no console file at {path}; open {CONSOLE_PREFIX}/")
    data, content_type = found
    return Response(200, content_type, data.decode("utf-8"), headers=console_headers(content_type))


@route.get(CONSOLE_PREFIX, summary="the console's page", public=True, documented=False, responses=FILE)
def console_index() -> Response[str]:
    if not app.current_event.path.endswith("/"):  # the page's relative URLs resolve against .../console/
        return Response(308, "text/plain", "", headers={"Location": "console/"})
    return _serve(CONSOLE_PREFIX + "/")


@route.get(
    CONSOLE_PREFIX + "/<name>",
    summary="a file of the console",
    params=FILE_NAME,
    public=True,
    documented=False,
    responses=FILE,
)
def console_file_route(name: str) -> Response[str]:
    return _serve(f"{CONSOLE_PREFIX}/{name}")


@route.get(
    CONSOLE_PREFIX + "/vendor/<name>",
    summary="a vendored file",
    params=FILE_NAME,
    public=True,
    documented=False,
    responses=FILE,
)
def console_vendor_file(name: str) -> Response[str]:
    return _serve(f"{CONSOLE_PREFIX}/vendor/{name}")
