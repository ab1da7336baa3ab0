"""What every `punctual` command shares: the exit codes, the command's context (arguments, output, the API
client and the deployment behind it) and the shape of a list command."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol, TextIO, TypeVar

from punctual_cli.client import ApiError, Page, SchedulerClient
from punctual_cli.config import (
    Connection,
    Deployment,
    aws_deployment,
    connection,
    default_state_dir,
    local_deployment,
    stack_outputs,
)

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_CONFLICT = 4
EXIT_UNAVAILABLE = 5

EXIT_CODES_HELP = """exit codes:
  0 ok, 1 refused by the API (4xx; the detail and fields say what to fix), 2 usage error,
  3 not found (404), 4 conflict or stale --if-match (409/412), 5 server or network error"""


def exit_code_for(status: int) -> int:
    """The exit code for an HTTP error status."""
    if status == 404:
        return EXIT_NOT_FOUND
    if status in (409, 412):
        return EXIT_CONFLICT
    if 400 <= status < 500:
        return EXIT_REFUSED
    return EXIT_UNAVAILABLE


class Context:
    """What a command needs: its arguments, its output streams, and (made on first use) the API client, the
    AWS session and the deployment behind the API."""

    def __init__(self, args: argparse.Namespace, out: TextIO, err: TextIO, client: SchedulerClient | None) -> None:
        self.args = args
        self.out = out
        self.err = err
        self._client = client
        self._session: Any = None
        self._outputs: dict[str, str] | None = None
        self.connection: Connection | None = None

    @property
    def as_json(self) -> bool:
        return bool(self.args.json)

    @property
    def state_dir(self) -> Path:
        return Path(self.args.state_dir) if self.args.state_dir else default_state_dir()

    def session(self) -> Any:
        if self._session is None:
            import boto3

            self._session = boto3.Session(profile_name=self.args.profile, region_name=self.args.region)
        return self._session

    def outputs(self) -> dict[str, str] | None:
        if self.args.stack and self._outputs is None:
            self._outputs = stack_outputs(self.args.stack, self.session())
        return self._outputs

    def client(self) -> SchedulerClient:
        if self._client is None:
            self.connection = connection(
                api=self.args.api,
                token=self.args.token,
                aws=self.args.aws,
                state_dir=self.state_dir,
                stack_outputs=self.outputs(),
                make_session=self.session,
                region=self.args.region,
            )
            self._client = SchedulerClient(self.connection.api_url, self.connection.auth)
        return self._client

    def deployment(self) -> Deployment:
        if self.args.stack:
            return aws_deployment(self.args.stack, self.session(), self.outputs())
        return local_deployment(self.state_dir)

    def say(self, text: str) -> None:
        print(text, file=self.out)

    def note(self, text: str) -> None:
        print(text, file=self.err)

    def emit(self, document: Any) -> None:
        print(json.dumps(document, indent=2, default=str), file=self.out)

    def show(self, document: Any, text: Callable[[], str]) -> int:
        """A command's one answer: `document` as JSON with --json, else `text()` for people. Returns EXIT_OK."""
        if self.as_json:
            self.emit(document)
        else:
            self.say(text())
        return EXIT_OK

    def emit_line(self, document: Any) -> None:
        print(json.dumps(document, default=str), file=self.out, flush=True)


# -- commands ---------------------------------------------------------------------------------------------


class _Listed(Protocol):
    @property
    def raw(self) -> dict[str, Any]: ...


L = TypeVar("L", bound=_Listed)
K = TypeVar("K")


def listing(
    ctx: Context,
    noun: str,
    of: K,
    every: Callable[[K, int], Iterable[L]],
    one_page: Callable[[K, int | None, str | None], Page[L]],
    table: Callable[[list[L]], str],
    empty: str,
) -> int:
    """A list command: the `noun` of `of` (a job's runs, the jobs in a state), one page (`--limit`, `--cursor`) or
    every page (`--all`), as a table or `--json` (the API's document: the items under `noun` and `next_cursor`)."""
    args = ctx.args
    next_cursor: str | None = None
    if args.all:
        found = list(every(of, args.limit or 100))
    else:
        page = one_page(of, args.limit, args.cursor)
        found, next_cursor = page.items, page.next_cursor
    if ctx.as_json:
        ctx.emit({noun: [item.raw for item in found], "next_cursor": next_cursor})
        return EXIT_OK
    ctx.say(table(found) if found else empty)
    if next_cursor:
        ctx.note(f"more {noun}: --cursor {next_cursor} (or --all)")
    return EXIT_OK


def problem_document(error: ApiError) -> dict[str, Any]:
    """An API error as `--json` prints it: the problem the API sent, or one made of what is known."""
    if error.problem:
        return error.problem
    body: dict[str, Any] = {"status": error.status, "title": error.title, "detail": error.detail}
    if error.errors:
        body["errors"] = [asdict(e) for e in error.errors]
    return body
