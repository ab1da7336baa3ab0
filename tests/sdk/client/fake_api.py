"""A scripted API with no network: it records each request and answers from a table. The SDK client's tests use it
through fixtures (tests/sdk/client/conftest.py), the CLI's tests directly (tests/cli/fakes.py).

It lives under tests/sdk because those tests also run against the installed wheel (scripts/sdk-check), where
punctual's core is not installed: it imports only `punctual_sdk`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

from punctual_sdk.client import Client
from punctual_sdk.transport import HttpRequest, HttpResponse

BASE = "http://api.test"


def problem(status: int, title: str, detail: str, **extra: Any) -> tuple[int, dict[str, Any]]:
    kind = f"https://punctual.dev/problems/{title.lower().replace(' ', '-')}"
    return status, {"type": kind, "title": title, "status": status, "detail": detail, **extra}


def job_json(job_id: str = "job-1", version: int = 1, state: str = "ACTIVE", **extra: Any) -> dict[str, Any]:
    """A job as the API shows it (scheduler.handlers.api_views.job_view); `extra` adds or replaces fields."""
    return {
        "job_id": job_id,
        "state": state,
        "version": version,
        "created_at": "2026-01-05T09:00:00Z",
        "updated_at": "2026-01-05T09:00:00Z",
        "next_run_at": "2026-01-06T08:00:00Z",
        "last_dispatched_for": None,
        "misfire_skipped": 0,
        "schedule": {"type": "cron", "expression": "0 9 * * 1-5", "timezone": "Europe/Berlin"},
        "target": {"type": "http", "url": "https://example.com/hook", "method": "POST", "headers": {},
                   "timeout_seconds": 30},
        "retry": {"max_attempts": 5, "initial_backoff_seconds": 5, "max_backoff_seconds": 900,
                  "max_event_age_seconds": 86400},
        "jitter_seconds": 0, "misfire_policy": "run_once", "overlap_policy": "skip", "delivery": "at_least_once",
        **extra,
    }  # fmt: skip


@dataclass
class FakeApi:
    """`answers` maps "METHOD /path" to (status, body[, headers]), to a list of those (one per call, the last
    repeated), or to a function of the request; unknown routes 404. It records every request."""

    answers: dict[str, Any] = field(default_factory=dict)
    requests: list[HttpRequest] = field(default_factory=list)
    sleeps: list[float] = field(default_factory=list)

    def __call__(self, request: HttpRequest, timeout: float) -> HttpResponse:
        self.requests.append(request)
        path = urlsplit(request.url).path
        answer = self.answers.get(f"{request.method} {path}")
        if isinstance(answer, list):
            answer = answer.pop(0) if len(answer) > 1 else answer[0]
        if answer is None:
            answer = problem(404, "Not Found", f"there is no resource at {path}")
        elif callable(answer):
            answer = answer(request)
        status, body, *rest = answer
        headers = {"Content-Type": "application/json", **(rest[0] if rest else {})}
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return HttpResponse(status, headers, data)

    def client(self, **options: Any) -> Client:
        options.setdefault("sleep", self.sleeps.append)
        options.setdefault("jitter", lambda: 0.5)
        return Client(BASE, transport=self, **options)

    def sent(self, index: int = -1) -> tuple[str, str, dict[str, list[str]], Any, dict[str, str]]:
        """(method, path, query, JSON body, headers) of a recorded request."""
        request = self.requests[index]
        parts = urlsplit(request.url)
        body = json.loads(request.body) if request.body else None
        return request.method, parts.path, parse_qs(parts.query), body, request.headers
