"""What the CLI's unit tests share: the SDK tests' scripted API (tests/sdk/client/fake_api.py) making the CLI's
client, and `run`, the `punctual` command run in this process (`usage_error`: one that argparse refuses)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from typing import Any

from punctual_cli.client import SchedulerClient
from punctual_cli.main import main
from tests.sdk.client import fake_api
from tests.sdk.client.fake_api import BASE, job_json, problem

__all__ = ["BASE", "FakeApi", "Result", "job_json", "problem", "run", "usage_error"]


class FakeApi(fake_api.FakeApi):
    """The SDK tests' scripted API, whose clients are the CLI's (`SchedulerClient`) and never sleep."""

    def client(self, **options: Any) -> SchedulerClient:
        options.setdefault("sleep", lambda seconds: None)
        return SchedulerClient(BASE, transport=self, **options)


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run(*argv: str, client: SchedulerClient | None = None) -> Result:
    """Run `punctual ARGV` in this process, capturing its output (argparse writes to sys.stderr itself)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv), client=client, stdout=out, stderr=err)
    return Result(code, out.getvalue(), err.getvalue())


def usage_error(*argv: str) -> Result:
    """Run `punctual ARGV` against a scripted API that answers nothing, and check it is refused as a usage error:
    exit 2, the reason on stderr, nothing sent."""
    api = FakeApi()
    result = run(*argv, client=api.client())
    assert (result.code, api.requests) == (2, [])
    assert result.err
    return result
