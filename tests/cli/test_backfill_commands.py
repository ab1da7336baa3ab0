"""`punctual backfill list` with a scripted API: the table, paging (--limit, --cursor, --all), --json and the
exit codes. No network."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from punctual_cli.client import HttpRequest
from tests.cli.fakes import FakeApi, problem, run

pytestmark = pytest.mark.usefixtures("no_network")

PATH = "/v1/jobs/job-1/backfill"


def backfill_json(backfill_id: str, state: str = "RUNNING", dispatched: int = 0, **changes: Any) -> dict[str, Any]:
    """A backfill as the API shows it (see scheduler.handlers.api.backfill_view)."""
    body = {
        "backfill_id": backfill_id,
        "job_id": "job-1",
        "from": "2026-11-01T00:00:00Z",
        "to": "2026-11-01T12:00:00Z",
        "state": state,
        "total": 720,
        "dispatched": dispatched,
        "remaining": 720 - dispatched if state == "RUNNING" else 0,
        "waves": dispatched // 500,
        "wave_size": 500,
        "waves_left": 2 - dispatched // 500 if state == "RUNNING" else 0,
        "last_dispatched_for": None,
        "created_at": "2026-11-29T09:00:00Z",
        "updated_at": "2026-11-29T09:00:00Z",
    }
    body.update(changes)
    return body


def test_backfill_list_prints_a_table_and_points_to_the_next_page() -> None:
    api = FakeApi({f"GET {PATH}": (200, {"backfills": [backfill_json("bf-2", dispatched=500),
                                                       backfill_json("bf-1", "COMPLETED", 720)],
                                         "next_cursor": "abc"})})  # fmt: skip

    result = run("backfill", "list", "job-1", "--limit", "2", client=api.client())

    assert result.code == 0
    header, first, second = result.out.splitlines()
    assert header.split() == [
        "BACKFILL",
        "ID",
        "STATE",
        "FROM",
        "TO",
        "DISPATCHED",
        "WAVES",
        "LEFT",
        "CREATED",
        "(UTC)",
    ]
    assert first.split() == ["bf-2", "RUNNING", "2026-11-01T00:00:00Z", "2026-11-01T12:00:00Z", "500/720", "1",
                             "2026-11-29T09:00:00Z"]  # fmt: skip
    assert second.split()[:2] == ["bf-1", "COMPLETED"] and "720/720" in second
    assert "--cursor abc" in result.err
    method, path, query, _, _ = api.sent()
    assert (method, path, query) == ("GET", PATH, {"limit": ["2"]})


def test_backfill_list_with_a_cursor_sends_it_and_the_last_page_points_nowhere() -> None:
    api = FakeApi({f"GET {PATH}": (200, {"backfills": [backfill_json("bf-1")], "next_cursor": None})})

    result = run("backfill", "list", "job-1", "--cursor", "abc", client=api.client())

    assert result.code == 0
    assert "bf-1" in result.out
    assert result.err == ""
    assert api.sent()[2] == {"cursor": ["abc"]}


def test_backfill_list_all_follows_every_page() -> None:
    pages = {
        None: {"backfills": [backfill_json("bf-3"), backfill_json("bf-2")], "next_cursor": "c1"},
        "c1": {"backfills": [backfill_json("bf-1")], "next_cursor": None},
    }

    def answer(request: HttpRequest) -> tuple[int, Any]:
        cursor = parse_qs(urlsplit(request.url).query).get("cursor", [None])[0]
        return 200, pages[cursor]

    api = FakeApi({f"GET {PATH}": answer})

    result = run("--json", "backfill", "list", "job-1", "--all", client=api.client())

    assert result.code == 0
    assert [b["backfill_id"] for b in result.json()["backfills"]] == ["bf-3", "bf-2", "bf-1"]
    assert result.json()["next_cursor"] is None
    assert [api.sent(i)[2] for i in range(2)] == [{"limit": ["100"]}, {"limit": ["100"], "cursor": ["c1"]}]


def test_backfill_list_json_is_the_api_document() -> None:
    body = {"backfills": [backfill_json("bf-1")], "next_cursor": "abc"}
    api = FakeApi({f"GET {PATH}": (200, body)})

    before = run("--json", "backfill", "list", "job-1", client=api.client())
    after = run("backfill", "list", "job-1", "--json", client=api.client())

    assert before.code == after.code == 0
    assert before.json() == after.json() == body


def test_backfill_list_of_a_job_without_backfills() -> None:
    api = FakeApi({f"GET {PATH}": (200, {"backfills": [], "next_cursor": None})})

    result = run("backfill", "list", "job-1", client=api.client())

    assert (result.code, result.out.strip()) == (0, "no backfills")


@pytest.mark.parametrize(
    ("answer", "code", "printed"),
    [
        (problem(404, "Not Found", "no job 'job-1' exists for this caller"), 3, "no job 'job-1' exists"),
        (problem(422, "Unprocessable Content", "cursor is not one this API returned for this job",
                 errors=[{"field": "cursor", "message": "cursor is not one this API returned for this job"}]),
         1, "cursor is not one this API returned"),
    ],
)  # fmt: skip
def test_backfill_list_errors_map_to_exit_codes(answer: Any, code: int, printed: str) -> None:
    api = FakeApi({f"GET {PATH}": answer})

    result = run("backfill", "list", "job-1", "--cursor", "zzz", client=api.client())

    assert result.code == code
    assert printed in result.err
    assert result.out == ""


@pytest.mark.parametrize(
    "argv", [["backfill"], ["backfill", "list"], ["backfill", "list", "job-1", "--limit", "0"], ["backfill", "show"]]
)
def test_backfill_usage_errors_are_exit_2_and_send_nothing(argv: list[str]) -> None:
    api = FakeApi()

    result = run(*argv, client=api.client())

    assert result.code == 2
    assert api.requests == []
    assert result.err
