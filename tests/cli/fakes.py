"""A scripted API for CLI unit tests: it records each request and answers from a table, with no network."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from punctual_cli.client import HttpRequest, HttpResponse, SchedulerClient
from punctual_cli.main import main

BASE = "http://api.test"

Answer = tuple[int, Any] | Callable[[HttpRequest], tuple[int, Any]]


def job_json(job_id: str = "job-1", version: int = 1, state: str = "ACTIVE", **spec: Any) -> dict[str, Any]:
    """A job as the API shows it (see scheduler.handlers.api.job_view)."""
    definition = {
        "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
        "target": {"type": "http", "url": "https://example.com/hook", "method": "POST", "headers": {},
                   "timeout_seconds": 30},
        "retry": {"max_attempts": 5, "initial_backoff_seconds": 5, "max_backoff_seconds": 900,
                  "max_event_age_seconds": 86400},
        "jitter_seconds": 0, "misfire_policy": "run_once", "overlap_policy": "skip", "delivery": "at_least_once",
    }  # fmt: skip
    definition.update(spec)
    return {
        "job_id": job_id,
        "state": state,
        "version": version,
        "created_at": "2026-01-05T09:00:00Z",
        "updated_at": "2026-01-05T09:00:00Z",
        "next_run_at": "2026-01-06T08:00:00Z",
        "last_dispatched_for": None,
        "misfire_skipped": 0,
        **definition,
    }


def problem(status: int, title: str, detail: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    return status, {"type": "about:blank", "title": title, "status": status, "detail": detail, **extra}


@dataclass
class FakeApi:
    """`answers` maps "METHOD /path" to (status, body) or to a function of the request; unknown routes 404."""

    answers: dict[str, Answer] = field(default_factory=dict)
    requests: list[HttpRequest] = field(default_factory=list)

    def __call__(self, request: HttpRequest, timeout: float) -> HttpResponse:
        self.requests.append(request)
        parts = urlsplit(request.url)
        answer = self.answers.get(f"{request.method} {parts.path}")
        if answer is None:
            status, body = problem(404, "Not Found", f"there is no resource at {parts.path}")
        elif callable(answer):
            status, body = answer(request)
        else:
            status, body = answer
        return HttpResponse(status, {"Content-Type": "application/json"}, json.dumps(body).encode())

    def client(self) -> SchedulerClient:
        return SchedulerClient(BASE, None, transport=self, sleep=lambda seconds: None)

    def sent(self, index: int = -1) -> tuple[str, str, dict[str, list[str]], Any, dict[str, str]]:
        """(method, path, query, JSON body, headers) of a recorded request."""
        request = self.requests[index]
        parts = urlsplit(request.url)
        body = json.loads(request.body) if request.body else None
        return request.method, parts.path, parse_qs(parts.query), body, request.headers


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
