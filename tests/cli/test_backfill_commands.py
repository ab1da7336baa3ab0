"""`punctual backfill list|start|status|cancel` with a scripted API: the table and the detail, paging (--limit,
--cursor, --all), --watch, --json and the exit codes. No network."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from punctual_cli.client import HttpRequest
from tests.cli.fakes import FakeApi, problem, run, usage_error

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
    usage_error(*argv)


# -- start, status, cancel --------------------------------------------------------------------------------

ONE = f"{PATH}/bf-1"


@pytest.fixture
def naps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """`backfill status --watch` polls at once; the waits it asked for are recorded."""
    asked: list[float] = []
    monkeypatch.setattr("punctual_cli.backfill_commands.sleep", asked.append)
    return asked


def test_backfill_start_sends_the_range_and_says_how_to_watch_it() -> None:
    api = FakeApi({f"POST {PATH}": (202, backfill_json("bf-1"))})

    result = run("backfill", "start", "job-1", "--from", "2026-11-01T01:00:00+01:00", "--to", "2026-11-01T12:00:00Z",
                 client=api.client())  # fmt: skip

    assert result.code == 0
    assert result.out.strip() == (
        "started backfill bf-1 of job job-1: 720 occurrences from 2026-11-01T00:00:00Z to 2026-11-01T12:00:00Z, "
        "2 waves left"
    )
    assert "punctual backfill status job-1 bf-1 --watch" in result.err
    method, path, query, body, headers = api.sent()
    assert (method, path, query) == ("POST", PATH, {})
    assert body == {"from": "2026-11-01T00:00:00Z", "to": "2026-11-01T12:00:00Z"}
    assert headers["Content-Type"] == "application/json"


def test_backfill_start_reads_offset_less_times_in_tz_as_submit_does() -> None:
    api = FakeApi({f"POST {PATH}": (202, backfill_json("bf-1"))})

    result = run("backfill", "start", "job-1", "--from", "2026-11-01T01:00:00", "--to", "2026-11-01T13:00",
                 "--tz", "Europe/Berlin", client=api.client())  # fmt: skip

    assert result.code == 0
    assert api.sent()[3] == {"from": "2026-11-01T00:00:00Z", "to": "2026-11-01T12:00:00Z"}


def test_backfill_start_json_is_the_api_document() -> None:
    body = backfill_json("bf-1")
    api = FakeApi({f"POST {PATH}": (202, body)})

    result = run("backfill", "start", "job-1", "--from", "2026-11-01T00:00:00Z", "--to", "2026-11-01T12:00:00Z",
                 "--json", client=api.client())  # fmt: skip

    assert (result.code, result.json(), result.err) == (0, body, "")


@pytest.mark.parametrize(
    ("answer", "code", "printed"),
    [
        (problem(422, "Unprocessable Content",
                 "'to' is in the future: occurrences from now on are the schedule's own; backfill a past range",
                 errors=[{"field": "to", "message": "'to' is in the future: occurrences from now on are the "
                                                    "schedule's own; backfill a past range"}]),
         1, "error: Unprocessable Content (HTTP 422): 'to' is in the future"),
        (problem(422, "Unprocessable Content",
                 "the range holds more than 10000 occurrences; backfill it in smaller ranges",
                 errors=[{"field": "from", "message": "the range holds more than 10000 occurrences; backfill it in "
                                                      "smaller ranges"}]),
         1, "more than 10000 occurrences"),
        (problem(409, "Conflict", "a cancelled job cannot be backfilled"), 4, "a cancelled job cannot be backfilled"),
        (problem(404, "Not Found", "no job 'job-1' exists for this caller"), 3, "no job 'job-1' exists"),
        (problem(500, "Internal Server Error", "something broke"), 5, "something broke"),
    ],
)  # fmt: skip
def test_backfill_start_errors_map_to_exit_codes(answer: Any, code: int, printed: str) -> None:
    api = FakeApi({f"POST {PATH}": answer})

    result = run("backfill", "start", "job-1", "--from", "2026-11-01T00:00:00Z", "--to", "2099-01-01T00:00:00Z",
                 client=api.client())  # fmt: skip

    assert result.code == code
    assert printed in result.err
    assert result.out == ""
    assert len(api.requests) == 1  # a POST that failed is not sent again: it could start a second backfill


def test_backfill_start_error_with_json_is_the_problem_document() -> None:
    answer = problem(422, "Unprocessable Content", "'to' is in the future",
                     errors=[{"field": "to", "message": "'to' is in the future"}])  # fmt: skip
    api = FakeApi({f"POST {PATH}": answer})

    result = run("--json", "backfill", "start", "job-1", "--from", "2026-11-01T00:00:00Z", "--to",
                 "2099-01-01T00:00:00Z", client=api.client())  # fmt: skip

    assert result.code == 1
    assert result.out == ""
    assert json.loads(result.err) == answer[1]


def test_backfill_start_refuses_an_empty_range_before_sending() -> None:
    api = FakeApi()

    result = run("backfill", "start", "job-1", "--from", "2026-11-02T00:00:00Z", "--to", "2026-11-01T00:00:00Z",
                 client=api.client())  # fmt: skip

    assert result.code == 1
    assert "refused before sending" in result.err and "'to' must not be before 'from'" in result.err
    assert api.requests == []


@pytest.mark.parametrize(
    ("argv", "printed"),
    [
        (["--from", "2026-11-01T00:00:00Z"], "--to"),
        (["--from", "yesterday", "--to", "2026-11-01T00:00:00Z"], "--from 'yesterday' is not a time"),
        (["--from", "2026-11-01T00:00:00", "--to", "2026-11-02T00:00:00Z"], "has no UTC offset"),
    ],
)
def test_backfill_start_usage_errors_are_exit_2_and_send_nothing(argv: list[str], printed: str) -> None:
    assert printed in usage_error("backfill", "start", "job-1", *argv).err


def test_backfill_status_shows_the_progress() -> None:
    body = backfill_json("bf-1", dispatched=500, last_dispatched_for="2026-11-01T08:19:00Z")
    api = FakeApi({f"GET {ONE}": (200, body)})

    result = run("backfill", "status", "job-1", "bf-1", client=api.client())

    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[:3] == ["backfill         bf-1", "job              job-1", "state            RUNNING"]
    assert "dispatched       500/720 (220 remaining)" in lines
    assert "waves            1 sent, 1 left (up to 500 occurrences each)" in lines
    assert "last dispatched  2026-11-01T08:19:00Z" in lines
    assert api.sent()[:2] == ("GET", ONE)


def test_backfill_status_json_is_the_api_document() -> None:
    body = backfill_json("bf-1", dispatched=500)
    api = FakeApi({f"GET {ONE}": (200, body)})

    result = run("--json", "backfill", "status", "job-1", "bf-1", client=api.client())

    assert (result.code, result.json()) == (0, body)


def test_backfill_status_of_an_unknown_backfill_is_exit_3() -> None:
    api = FakeApi({f"GET {ONE}": problem(404, "Not Found", "no backfill 'bf-1' of this job exists for this caller")})

    result = run("backfill", "status", "job-1", "bf-1", client=api.client())

    assert result.code == 3
    assert "no backfill 'bf-1'" in result.err


def polls(*bodies: dict[str, Any]) -> Any:
    """Answers each GET with the next body; the last one again after that."""
    left = list(bodies)

    def answer(request: HttpRequest) -> tuple[int, Any]:
        return 200, left.pop(0) if len(left) > 1 else left[0]

    return answer


def test_backfill_status_watch_polls_until_completed(naps: list[float]) -> None:
    api = FakeApi({f"GET {ONE}": polls(backfill_json("bf-1"), backfill_json("bf-1", dispatched=500),
                                       backfill_json("bf-1", dispatched=500),
                                       backfill_json("bf-1", "COMPLETED", 720))})  # fmt: skip

    result = run("backfill", "status", "job-1", "bf-1", "--watch", client=api.client())

    assert result.code == 0
    assert len(api.requests) == 4
    assert naps == [2, 2, 2]
    progress = [line.split("  ", 1)[1] for line in result.err.splitlines()]  # after the timestamp
    assert progress == [
        "RUNNING: 0/720 dispatched, 720 remaining, 2 waves left",
        "RUNNING: 500/720 dispatched, 220 remaining, 1 wave left",  # an unchanged poll prints nothing
        "COMPLETED: 720/720 dispatched",
    ]
    assert "state            COMPLETED" in result.out


def test_backfill_status_watch_json_is_a_line_per_change_and_honours_interval(naps: list[float]) -> None:
    bodies = [backfill_json("bf-1"), backfill_json("bf-1", dispatched=500), backfill_json("bf-1", "CANCELLED", 500)]
    api = FakeApi({f"GET {ONE}": polls(*bodies)})

    result = run("backfill", "status", "job-1", "bf-1", "--watch", "--interval", "5s", "--json", client=api.client())

    assert result.code == 0
    assert [json.loads(line) for line in result.out.splitlines()] == bodies
    assert naps == [5, 5]


def test_backfill_status_watch_of_a_finished_backfill_does_not_wait(naps: list[float]) -> None:
    api = FakeApi({f"GET {ONE}": (200, backfill_json("bf-1", "COMPLETED", 720))})

    result = run("backfill", "status", "job-1", "bf-1", "--watch", client=api.client())

    assert (result.code, len(api.requests), naps) == (0, 1, [])


def test_backfill_status_watch_stops_on_ctrl_c_with_130(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupt(seconds: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("punctual_cli.backfill_commands.sleep", interrupt)
    api = FakeApi({f"GET {ONE}": (200, backfill_json("bf-1"))})

    result = run("backfill", "status", "job-1", "bf-1", "--watch", client=api.client())

    assert result.code == 130
    assert "interrupted" in result.err
    assert len(api.requests) == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["backfill", "status", "job-1"],
        ["backfill", "status", "job-1", "bf-1", "--interval", "5s"],
        ["backfill", "status", "job-1", "bf-1", "--watch", "--interval", "0"],
        ["backfill", "status", "job-1", "bf-1", "--watch", "--interval", "soon"],
        ["backfill", "cancel", "job-1"],
    ],
)
def test_backfill_status_and_cancel_usage_errors_are_exit_2(argv: list[str]) -> None:
    usage_error(*argv)


def test_backfill_cancel_says_what_still_runs() -> None:
    api = FakeApi({f"DELETE {ONE}": (200, backfill_json("bf-1", "CANCELLED", 500))})

    result = run("backfill", "cancel", "job-1", "bf-1", client=api.client())

    assert result.code == 0
    assert result.out.strip() == "cancelled backfill bf-1 of job job-1 (CANCELLED: 500/720 dispatched)"
    assert "500 occurrences already dispatched still run" in result.err
    assert api.sent()[:2] == ("DELETE", ONE)


def test_backfill_cancel_json_is_the_api_document() -> None:
    body = backfill_json("bf-1", "CANCELLED", 0)
    api = FakeApi({f"DELETE {ONE}": (200, body)})

    result = run("backfill", "cancel", "job-1", "bf-1", "--json", client=api.client())

    assert (result.code, result.json(), result.err) == (0, body, "")


def test_backfill_cancel_of_a_completed_backfill_is_a_conflict() -> None:
    detail = "this backfill has already completed: every occurrence was dispatched"
    api = FakeApi({f"DELETE {ONE}": problem(409, "Conflict", detail)})

    result = run("backfill", "cancel", "job-1", "bf-1", client=api.client())

    assert result.code == 4
    assert detail in result.err
